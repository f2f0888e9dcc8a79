package kvm

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// EcryptfsPassphrase is the mount passphrase of every reference tree (with
// mount.ecryptfs's default salt, 0011223344556677).
const EcryptfsPassphrase = "twincrypt-ecryptfs-reference"

// ecryptfsConfig is one way of mounting eCryptfs, as its users choose.
type ecryptfsConfig struct {
	Name           string `json:"name"`
	KeyBytes       int    `json:"key_bytes"`
	FilenameCrypto bool   `json:"filename_crypto"`
	XattrMetadata  bool   `json:"xattr_metadata"` // the header in user.ecryptfs, not the file's first 8 KiB
	small          bool   // the small tree, for testdata/ecryptfs
}

var ecryptfsConfigs = []ecryptfsConfig{
	{Name: "aes128-fnek-header", KeyBytes: 16, FilenameCrypto: true},
	{Name: "aes256-plainnames-header", KeyBytes: 32},
	{Name: "aes256-fnek-xattr", KeyBytes: 32, FilenameCrypto: true, XattrMetadata: true},
	{Name: "aes128-plainnames-xattr", KeyBytes: 16, XattrMetadata: true},
	// Small enough to commit (testdata/ecryptfs): headers in the files,
	// since git keeps no xattrs.
	{Name: "small-aes128-fnek", KeyBytes: 16, FilenameCrypto: true, small: true},
	{Name: "small-aes256-plainnames", KeyBytes: 32, small: true},
}

// EcryptfsManifest describes reference trees: what the kernel's eCryptfs
// shows through the mount for each lower tree.
type EcryptfsManifest struct {
	Comment    []string              `json:"comment"`
	Passphrase string                `json:"passphrase"`
	Salt       string                `json:"salt"`
	Trees      []EcryptfsManifestDir `json:"trees"`
}

// EcryptfsManifestDir is one lower tree (Lower, relative to the manifest).
type EcryptfsManifestDir struct {
	ecryptfsConfig
	Lower        string          `json:"lower"`
	MountOptions string          `json:"mount_options"`
	Sig          string          `json:"sig"`      // the mount key's signature
	FnekSig      string          `json:"fnek_sig"` // the filename key's, with filename_crypto
	Kernel       string          `json:"kernel"`
	Entries      []EcryptfsEntry `json:"entries"`
}

// EcryptfsEntry is one plaintext entry as the kernel's mount shows it.
type EcryptfsEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"` // "f", "d" or "l"
	Mode   string `json:"mode"` // permission bits, octal
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	Target string `json:"target,omitempty"`
	Mtime  int64  `json:"mtime"`
}

// sourceTree writes the plaintext the trees hold: sizes around AES blocks
// and eCryptfs's 4096-byte extents, 1 MiB and more, a sparse file, names
// up to eCryptfs's 143-byte limit for encrypted names, symlinks (also
// dangling, absolute, long), a hard link, modes, an empty directory.
func sourceTree(t *testing.T, dir string, small bool) {
	t.Helper()
	file := func(name string, data []byte, mode os.FileMode) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string) {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	if small {
		file("hello.txt", []byte("Hello from the kernel's eCryptfs.\n"), 0o644)
		file("empty", nil, 0o644)
		file("extent", pattern("ecryptfs/extent", 4096), 0o600)
		file("extent+1", pattern("ecryptfs/extent+1", 4097), 0o644)
		file("sub/dir/nested file.txt", []byte("nested\n"), 0o755)
		link("link-to-hello", "hello.txt")
		return
	}
	for _, n := range []int{0, 1, 15, 16, 17, 4095, 4096, 4097, 8192, 12289, 1<<20 + 4097} {
		file(fmt.Sprintf("size-%d", n), pattern(fmt.Sprintf("ecryptfs/size-%d", n), int64(n)), 0o644)
	}
	file("mode-0600", []byte("private\n"), 0o600)
	file("mode-0755", []byte("#!/bin/sh\necho hi\n"), 0o755)
	file("dir/sub/deep file with spaces.txt", []byte("deep\n"), 0o644)
	file("ünïcødé-名前.txt", []byte("unicode\n"), 0o644)
	file(strings.Repeat("L", 143), []byte("the longest name eCryptfs encrypts\n"), 0o644)
	file("dir/"+strings.Repeat("m", 100), []byte("a 100-byte name\n"), 0o644)
	// Sparse: data at 0 and at 2 MiB, a hole between, a hole at the end.
	f, err := os.Create(filepath.Join(dir, "sparse"))
	if err != nil {
		t.Fatal(err)
	}
	_, err1 := f.WriteAt(pattern("ecryptfs/sparse-a", 100), 0)
	_, err2 := f.WriteAt(pattern("ecryptfs/sparse-b", 5000), 2<<20)
	if err := firstErr(err1, err2, f.Truncate(3<<20+5), f.Close()); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "size-1"), filepath.Join(dir, "hardlink-to-size-1")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "empty-dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	link("link-rel", "dir/sub/deep file with spaces.txt")
	link("link-abs", "/etc/hostname")
	link("link-dangling", "nowhere")
	link("link-long-target", strings.Repeat("t", 200))
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// listTree lists dir as the guest's listing does, for the comparison.
func listTree(t *testing.T, dir string) []EcryptfsEntry {
	t.Helper()
	var out []EcryptfsEntry
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := EcryptfsEntry{Path: rel, Mode: fmt.Sprintf("%o", st.Mode().Perm())}
		switch {
		case st.Mode().IsRegular():
			e.Type, e.Size = "f", st.Size()
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.SHA256 = sha256Hex(data)
		case st.IsDir():
			e.Type = "d"
		case st.Mode()&os.ModeSymlink != 0:
			e.Type = "l"
			if e.Target, err = os.Readlink(p); err != nil {
				return err
			}
			e.Mode = ""
		}
		out = append(out, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// parseGuestListing reads the guest's `find -printf` listing and
// sha256sum output of the mounted tree.
func parseGuestListing(t *testing.T, listing, sums string) []EcryptfsEntry {
	t.Helper()
	sha := map[string]string{}
	for _, l := range strings.Split(strings.TrimRight(sums, "\n"), "\n") {
		if h, p, ok := strings.Cut(l, "  "); ok {
			sha[strings.TrimPrefix(p, "./")] = h
		}
	}
	var out []EcryptfsEntry
	for _, l := range strings.Split(strings.TrimRight(listing, "\n"), "\n") {
		f := strings.Split(l, "\t")
		if len(f) != 6 {
			t.Fatalf("guest listing line %q", l)
		}
		size, _ := strconv.ParseInt(f[2], 10, 64)
		mtime, _ := strconv.ParseFloat(f[3], 64)
		e := EcryptfsEntry{Type: f[0], Mode: f[1], Path: strings.TrimPrefix(f[4], "./"), Mtime: int64(mtime)}
		switch e.Type {
		case "f":
			e.Size, e.SHA256 = size, sha[e.Path]
		case "l":
			e.Target, e.Mode = f[5], ""
		}
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func sameEntries(a, b []EcryptfsEntry) string {
	strip := func(es []EcryptfsEntry) string {
		var s []string
		for _, e := range es {
			e.Mtime = 0
			s = append(s, fmt.Sprintf("%+v", e))
		}
		return strings.Join(s, "\n")
	}
	if x, y := strip(a), strip(b); x != y {
		return fmt.Sprintf("kernel shows:\n%s\nwritten:\n%s", x, y)
	}
	return ""
}

// ecryptfsOptions is the -o of mount -t ecryptfs for c.
func (c ecryptfsConfig) mountOptions(passwdFile string) string {
	o := []string{"key=passphrase:passphrase_passwd_file=" + passwdFile, "ecryptfs_cipher=aes",
		fmt.Sprintf("ecryptfs_key_bytes=%d", c.KeyBytes), "ecryptfs_passthrough=n", "no_sig_cache"}
	if c.FilenameCrypto {
		o = append(o, "ecryptfs_enable_filename_crypto=y", "ecryptfs_fnek_sig=$FNEK")
	} else {
		o = append(o, "ecryptfs_enable_filename_crypto=n")
	}
	if c.XattrMetadata {
		// mount.ecryptfs's name for the kernel's ecryptfs_xattr_metadata,
		// which it drops silently when given under the kernel's name.
		o = append(o, "ecryptfs_xattr=y")
	}
	return strings.Join(o, ",")
}

// TestEcryptfsReferenceTrees writes trees of files through the kernel's
// eCryptfs in the VM, one per configuration (key size, filename
// encryption, header in the file or in an xattr), reads them back through
// a fresh mount and compares them with what was written, and keeps each
// LOWER tree (a tar with its xattrs, and extracted) with a manifest of the
// plaintext under the cache directory's ecryptfs-reference/: the reference
// a userspace eCryptfs reader is tested against.
// TestUpdateEcryptfsTestdata copies the small ones into testdata/ecryptfs.
func TestEcryptfsReferenceTrees(t *testing.T) {
	k := testKernel(t)
	share := t.TempDir()
	if err := os.WriteFile(filepath.Join(share, "passwd"), []byte("passphrase_passwd="+EcryptfsPassphrase+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sourceTree(t, filepath.Join(share, "plain"), false)
	sourceTree(t, filepath.Join(share, "plain-small"), true)
	if err := os.MkdirAll(filepath.Join(share, "plain-longname"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Without filename encryption names keep the lower filesystem's 255
	// bytes; with it eCryptfs refuses more than 143.
	if err := os.WriteFile(filepath.Join(share, "plain-longname", strings.Repeat("N", 255)), []byte("255\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	var script strings.Builder
	script.WriteString(`set -e
mkfs.ext4 -q "$SCRATCH"
mkdir -p /tmp/lower-fs out
mount "$SCRATCH" /tmp/lower-fs
# The keys go into root's keyring; the signatures name them. Again
# before every mount: mount.ecryptfs mounts with ecryptfs_unlink_sigs, so
# an unmount takes both keys out of the keyring.
addkeys() { printf '%s\n' "$PASS" | ecryptfs-add-passphrase --fnek - >out/sigs; }
addkeys
SIG=$(sed -n 's/.*sig \[\([0-9a-f]*\)\].*/\1/p' out/sigs | sed -n 1p)
FNEK=$(sed -n 's/.*sig \[\([0-9a-f]*\)\].*/\1/p' out/sigs | sed -n 2p)
echo "$SIG $FNEK" >out/sig
uname -r >out/kernel
# Every file is read before the listing: with the header in an xattr,
# eCryptfs reports the lower file's size until the file has been opened
# once after the mount.
list() { (cd "$1" && find . -type f -exec cat {} + >/dev/null && find . -mindepth 1 -printf '%y\t%m\t%s\t%T@\t%p\t%l\n' | LC_ALL=C sort >"$2.list" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum >"$2.sums"); }
`)
	for _, c := range ecryptfsConfigs {
		src := "plain"
		if c.small {
			src = "plain-small"
		}
		fmt.Fprintf(&script, `
n=%[1]s
mkdir -p /tmp/lower-fs/$n /tmp/upper-$n
addkeys
mount -t ecryptfs -o "%[2]s" /tmp/lower-fs/$n /tmp/upper-$n </dev/null
cp -a %[3]s/. /tmp/upper-$n/
`, c.Name, c.mountOptions(GuestShare+"/passwd"), src)
		if !c.FilenameCrypto && !c.small {
			fmt.Fprintf(&script, "cp -a plain-longname/. /tmp/upper-$n/\n")
		}
		if c.FilenameCrypto && !c.small {
			// The limit holds: a 144-byte name is refused.
			fmt.Fprintf(&script, "if touch /tmp/upper-$n/%s 2>/dev/null; then echo 144-byte name accepted >out/$n.longname; fi\n", strings.Repeat("X", 144))
		}
		// Read back through a fresh mount, so nothing comes from the
		// first mount's page cache.
		fmt.Fprintf(&script, `umount /tmp/upper-$n
addkeys
mount -t ecryptfs -o "%[1]s" /tmp/lower-fs/$n /tmp/upper-$n </dev/null
list /tmp/upper-$n "$SHARE/out/$n"
umount /tmp/upper-$n
tar --xattrs --xattrs-include='*' --numeric-owner -cpf out/$n.lower.tar -C /tmp/lower-fs/$n .
`, c.mountOptions(GuestShare+"/passwd"))
	}
	script.WriteString("umount /tmp/lower-fs\n")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := Run(ctx, k, script.String(), Options{Share: share, ScratchMiB: 256, Env: []string{"PASS=" + EcryptfsPassphrase}, Console: consoleLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest %s under %s: boot %v, whole run %v", res.Release, res.Accel, res.Boot.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond))
	if res.ExitStatus != 0 {
		t.Fatalf("guest script exit status %d:\n%s", res.ExitStatus, res.Output)
	}
	out := filepath.Join(share, "out")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	sigs := strings.Fields(read("sig"))
	if len(sigs) != 2 {
		t.Fatalf("key signatures %q", read("sigs"))
	}
	kernelRel := strings.TrimSpace(read("kernel"))

	refDir := refDir()
	tmpRef := refDir + ".new"
	_ = os.RemoveAll(tmpRef)
	if err := os.MkdirAll(tmpRef, 0o755); err != nil {
		t.Fatal(err)
	}
	full := EcryptfsManifest{Passphrase: EcryptfsPassphrase, Salt: "0011223344556677", Comment: ecryptfsComment(res)}
	small := full
	for _, c := range ecryptfsConfigs {
		t.Run(c.Name, func(t *testing.T) {
			src := filepath.Join(share, "plain")
			if c.small {
				src = filepath.Join(share, "plain-small")
			}
			want := listTree(t, src)
			if !c.FilenameCrypto && !c.small {
				want = append(want, listTree(t, filepath.Join(share, "plain-longname"))...)
				sort.Slice(want, func(i, j int) bool { return want[i].Path < want[j].Path })
			}
			got := parseGuestListing(t, read(c.Name+".list"), read(c.Name+".sums"))
			if d := sameEntries(got, want); d != "" {
				t.Errorf("the kernel's eCryptfs reads back a different tree:\n%s", d)
			}
			if b, err := os.ReadFile(filepath.Join(out, c.Name+".longname")); err == nil {
				t.Errorf("eCryptfs with filename encryption: %s", b)
			}
			lower := filepath.Join(tmpRef, c.Name, "lower")
			if err := os.MkdirAll(lower, 0o755); err != nil {
				t.Fatal(err)
			}
			tarFile := filepath.Join(out, c.Name+".lower.tar")
			if b, err := exec.Command("tar", "--xattrs", "--xattrs-include=*", "--numeric-owner", "-xpf", tarFile, "-C", lower).CombinedOutput(); err != nil {
				t.Fatalf("extract the lower tree: %v %s", err, b)
			}
			if err := os.Rename(tarFile, filepath.Join(tmpRef, c.Name, "lower.tar")); err != nil {
				t.Fatal(err)
			}
			checkLower(t, lower, c, want)
			d := EcryptfsManifestDir{ecryptfsConfig: c, Lower: c.Name + "/lower", MountOptions: strings.ReplaceAll(c.mountOptions("FILE"), "$FNEK", sigs[1]),
				Sig: sigs[0], Kernel: kernelRel, Entries: got}
			if c.FilenameCrypto {
				d.FnekSig = sigs[1]
			}
			if c.small {
				small.Trees = append(small.Trees, d)
			} else {
				full.Trees = append(full.Trees, d)
			}
		})
	}
	if t.Failed() {
		return
	}
	full.Trees = append(full.Trees, small.Trees...)
	writeJSON(t, filepath.Join(tmpRef, "manifest.json"), full)
	_ = os.RemoveAll(refDir)
	if err := os.Rename(tmpRef, refDir); err != nil {
		t.Fatal(err)
	}
	t.Logf("reference trees and manifest in %s", refDir)

}

// refDir is where TestEcryptfsReferenceTrees keeps the trees.
func refDir() string {
	cacheDir := os.Getenv("TWINCRYPT_VM_CACHE")
	if cacheDir == "" {
		cacheDir = DefaultCacheDir
	}
	return filepath.Join(cacheDir, "ecryptfs-reference")
}

// TestUpdateEcryptfsTestdata copies the small reference trees the last
// TestEcryptfsReferenceTrees made into testdata/ecryptfs, with their
// manifest, when TWINCRYPT_UPDATE_ECRYPTFS_TESTDATA=1.
func TestUpdateEcryptfsTestdata(t *testing.T) {
	if os.Getenv("TWINCRYPT_UPDATE_ECRYPTFS_TESTDATA") != "1" {
		t.Skip("set TWINCRYPT_UPDATE_ECRYPTFS_TESTDATA=1 to replace testdata/ecryptfs")
	}
	b, err := os.ReadFile(filepath.Join(refDir(), "manifest.json"))
	if err != nil {
		t.Fatalf("no reference trees (run TestEcryptfsReferenceTrees first): %v", err)
	}
	var m EcryptfsManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	td := filepath.Join("..", "..", "testdata", "ecryptfs")
	if err := os.RemoveAll(td); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(td, 0o755); err != nil {
		t.Fatal(err)
	}
	small := m
	small.Trees = nil
	for _, d := range m.Trees {
		if !strings.HasPrefix(d.Name, "small-") {
			continue
		}
		if err := os.MkdirAll(filepath.Join(td, d.Name), 0o755); err != nil {
			t.Fatal(err)
		}
		if b, err := exec.Command("cp", "-a", filepath.Join(refDir(), d.Lower), filepath.Join(td, d.Name)+"/").CombinedOutput(); err != nil {
			t.Fatalf("cp: %v %s", err, b)
		}
		small.Trees = append(small.Trees, d)
	}
	writeJSON(t, filepath.Join(td, "manifest.json"), small)
}

// checkLower checks what the lower tree must look like for the reference
// to be worth anything: every name there, ciphertext (no plaintext file
// content appears in it), encrypted names where asked for.
func checkLower(t *testing.T, lower string, c ecryptfsConfig, want []EcryptfsEntry) {
	t.Helper()
	var files, fnek int
	err := filepath.WalkDir(lower, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == lower {
			return err
		}
		if strings.HasPrefix(d.Name(), "ECRYPTFS_FNEK_ENCRYPTED.") {
			fnek++
		}
		if d.Type().IsRegular() {
			files++
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			// The header (8192 bytes, then whole 4096-byte extents) is
			// either the file's start or its user.ecryptfs xattr.
			_, xerr := unix.Getxattr(p, "user.ecryptfs", nil)
			switch {
			case c.XattrMetadata && xerr != nil:
				t.Errorf("%s: no user.ecryptfs xattr: %v", p, xerr)
			case !c.XattrMetadata && xerr == nil:
				t.Errorf("%s: a user.ecryptfs xattr, but the header belongs in the file", p)
			case c.XattrMetadata && len(data)%4096 != 0, !c.XattrMetadata && (len(data) < 8192 || len(data)%4096 != 0):
				t.Errorf("%s: %d bytes is not the layout of its header option", p, len(data))
			}
			if bytes.Contains(data, []byte("the longest name eCryptfs encrypts")) || bytes.Contains(data, []byte("Hello from the kernel")) {
				t.Errorf("%s holds plaintext", p)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	wantFiles := 0
	for _, e := range want {
		if e.Type == "f" {
			wantFiles++
		}
	}
	if files+1 < wantFiles { // the hard link is one lower file
		t.Errorf("%d lower files for %d plaintext files", files, wantFiles)
	}
	if c.FilenameCrypto && fnek < len(want)-1 {
		t.Errorf("filename encryption on, but only %d of %d lower names are encrypted", fnek, len(want))
	}
	if !c.FilenameCrypto && fnek > 0 {
		t.Errorf("filename encryption off, but %d lower names are encrypted", fnek)
	}
}

func ecryptfsComment(res *Result) []string {
	return []string{
		"Lower trees written by the Linux kernel's eCryptfs (" + res.Release + ", in integration/kvm's VM under " + res.Accel + "),",
		"mounted with mount.ecryptfs (ecryptfs-utils) as mount_options says, FILE holding passphrase_passwd=PASSPHRASE.",
		"The keys: ecryptfs-add-passphrase --fnek with the passphrase and the default salt; sig and fnek_sig are their signatures.",
		"entries: the plaintext tree as the kernel shows it through a fresh mount (sha256 of each file's content).",
		"Made by TestEcryptfsReferenceTrees; lower.tar keeps the xattrs (user.ecryptfs) of the xattr_metadata trees.",
		"Git keeps neither xattrs nor mtimes: the committed examples are headers-in-file trees, their mtimes those of the run.",
	}
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEcryptfsTestdata checks the committed example trees against their
// manifest without the VM, for what eCryptfs's layout fixes: one lower
// file per plaintext file, each an 8192-byte header followed by the
// content in whole 4096-byte extents; names and symlink targets as they
// are (filename encryption off) or each name ECRYPTFS_FNEK_ENCRYPTED.
// (on). A reader is tested against the content; this keeps the example
// honest.
func TestEcryptfsTestdata(t *testing.T) {
	td := filepath.Join("..", "..", "testdata", "ecryptfs")
	b, err := os.ReadFile(filepath.Join(td, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m EcryptfsManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Passphrase != EcryptfsPassphrase || len(m.Trees) == 0 {
		t.Fatalf("manifest: passphrase %q, %d trees", m.Passphrase, len(m.Trees))
	}
	for _, d := range m.Trees {
		t.Run(d.Name, func(t *testing.T) {
			lower := filepath.Join(td, d.Lower)
			var lowerSizes []int64
			err := filepath.WalkDir(lower, func(p string, e fs.DirEntry, err error) error {
				if err != nil || p == lower {
					return err
				}
				if d.FilenameCrypto != strings.HasPrefix(e.Name(), "ECRYPTFS_FNEK_ENCRYPTED.") {
					t.Errorf("lower name %s with filename_crypto %v", e.Name(), d.FilenameCrypto)
				}
				if e.Type().IsRegular() {
					st, err := os.Stat(p)
					if err != nil {
						return err
					}
					lowerSizes = append(lowerSizes, st.Size())
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var wantSizes []int64
			for _, e := range d.Entries {
				if e.Type == "f" {
					wantSizes = append(wantSizes, 8192+(e.Size+4095)/4096*4096)
				}
				if !d.FilenameCrypto {
					p := filepath.Join(lower, e.Path)
					switch e.Type {
					case "f":
						want := 8192 + (e.Size+4095)/4096*4096
						if st, err := os.Stat(p); err != nil {
							t.Error(err)
						} else if st.Size() != want {
							t.Errorf("%s: lower file of %d bytes, want %d", e.Path, st.Size(), want)
						}
					case "l":
						// Symlink targets are encrypted only with filename
						// encryption.
						if got, err := os.Readlink(p); err != nil || got != e.Target {
							t.Errorf("%s: lower link %q, %v; want %q", e.Path, got, err, e.Target)
						}
					}
				}
			}
			sort.Slice(lowerSizes, func(i, j int) bool { return lowerSizes[i] < lowerSizes[j] })
			sort.Slice(wantSizes, func(i, j int) bool { return wantSizes[i] < wantSizes[j] })
			if fmt.Sprint(lowerSizes) != fmt.Sprint(wantSizes) {
				t.Errorf("lower file sizes %v, want %v", lowerSizes, wantSizes)
			}
		})
	}
}
