package fs

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/content"
)

// lowerFileOfSize finds the lower file that holds plainSize bytes.
func lowerFileOfSize(t *testing.T, lower string, plainSize int64) string {
	t.Helper()
	var found string
	filepath.WalkDir(lower, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if st, _ := os.Stat(p); st.Size() == content.LowerSize(plainSize) {
				found = p
			}
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no lower file for %d plaintext bytes", plainSize)
	}
	return found
}

// TestBadInput damages single files in LOWER: each gives EIO (or is
// hidden, for a name) with a warning naming the lower path, and the rest of
// the volume keeps working.
func TestBadInput(t *testing.T) {
	for _, v := range variants[:2] {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			write := func(name string, size int) []byte {
				b := bytes.Repeat([]byte{'z'}, size)
				must(t, os.WriteFile(filepath.Join(tm.mnt, name), b, 0644))
				return b
			}
			write("foreign", 1000)
			write("torn", 2000)
			good := write("good", 3000)
			write("badcipher", 4000)

			// Not our file: bad magic.
			p := lowerFileOfSize(t, tm.lower, 1000)
			f, _ := os.OpenFile(p, os.O_WRONLY, 0)
			f.WriteAt([]byte("JUNK"), 0)
			f.Close()
			// Torn header: the lower file is shorter than a header.
			p2 := lowerFileOfSize(t, tm.lower, 2000)
			must(t, os.Truncate(p2, 20))
			// A header naming another cipher.
			p3 := lowerFileOfSize(t, tm.lower, 4000)
			f, _ = os.OpenFile(p3, os.O_WRONLY, 0)
			f.WriteAt([]byte{9}, 6)
			f.Close()
			// A lower name that does not decrypt.
			must(t, os.WriteFile(filepath.Join(tm.lower, "not-a-valid-encrypted-name"), []byte("x"), 0644))

			for _, name := range []string{"foreign", "torn", "badcipher"} {
				_, err := os.ReadFile(filepath.Join(tm.mnt, name))
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("%s: read gives %v, want EIO", name, err)
				}
			}
			if got, err := os.ReadFile(filepath.Join(tm.mnt, "good")); err != nil || !bytes.Equal(got, good) {
				t.Errorf("good file next to bad ones: %v", err)
			}
			ents, err := os.ReadDir(tm.mnt)
			must(t, err)
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			if strings.Join(names, ",") != "badcipher,foreign,good,torn" {
				t.Errorf("listing %v", names)
			}
			log := tm.log.String()
			for _, lp := range []string{p, p2, p3, "not-a-valid-encrypted-name"} {
				if !strings.Contains(log, filepath.Base(lp)) {
					t.Errorf("no warning naming %s in log:\n%s", lp, log)
				}
			}
			// The damaged file can be replaced through the mount.
			must(t, os.WriteFile(filepath.Join(tm.mnt, "torn"), []byte("fresh"), 0644))
			if got, _ := os.ReadFile(filepath.Join(tm.mnt, "torn")); string(got) != "fresh" {
				t.Errorf("rewritten damaged file reads %q", got)
			}
		})
	}
}

// smallTmpfs mounts a tmpfs of the given size ("2m") on a new directory,
// unmounted at cleanup.
func smallTmpfs(t *testing.T, size string) string {
	small := filepath.Join(t.TempDir(), "small")
	must(t, os.Mkdir(small, 0755))
	if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size="+size); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(small, syscall.MNT_DETACH) })
	return small
}

// moveLower copies tm's unmounted volume (its config and root IV) to dir,
// which becomes its lower directory.
func (tm *testMount) moveLower(t *testing.T, dir string) {
	ents, _ := os.ReadDir(tm.lower)
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(tm.lower, e.Name()))
		must(t, err)
		must(t, os.WriteFile(filepath.Join(dir, e.Name()), b, 0600))
	}
	tm.lower = dir
}

// TestENOSPC fills a small lower filesystem: the writer gets ENOSPC and
// the files already there stay intact.
func TestENOSPC(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.moveLower(t, smallTmpfs(t, "2m"))
			tm.mount(t)
			keep := bytes.Repeat([]byte("keep"), 10000)
			must(t, os.WriteFile(filepath.Join(tm.mnt, "keep"), keep, 0644))
			f, err := os.Create(filepath.Join(tm.mnt, "big"))
			must(t, err)
			chunk := make([]byte, 256<<10)
			var werr error
			for i := 0; i < 32 && werr == nil; i++ {
				_, werr = f.Write(chunk)
			}
			if werr == nil {
				werr = f.Sync()
			}
			f.Close()
			if !errors.Is(werr, syscall.ENOSPC) {
				t.Errorf("filling the disk gives %v, want ENOSPC", werr)
			}
			if got, err := os.ReadFile(filepath.Join(tm.mnt, "keep")); err != nil || !bytes.Equal(got, keep) {
				t.Errorf("neighbour after ENOSPC: %v", err)
			}
			must(t, os.Remove(filepath.Join(tm.mnt, "big")))
		})
	}
}

// TestENOSPCShortWrite: a write that runs out of space part way leaves the
// file as a native one would, whatever the write's place against the old
// end (past it, leaving a gap; over it; at it): the bytes the write says it
// stored (a short count) and nothing else, or, if it stored none (ENOSPC),
// the file as before. Never garbage or a longer file after an error, also
// after a remount (what LOWER holds, not what the daemon remembers). The
// same checks run on a plain directory of the same small tmpfs first.
func TestENOSPCShortWrite(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("mounting a small tmpfs needs root")
	}
	t.Run("native", func(t *testing.T) {
		shortWriteCases(t, smallTmpfs(t, "1m"), nil)
	})
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.moveLower(t, smallTmpfs(t, "1m"))
			tm.mount(t)
			shortWriteCases(t, tm.mnt, func() {
				tm.unmountNow(t)
				tm.mount(t)
				tm.unmounted = false
			})
		})
	}
}

// shortWriteCases is TestENOSPCShortWrite in dir; remount, if not nil,
// mounts dir's volume anew.
func shortWriteCases(t *testing.T, dir string, remount func()) {
	pattern := func(n, seed int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(seed + i*13)
		}
		return b
	}
	old, big := pattern(10000, 1), pattern(200000, 7)
	for _, c := range []struct {
		name string
		at   int64
	}{{"past the end", 20000}, {"over the end", 5000}, {"at the end", 10000}} {
		g, filler := filepath.Join(dir, "g"), filepath.Join(dir, "filler")
		must(t, os.WriteFile(g, old, 0644))
		// Take all the space there is, down to the last block.
		f, err := os.Create(filler)
		must(t, err)
		for _, n := range []int{64 << 10, 512} {
			for err == nil {
				_, err = f.Write(make([]byte, n))
			}
			err = nil
		}
		f.Close()
		// One pwrite(2), to see its count (os.File.WriteAt drops a short
		// count when its retry fails).
		f, err = os.OpenFile(g, os.O_WRONLY, 0)
		must(t, err)
		n, werr := syscall.Pwrite(int(f.Fd()), big, c.at)
		f.Close()
		want := append([]byte(nil), old...)
		if n > 0 {
			if int(c.at) > len(want) {
				want = append(want, make([]byte, int(c.at)-len(want))...)
			}
			want = append(want[:c.at], append(big[:n:n], want[min(len(want), int(c.at)+n):]...)...)
		} else if !errors.Is(werr, syscall.ENOSPC) {
			t.Errorf("%s: write on a full disk: %v, want ENOSPC or a short count", c.name, werr)
		}
		t.Logf("%s: pwrite of %d bytes at %d: %d, %v", c.name, len(big), c.at, n, werr)
		check := func(when string) {
			got, err := os.ReadFile(g)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s, %s: write stored %d bytes (%v); file has %d bytes, want %d (equal %v, %v)",
					c.name, when, n, werr, len(got), len(want), bytes.Equal(got, want), err)
			}
		}
		check("at once")
		if remount != nil {
			remount()
			check("after a remount")
		}
		must(t, os.Remove(filler))
		must(t, os.Remove(g))
	}
}

// TestEmptyDirWithoutIVHeals: an empty directory whose IV file is gone
// (a crash between mkdir and the IV write) gets a new IV on first use; a
// non-empty one stays unreadable (EIO), since its names need the old IV.
func TestEmptyDirWithoutIVHeals(t *testing.T) {
	tm := mountVariant(t, variants[0])
	must(t, os.Mkdir(filepath.Join(tm.mnt, "empty"), 0755))
	must(t, os.Mkdir(filepath.Join(tm.mnt, "full"), 0755))
	must(t, os.WriteFile(filepath.Join(tm.mnt, "full", "f"), []byte("x"), 0644))
	// Remount so no IV is cached, then delete both IV files below.
	tm.unmountNow(t)
	var ivs []string
	filepath.WalkDir(tm.lower, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Name() == ".twincrypt.diriv" && filepath.Dir(p) != tm.lower {
			ivs = append(ivs, p)
		}
		return nil
	})
	if len(ivs) != 2 {
		t.Fatalf("found %d directory IVs below the root", len(ivs))
	}
	for _, p := range ivs {
		must(t, os.Remove(p))
	}
	tm.unmounted = false
	tm.mount(t)
	must(t, os.WriteFile(filepath.Join(tm.mnt, "empty", "new"), []byte("healed"), 0644))
	if got, _ := os.ReadFile(filepath.Join(tm.mnt, "empty", "new")); string(got) != "healed" {
		t.Errorf("file in healed directory reads %q", got)
	}
	if _, err := os.ReadDir(filepath.Join(tm.mnt, "full")); !errors.Is(err, syscall.EIO) {
		t.Errorf("non-empty directory without IV: %v, want EIO", err)
	}
}
