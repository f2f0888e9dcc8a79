// Command mkexample builds the frozen example volumes of testdata/ and
// their manifest. It was run once per format version; the volumes it made
// are committed and must keep mounting forever (see testdata/README.md).
// Do not re-run it over the committed volumes to make a failing test pass:
// that would hide exactly the format break the test exists to catch.
//
// Usage (from the repository root, as root or with fusermount3):
//
//	go run ./integration/cmd/mkexample -out testdata
//
// Each volume is made with config.Create and filled by writing through an
// in-process mount (fs.Mount), so what is frozen is what the filesystem
// really writes. Afterwards the volume is mounted again read-only, walked,
// and the walk must equal what was written; the walk is what goes into the
// manifest.
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/fs"
	"github.com/twincrypt/twincrypt/integration"
)

// volumeSpec is one example volume.
type volumeSpec struct {
	name           string
	version        int // config format version
	cipher         string
	keyBytes       int
	plaintextNames bool
	build          func(b *builder)
}

var volumes = []volumeSpec{
	{name: "example-xts", version: 1, cipher: "aes-xts", keyBytes: 64, build: fullTree},
	{name: "example-cbc", version: 1, cipher: "aes-cbc", keyBytes: 32, build: fullTree},
	{name: "example-xts-plainnames", version: 1, cipher: "aes-xts", keyBytes: 64, plaintextNames: true, build: smallTree},
	// Format version 2 (2026-12-02): aes-cbc over 512-byte sectors.
	{name: "example-cbc-v2", version: 2, cipher: "aes-cbc", keyBytes: 32, build: fullTree},
}

// Content returns n deterministic bytes for the file called name: the
// concatenation of SHA-256(name ‖ 0x00 ‖ BE64(i)) for i = 0, 1, 2, …
// Every 32-byte block differs, so misplaced or swapped extents show.
func Content(name string, n int) []byte {
	out := make([]byte, 0, n+sha256.Size)
	var ctr [8]byte
	for i := uint64(0); len(out) < n; i++ {
		binary.BigEndian.PutUint64(ctr[:], i)
		h := sha256.New()
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write(ctr[:])
		out = h.Sum(out)
	}
	return out[:n]
}

// longName returns a name of exactly n bytes starting with prefix.
func longName(prefix string, n int) string {
	return prefix + strings.Repeat("x", n-len(prefix)-1) + "Z"
}

// builder writes the tree through the mount and records what it wrote.
type builder struct {
	mnt  string
	want map[string]integration.Entry
	err  error
}

func (b *builder) fail(err error) {
	if b.err == nil && err != nil {
		b.err = err
	}
}

func (b *builder) mkdir(p string, mode os.FileMode) {
	if b.err != nil {
		return
	}
	full := filepath.Join(b.mnt, p)
	b.fail(os.Mkdir(full, mode))
	b.fail(os.Chmod(full, mode))
	b.want[p] = integration.Entry{Path: p, Type: "dir", Mode: fmt.Sprintf("%04o", mode)}
}

func (b *builder) writeFile(p string, data []byte, mode os.FileMode) {
	if b.err != nil {
		return
	}
	full := filepath.Join(b.mnt, p)
	b.fail(os.WriteFile(full, data, mode))
	b.fail(os.Chmod(full, mode))
	b.want[p] = integration.Entry{Path: p, Type: "file", Mode: fmt.Sprintf("%04o", mode),
		Size: int64(len(data)), SHA256: integration.Hex(data)}
}

// file writes Content(base name, size) with mode 0644.
func (b *builder) file(p string, size int) {
	b.writeFile(p, Content(filepath.Base(p), size), 0o644)
}

// sparse makes a file of holeSize zero bytes by truncate and then writes
// tail at offset writeAt, without ever writing the zeros.
func (b *builder) sparse(p string, holeSize, writeAt int64, tail string) {
	if b.err != nil {
		return
	}
	full := filepath.Join(b.mnt, p)
	f, err := os.OpenFile(full, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		b.fail(err)
		return
	}
	b.fail(f.Truncate(holeSize))
	_, err = f.WriteAt([]byte(tail), writeAt)
	b.fail(err)
	b.fail(f.Close())
	size := max(holeSize, writeAt+int64(len(tail)))
	data := make([]byte, size)
	copy(data[writeAt:], tail)
	b.want[p] = integration.Entry{Path: p, Type: "file", Mode: "0644", Size: size, SHA256: integration.Hex(data)}
}

func (b *builder) symlink(target, p string) {
	if b.err != nil {
		return
	}
	b.fail(os.Symlink(target, filepath.Join(b.mnt, p)))
	b.want[p] = integration.Entry{Path: p, Type: "symlink", Mode: "0777",
		Size: int64(len(target)), SHA256: integration.Hex([]byte(target)), Target: target}
}

func (b *builder) hardlink(old, p string) {
	if b.err != nil {
		return
	}
	b.fail(os.Link(filepath.Join(b.mnt, old), filepath.Join(b.mnt, p)))
	e := b.want[old]
	e.Path, e.HardLinkOf = p, old
	b.want[p] = e
}

// fullTree is the tree of the two main example volumes.
func fullTree(b *builder) {
	// Sizes around the AES block (16) and the extent (4096), and
	// several extents with a partial tail.
	b.file("empty", 0)
	for _, n := range []int{1, 15, 16, 17, 4095, 4096, 4097, 10000, 70000} {
		b.file(fmt.Sprintf("size-%d", n), n)
	}
	b.writeFile("exec.sh", []byte("#!/bin/sh\necho twincrypt example volume\n"), 0o755)
	// 64 extents of hole, then a 3-byte tail unit.
	b.sparse("sparse", 256<<10, 256<<10, "end")
	// 16 extents whose last holds "end" in its last bytes: the file ends
	// on an extent boundary, so its tail unit is the bare trailer.
	b.sparse("sparse-aligned", 64<<10, 64<<10-3, "end")

	b.mkdir("dir", 0o755)
	b.file("dir/a.txt", 100)
	b.mkdir("dir/empty-dir", 0o755) // kept by git: its lower holds the directory IV
	b.mkdir("dir/nested", 0o755)
	b.file("dir/nested/b.bin", 5000)
	b.mkdir("dir/nested/deeper", 0o755)
	b.file("dir/nested/deeper/c.txt", 300)
	b.file("dir/nested/deeper/empty", 0)
	b.symlink("../../size-4097", "dir/nested/link-up")

	// Names: 150 bytes encrypt to 214 (stored as is), 200 and 255 bytes
	// to 278 and 342 (the long-name scheme), also inside a directory
	// whose own name is long.
	b.file("dir/"+longName("name150-", 150), 150)
	b.file(longName("name200-", 200), 200)
	n255 := longName("name255-", 255)
	b.file(n255, 255)
	d255 := longName("dir255-", 255)
	b.mkdir(d255, 0o755)
	b.file(d255+"/inside.txt", 64)
	b.file(d255+"/"+n255, 4097)
	b.file("ünïcödé ñame 名前.txt", 42)
	b.file("with space.txt", 33)

	b.symlink("size-17", "link-size-17")
	b.symlink("does/not/exist", "dangling")
	b.symlink("dir/nested", "link-dir")
	b.symlink(n255, "link-long")
	// The link sorts after its original, so a walk meets the original first.
	b.mkdir("x-links", 0o755)
	b.hardlink("size-10000", "x-links/hardlink-size-10000")
}

// smallTree is the tree of the plaintext-names volume. Its lower
// directory shows names as they are, so it has no empty directory (git
// would drop it) and only ASCII names.
func smallTree(b *builder) {
	b.writeFile("hello.txt", []byte("hello, twincrypt\n"), 0o644)
	b.file("size-4097", 4097)
	b.file("size-17", 17)
	b.writeFile("exec.sh", []byte("#!/bin/sh\necho twincrypt example volume\n"), 0o755)
	b.mkdir("sub", 0o755)
	b.file("sub/inner.bin", 5000)
	b.file("sub/"+longName("name200-", 200), 200)
	b.symlink("../hello.txt", "sub/link")
}

func makeVolume(out string, spec volumeSpec) (integration.ManifestVolume, error) {
	mv := integration.ManifestVolume{Name: spec.name, Cipher: spec.cipher, KeyBytes: spec.keyBytes, PlaintextNames: spec.plaintextNames, Version: spec.version}
	dir := filepath.Join(out, spec.name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return mv, err
	}
	cfg, master, err := config.Create(dir, []byte(integration.ExamplePassphrase), config.Options{
		Version: spec.version, Cipher: spec.cipher, KeyBytes: spec.keyBytes, PlaintextNames: spec.plaintextNames,
		KDF: integration.CheapKDF(), Creator: fmt.Sprintf("twincrypt mkexample: frozen example volume, format %d", spec.version),
	})
	if err != nil {
		return mv, err
	}
	mnt, err := os.MkdirTemp("", "mkexample-mnt-")
	if err != nil {
		return mv, err
	}
	defer os.Remove(mnt)
	log := zerolog.New(zerolog.ConsoleWriter{Out: os.Stderr})
	o := fs.Options{Lower: dir, Config: cfg, MasterKey: master, Log: log}

	srv, err := integration.MountDir(mnt, o)
	if err != nil {
		return mv, err
	}
	b := &builder{mnt: mnt, want: map[string]integration.Entry{}}
	spec.build(b)
	if err := integration.UnmountDir(srv, mnt); err != nil {
		return mv, err
	}
	if b.err != nil {
		return mv, fmt.Errorf("%s: writing the tree: %w", spec.name, b.err)
	}

	// Read it all back through a fresh read-only mount.
	o.ReadOnly = true
	srv, err = integration.MountDir(mnt, o)
	if err != nil {
		return mv, err
	}
	got, werr := integration.WalkTree(mnt)
	if err := integration.UnmountDir(srv, mnt); err != nil {
		return mv, err
	}
	if werr != nil {
		return mv, fmt.Errorf("%s: walking the tree: %w", spec.name, werr)
	}
	var problems []string
	for _, e := range got {
		w, ok := b.want[e.Path]
		switch {
		case !ok:
			problems = append(problems, "unexpected path "+e.Path)
		case w != e:
			problems = append(problems, fmt.Sprintf("%s: wrote %+v, read back %+v", e.Path, w, e))
		}
		delete(b.want, e.Path)
	}
	for p := range b.want {
		problems = append(problems, "missing path "+p)
	}
	if len(problems) > 0 {
		return mv, fmt.Errorf("%s: the mount does not read back what was written:\n  %s", spec.name, strings.Join(problems, "\n  "))
	}
	mv.Entries = got
	return mv, nil
}

func main() {
	out := flag.String("out", "", "directory to create the example volumes and manifest in (normally testdata)")
	force := flag.Bool("force", false, "replace existing example volumes (breaks the frozen-format promise for committed ones)")
	only := flag.String("only", "", "comma-separated names of the volumes to make (default: all); for a new format version, make only its new volumes")
	flag.Parse()
	if *only != "" {
		want := map[string]bool{}
		for _, n := range strings.Split(*only, ",") {
			want[n] = true
		}
		var keep []volumeSpec
		for _, v := range volumes {
			if want[v.name] {
				keep = append(keep, v)
				delete(want, v.name)
			}
		}
		if len(want) > 0 || len(keep) == 0 {
			fmt.Fprintf(os.Stderr, "mkexample: -only %q names no volume, or an unknown one\n", *only)
			os.Exit(2)
		}
		volumes = keep
	}
	if *out == "" {
		fmt.Fprintln(os.Stderr, "usage: mkexample -out DIR [-force]")
		os.Exit(2)
	}
	// Modes are set explicitly, but keep the umask from interfering with
	// the directory IVs and sidecars the filesystem creates.
	syscall.Umask(0o022)
	if err := run(*out, *force); err != nil {
		fmt.Fprintln(os.Stderr, "mkexample:", err)
		os.Exit(1)
	}
}

func run(out string, force bool) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, v := range volumes {
		p := filepath.Join(out, v.name)
		if _, err := os.Lstat(p); err == nil {
			if !force {
				return fmt.Errorf("%s exists: the example volumes are frozen; use -force only to make a new set", p)
			}
			if err := os.RemoveAll(p); err != nil {
				return err
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	m := integration.Manifest{
		Comment: []string{
			"Plaintext view of the frozen example volumes, written by integration/cmd/mkexample.",
			"Every future twincrypt must mount these volumes and read back exactly this (integration/example_test.go).",
			"Modes: only the owner-execute bit of files is compared (git keeps nothing else). hardlink_of: git stores both names as separate files.",
			"The volumes use a deliberately cheap KDF (argon2id, 1 pass, 1 MiB): never copy these parameters.",
		},
		Passphrase: integration.ExamplePassphrase,
	}
	for _, v := range volumes {
		mv, err := makeVolume(out, v)
		if err != nil {
			return err
		}
		m.Volumes = append(m.Volumes, mv)
		fmt.Printf("%s: %d paths\n", v.name, len(mv.Entries))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, integration.ManifestFile), buf.Bytes(), 0o644)
}
