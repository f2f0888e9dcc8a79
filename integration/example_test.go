package integration

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// testdataDir holds the frozen example volumes (the tests run in
// integration/).
const testdataDir = "../testdata"

// brokenPromise starts every failure of the frozen-volume tests.
const brokenPromise = "ON-DISK FORMAT CHANGED, a broken promise"

// promiseExplained is logged once when a frozen volume fails.
const promiseExplained = `The example volumes in testdata/ were written by an earlier twincrypt and
are frozen: every later twincrypt must mount them and read back exactly what
testdata/example-manifest.json lists (cipher/FORMAT.md: "the previous version
stays readable"). This test failing means the on-disk format changed and old
user volumes would no longer read back correctly. Fix the code, or bump the
format version and keep reading version 1. Never regenerate testdata to make
this test pass.`

// TestExampleVolumes mounts a copy of each frozen example volume read-only
// and compares everything it shows with the manifest.
func TestExampleVolumes(t *testing.T) {
	m, err := ReadManifest(filepath.Join(testdataDir, ManifestFile))
	if err != nil {
		t.Fatalf("%s: cannot read the manifest of the frozen volumes: %v", brokenPromise, err)
	}
	if m.Passphrase != ExamplePassphrase {
		t.Errorf("manifest passphrase %q, want %q", m.Passphrase, ExamplePassphrase)
	}
	// Every example volume on disk is in the manifest and vice versa.
	dirs, err := filepath.Glob(filepath.Join(testdataDir, "example-*"))
	if err != nil {
		t.Fatal(err)
	}
	onDisk := map[string]bool{}
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			onDisk[filepath.Base(d)] = true
		}
	}
	for _, v := range m.Volumes {
		if !onDisk[v.Name] {
			t.Errorf("%s: volume %s is in the manifest but missing from testdata/", brokenPromise, v.Name)
		}
		delete(onDisk, v.Name)
	}
	for d := range onDisk {
		t.Errorf("testdata/%s is not in %s", d, ManifestFile)
	}
	if len(m.Volumes) < 3 {
		t.Errorf("%s: the manifest lists %d volumes, want at least 3", brokenPromise, len(m.Volumes))
	}

	for _, mv := range m.Volumes {
		t.Run(mv.Name, func(t *testing.T) {
			t.Cleanup(func() {
				if t.Failed() {
					t.Log(promiseExplained)
				}
			})
			checkExampleVolume(t, mv)
		})
	}
}

func checkExampleVolume(t *testing.T, mv ManifestVolume) {
	src := filepath.Join(testdataDir, mv.Name)
	if _, err := os.Stat(filepath.Join(src, config.FileName)); err != nil {
		t.Fatalf("%s: %v", brokenPromise, err)
	}
	// Never mount testdata in place: git does not keep the 0400 modes of
	// the directory IVs, and nothing may ever write to the frozen copy.
	vol := &Volume{Variant: Variant{Name: mv.Name, Cipher: mv.Cipher, KeyBytes: mv.KeyBytes, PlaintextNames: mv.PlaintextNames},
		Lower: filepath.Join(t.TempDir(), "lower"), Mnt: filepath.Join(t.TempDir(), "mnt"), Log: &SyncBuffer{}}
	if err := copyTree(src, vol.Lower); err != nil {
		t.Fatalf("copying %s: %v", src, err)
	}
	if err := os.Mkdir(vol.Mnt, 0o755); err != nil {
		t.Fatal(err)
	}

	cfg, err := config.Load(vol.Lower)
	if err != nil {
		t.Fatalf("%s: config.Load: %v", brokenPromise, err)
	}
	if cfg.Cipher != mv.Cipher || cfg.KeyBytes != mv.KeyBytes || cfg.PlaintextNames != mv.PlaintextNames {
		t.Errorf("%s: config says cipher %s key_bytes %d plaintext_names %t; manifest says %s %d %t",
			brokenPromise, cfg.Cipher, cfg.KeyBytes, cfg.PlaintextNames, mv.Cipher, mv.KeyBytes, mv.PlaintextNames)
	}
	if wantVersion := max(mv.Version, 1); cfg.Version != wantVersion {
		t.Errorf("%s: config version %d, manifest says %d", brokenPromise, cfg.Version, wantVersion)
	}
	t.Run("wrong passphrase", func(t *testing.T) {
		for _, p := range []string{"twincrypt-exampl", "twincrypt-example ", "Twincrypt-example"} {
			if key, err := cfg.Unlock([]byte(p)); !errors.Is(err, config.ErrWrongPassphrase) {
				t.Errorf("Unlock(%q) = %d-byte key, %v; want config.ErrWrongPassphrase", p, len(key), err)
			}
		}
	})
	master, err := cfg.Unlock([]byte(ExamplePassphrase))
	if err != nil {
		t.Fatalf("%s: the example passphrase no longer unlocks %s: %v", brokenPromise, mv.Name, err)
	}
	vol.Config, vol.MasterKey = cfg, master
	vol.Mount(t, true)

	t.Run("walk", func(t *testing.T) {
		got, err := WalkTree(vol.Mnt)
		if err != nil {
			t.Errorf("%s: walking the mount: %v", brokenPromise, err)
		}
		compareEntries(t, mv.Entries, got)
	})

	t.Run("lookup by name", func(t *testing.T) {
		// A fresh mount, and no directory listing: every name goes
		// plaintext → lower name, the other way round from the walk.
		vol.Remount(t)
		for _, e := range mv.Entries {
			checkByName(t, vol.Mnt, e)
		}
	})

	t.Run("read-only", func(t *testing.T) {
		RequireMounted(t, vol.Mnt)
		err := os.WriteFile(filepath.Join(vol.Mnt, "new-file"), []byte("x"), 0o644)
		if !errors.Is(err, syscall.EROFS) {
			t.Errorf("creating a file on the read-only mount: %v, want EROFS", err)
		}
	})

	t.Run("lower", func(t *testing.T) {
		checkExampleLower(t, vol.Lower, mv)
	})
}

// compareEntries compares a walk of a mount with the manifest.
func compareEntries(t *testing.T, want, got []Entry) {
	t.Helper()
	byPath := map[string]Entry{}
	for _, e := range got {
		byPath[e.Path] = e
	}
	for _, w := range want {
		g, ok := byPath[w.Path]
		if !ok {
			t.Errorf("%s: %q (%s) is missing from the mounted view", brokenPromise, w.Path, w.Type)
			continue
		}
		delete(byPath, w.Path)
		for _, d := range entryDiffs(w, g) {
			t.Errorf("%s: %q: %s", brokenPromise, w.Path, d)
		}
	}
	extra := make([]string, 0, len(byPath))
	for p := range byPath {
		extra = append(extra, p)
	}
	sort.Strings(extra)
	for _, p := range extra {
		t.Errorf("%s: the mounted view shows %q, which the manifest does not list", brokenPromise, p)
	}
}

// entryDiffs lists how got differs from the manifest entry want, in what
// git preserves: type, content size and hash, symlink targets, and the
// owner-execute bit of files. Hard links come out of git as two files, so
// a walk of a checkout cannot see them; their content is checked like any
// file's.
func entryDiffs(want, got Entry) []string {
	var d []string
	if want.Type != got.Type {
		return []string{fmt.Sprintf("type %s, want %s", got.Type, want.Type)}
	}
	switch want.Type {
	case "file":
		if got.Size != want.Size {
			d = append(d, fmt.Sprintf("size %d, want %d", got.Size, want.Size))
		}
		if got.SHA256 != want.SHA256 {
			d = append(d, fmt.Sprintf("content sha256 %s, want %s", got.SHA256, want.SHA256))
		}
		if ownerExec(got.Mode) != ownerExec(want.Mode) {
			d = append(d, fmt.Sprintf("mode %s, want %s (owner-execute bit)", got.Mode, want.Mode))
		}
	case "symlink":
		if got.Target != want.Target {
			d = append(d, fmt.Sprintf("symlink target %q, want %q", got.Target, want.Target))
		}
		if got.Size != want.Size {
			d = append(d, fmt.Sprintf("symlink size %d, want %d", got.Size, want.Size))
		}
		if got.SHA256 != want.SHA256 {
			d = append(d, fmt.Sprintf("symlink target sha256 %s, want %s", got.SHA256, want.SHA256))
		}
	}
	return d
}

func ownerExec(mode string) bool {
	var m uint32
	fmt.Sscanf(mode, "%o", &m)
	return m&0o100 != 0
}

// checkByName looks e up by its path and reads it.
func checkByName(t *testing.T, mnt string, e Entry) {
	t.Helper()
	p := filepath.Join(mnt, filepath.FromSlash(e.Path))
	st, err := os.Lstat(p)
	if err != nil {
		t.Errorf("%s: lookup of %q: %v", brokenPromise, e.Path, err)
		return
	}
	g := Entry{Path: e.Path, Mode: fmt.Sprintf("%04o", uint32(st.Mode().Perm()))}
	switch {
	case st.Mode().IsDir():
		g.Type = "dir"
	case st.Mode().IsRegular():
		g.Type = "file"
		f, err := os.Open(p)
		if err != nil {
			t.Errorf("%s: open %q: %v", brokenPromise, e.Path, err)
			return
		}
		// Read in odd-sized pieces, across extent boundaries.
		var b []byte
		buf := make([]byte, 3001)
		for {
			n, err := f.Read(buf)
			b = append(b, buf[:n]...)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Errorf("%s: read %q: %v", brokenPromise, e.Path, err)
				break
			}
		}
		f.Close()
		g.Size, g.SHA256 = st.Size(), Hex(b)
		if int64(len(b)) != st.Size() {
			t.Errorf("%s: %q: stat says %d bytes, reading gives %d", brokenPromise, e.Path, st.Size(), len(b))
		}
	case st.Mode()&fs.ModeSymlink != 0:
		g.Type = "symlink"
		target, err := os.Readlink(p)
		if err != nil {
			t.Errorf("%s: readlink %q: %v", brokenPromise, e.Path, err)
			return
		}
		g.Size, g.Target, g.SHA256 = st.Size(), target, Hex([]byte(target))
	default:
		g.Type = st.Mode().Type().String()
	}
	for _, d := range entryDiffs(e, g) {
		t.Errorf("%s: %q looked up by name: %s", brokenPromise, e.Path, d)
	}
}

// isLowerMeta reports the lower entries that are not files of the view.
func isLowerMeta(rel string) bool {
	base := filepath.Base(rel)
	if !strings.Contains(rel, "/") && (base == config.FileName || base == config.BackupName) {
		return true
	}
	return base == names.DirIVFile || names.IsSidecar(base)
}

// checkExampleLower checks what FORMAT.md promises about the lower
// directory itself: file sizes (plainSize + 48), hidden or clear names.
func checkExampleLower(t *testing.T, lower string, mv ManifestVolume) {
	var wantSizes, gotSizes []int64
	plainNames := map[string]bool{}
	for _, e := range mv.Entries {
		if e.Type == "file" {
			if e.Size == 0 {
				wantSizes = append(wantSizes, 0)
			} else {
				wantSizes = append(wantSizes, e.Size+48)
			}
		}
		for _, c := range strings.Split(e.Path, "/") {
			plainNames[c] = true
		}
	}
	lowerNames := map[string]bool{}
	err := filepath.WalkDir(lower, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == lower {
			return err
		}
		rel, _ := filepath.Rel(lower, p)
		if isLowerMeta(rel) {
			return nil
		}
		lowerNames[rel] = true
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			gotSizes = append(gotSizes, info.Size())
			if info.Size() > 0 {
				checkHeader(t, p, rel, mv)
			}
		}
		if d.IsDir() && !mv.PlaintextNames {
			if iv, err := os.ReadFile(filepath.Join(p, names.DirIVFile)); err != nil || len(iv) != 16 {
				t.Errorf("%s: lower directory %s: %s is not 16 bytes (%d, %v)", brokenPromise, rel, names.DirIVFile, len(iv), err)
			}
		}
		if mv.PlaintextNames {
			return nil
		}
		if plainNames[d.Name()] {
			t.Errorf("%s: the lower directory shows the plaintext name %q (%s)", brokenPromise, d.Name(), rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(wantSizes)
	slices.Sort(gotSizes)
	if !slices.Equal(wantSizes, gotSizes) {
		t.Errorf("%s: lower file sizes %v, want %v (FORMAT.md 3: lower size = 32 + plainSize + 16)", brokenPromise, gotSizes, wantSizes)
	}
	if mv.PlaintextNames {
		// plaintext_names stores every name as it is.
		for _, e := range mv.Entries {
			if !lowerNames[filepath.FromSlash(e.Path)] {
				t.Errorf("%s: plaintext_names volume has no lower entry %q", brokenPromise, e.Path)
			}
		}
		if len(lowerNames) != len(mv.Entries) {
			t.Errorf("%s: plaintext_names volume has %d lower entries, the manifest %d", brokenPromise, len(lowerNames), len(mv.Entries))
		}
	}
}

// checkHeader checks the 32-byte file header of FORMAT.md 3.1.
func checkHeader(t *testing.T, path, rel string, mv ManifestVolume) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	h := make([]byte, 32)
	if _, err := io.ReadFull(f, h); err != nil {
		t.Errorf("%s: lower file %s: reading the header: %v", brokenPromise, rel, err)
		return
	}
	id := map[string]byte{"aes-xts": 1, "aes-cbc": 2}[mv.Cipher]
	if mv.Cipher == "aes-cbc" && mv.Version >= 2 {
		id = 3 // 512-byte CBC sectors
	}
	switch {
	case string(h[:4]) != "TwCr":
		t.Errorf("%s: lower file %s: magic %q, want \"TwCr\"", brokenPromise, rel, h[:4])
	case h[4] != 0 || h[5] != 1:
		t.Errorf("%s: lower file %s: header version %d, want 1", brokenPromise, rel, int(h[4])<<8|int(h[5]))
	case h[6] != id || int(h[7]) != mv.KeyBytes:
		t.Errorf("%s: lower file %s: cipher id %d key bytes %d, want %d and %d", brokenPromise, rel, h[6], h[7], id, mv.KeyBytes)
	case !bytes.Equal(h[24:32], make([]byte, 8)):
		t.Errorf("%s: lower file %s: reserved header bytes %x are not zero", brokenPromise, rel, h[24:32])
	}
}

// copyTree copies the directory src to dst (which must not exist):
// directories, regular files and symlinks; hard links become copies.
// Files are made owner-readable and writable and directories owner-rwx, so
// that the copy can always be read and removed.
func copyTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Mkdir(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			out, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, info.Mode().Perm()|0o600)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, in); err != nil {
				out.Close()
				return err
			}
			return out.Close()
		default:
			return fmt.Errorf("%s: unexpected file type %v", p, d.Type())
		}
	})
}
