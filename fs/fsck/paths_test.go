package fsck

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// TestPaths: every entry of a mounted tree (nested directories, long
// names, a symlink, a hard link) maps to the lower entry the mount serves
// it from (the same inode: the mount reports lower inode numbers), and
// that lower path maps back; bad paths give errors.
func TestPaths(t *testing.T) {
	requireFUSE(t)
	for _, plainNames := range []bool{false, true} {
		t.Run(map[bool]string{false: "encrypted names", true: "plaintext names"}[plainNames], func(t *testing.T) {
			v := newVolume(t, config.Options{Cipher: "aes-xts", KeyBytes: 64, PlaintextNames: plainNames})
			m := v.mount(t)
			long := strings.Repeat("n", 230)
			must(t, os.MkdirAll(m.path("a/b/"+long+"/c"), 0o755))
			writeFile(t, m.path("a/b/"+long+"/c/f.txt"), []byte("x"))
			writeFile(t, m.path("a/"+strings.Repeat("é", 120)), []byte("y"))
			must(t, os.Symlink("b", m.path("a/link")))
			must(t, os.Link(m.path("a/b/"+long+"/c/f.txt"), m.path("top")))

			p, err := OpenPaths(v.lower, v.cfg, v.master)
			must(t, err)
			defer p.Close()
			n := 0
			err = filepath.WalkDir(m.dir, func(path string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				plain := "/" + strings.TrimPrefix(strings.TrimPrefix(path, m.dir), "/")
				rel, exists, isLong, err := p.Encrypt(plain)
				if err != nil || !exists {
					t.Errorf("Encrypt(%q) = %q, exists %v: %v", plain, rel, exists, err)
					return nil
				}
				var pst, lst syscall.Stat_t
				must(t, syscall.Lstat(path, &pst))
				if err := syscall.Lstat(filepath.Join(v.lower, rel), &lst); err != nil || lst.Ino != pst.Ino {
					t.Errorf("Encrypt(%q) = %q: inode %d (%v), the mount serves inode %d", plain, rel, lst.Ino, err, pst.Ino)
				}
				if wantLong := !plainNames && len(filepath.Base(plain)) >= 176; isLong != wantLong {
					t.Errorf("Encrypt(%q): long %v, want %v", plain, isLong, wantLong)
				}
				if back, err := p.Decrypt(rel); err != nil || back != plain && !(plain == "/" && back == "/") {
					t.Errorf("Decrypt(%q) = %q, %v; want %q", rel, back, err, plain)
				}
				n++
				return nil
			})
			must(t, err)
			if n != 9 {
				t.Errorf("walked %d entries, want 9", n)
			}
			// The same path, written differently.
			a, _, _, err1 := p.Encrypt("/a/b")
			b, _, _, err2 := p.Encrypt("a//./b/")
			if err1 != nil || err2 != nil || a != b {
				t.Errorf("Encrypt of /a/b and a//./b/: %q, %q (%v, %v)", a, b, err1, err2)
			}

			// Errors.
			badPlain := []string{"../x", "a/../a", "/missing/f", "/a/link/x", "/top/x"}
			if plainNames {
				// With encrypted names it is a name like any other.
				badPlain = append(badPlain, "/"+config.FileName)
			}
			for _, bad := range badPlain {
				if rel, _, _, err := p.Encrypt(bad); err == nil {
					t.Errorf("Encrypt(%q) = %q, want an error", bad, rel)
				}
			}
			if rel, exists, _, err := p.Encrypt("/a/absent"); err != nil || exists || rel == "" {
				t.Errorf("Encrypt of an absent last component: %q, exists %v, %v; want its would-be path", rel, exists, err)
			}
			aRel, _, _, _ := p.Encrypt("/a")
			bad := []string{"../x", config.FileName, links.StoreDir, aRel + "/../x"}
			if !plainNames {
				bad = append(bad, "nonexistent", aRel+"/"+names.DirIVFile)
				for _, e := range dirNames(t, filepath.Join(v.lower, aRel)) {
					if names.IsSidecar(e) {
						bad = append(bad, aRel+"/"+e)
					}
				}
			}
			for _, rel := range bad {
				if plain, err := p.Decrypt(rel); err == nil {
					t.Errorf("Decrypt(%q) = %q, want an error", rel, plain)
				} else if !plainNames && rel == "nonexistent" && !errors.Is(err, ErrNotVolumeName) {
					t.Errorf("Decrypt(%q): %v, want ErrNotVolumeName", rel, err)
				}
			}
			m.unmount(t)
		})
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// TestPathsHostileLower: an IV file or a sidecar that LOWER's writer
// swapped for a symlink or a FIFO gives an error, without following the
// link or hanging on the FIFO.
func TestPathsHostileLower(t *testing.T) {
	requireFUSE(t)
	v := newVolume(t, config.Options{Cipher: "aes-xts", KeyBytes: 64})
	m := v.mount(t)
	long := strings.Repeat("l", 200)
	must(t, os.MkdirAll(m.path("d/"+long), 0o755))
	m.unmount(t)

	p, err := OpenPaths(v.lower, v.cfg, v.master)
	must(t, err)
	defer p.Close()
	dRel, _, _, err := p.Encrypt("/d")
	must(t, err)
	longRel, _, _, err := p.Encrypt("/d/" + long)
	must(t, err)
	iv := filepath.Join(v.lower, dRel, names.DirIVFile)
	side := filepath.Join(v.lower, longRel+names.LongSuffix)
	for _, swap := range []struct {
		what string
		make func(path string) error
	}{
		{"symlink", func(path string) error { return os.Symlink("/etc/passwd", path) }},
		{"fifo", func(path string) error { return syscall.Mkfifo(path, 0o600) }},
	} {
		for _, victim := range []string{iv, side} {
			saved, err := os.ReadFile(victim)
			must(t, err)
			must(t, os.Remove(victim))
			must(t, swap.make(victim))
			if rel, _, _, err := p.Encrypt("/d/" + long + "/x"); err == nil && victim == iv {
				t.Errorf("%s as %s: Encrypt = %q, want an error", swap.what, filepath.Base(victim), rel)
			}
			if plain, err := p.Decrypt(longRel); err == nil {
				t.Errorf("%s as %s: Decrypt = %q, want an error", swap.what, filepath.Base(victim), plain)
			}
			must(t, os.Remove(victim))
			must(t, os.WriteFile(victim, saved, 0o400))
		}
	}
	if plain, err := p.Decrypt(longRel); err != nil || plain != "/d/"+long {
		t.Errorf("after the files are back: Decrypt = %q, %v", plain, err)
	}
}
