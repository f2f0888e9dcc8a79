package fs

import (
	"fmt"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"golang.org/x/sys/unix"
)

// debugRequests counts the requests of the opcodes ops (a regexp
// alternative, e.g. "READLINK" or "GETXATTR|LISTXATTR") in a go-fuse
// debug log.
func debugRequests(dbg *syncBuffer, ops string) int {
	return len(regexp.MustCompile(`rx \d+: (`+ops+`) `).FindAllString(dbg.String(), -1))
}

// readlinks counts the READLINK requests in a go-fuse debug log.
func readlinks(dbg *syncBuffer) int { return debugRequests(dbg, "READLINK") }

// TestSymlinkCache: the kernel keeps symlink targets (FUSE_CACHE_SYMLINKS),
// so that reading a link again, or a path through it, costs no READLINK;
// a symlink made again under the same name, or renamed, reads right; with
// shared storage nothing is kept.
func TestSymlinkCache(t *testing.T) {
	for _, v := range variants {
		for _, shared := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/shared=%v", v.name, shared), func(t *testing.T) {
				tm := newVolume(t, v)
				var dbg syncBuffer
				tm.mount(t, func(o *Options) {
					o.SharedStorage = shared
					o.Debug = true
					o.DebugLog = log.New(&dbg, "", 0)
				})
				must(t, os.Mkdir(filepath.Join(tm.mnt, "real"), 0o755))
				must(t, os.WriteFile(filepath.Join(tm.mnt, "real", "f"), []byte("x"), 0o644))
				l := filepath.Join(tm.mnt, "l")
				must(t, os.Symlink("real", l))
				before := readlinks(&dbg)
				const n = 50
				for i := 0; i < n; i++ {
					if got, err := os.Readlink(l); err != nil || got != "real" {
						t.Fatalf("readlink %d: %q, %v", i, got, err)
					}
					if _, err := os.Stat(filepath.Join(l, "f")); err != nil {
						t.Fatal(err)
					}
				}
				// Each round reads the link twice (readlink and the walk).
				// Another test's drop_caches may drop the cached target
				// now and then; without the cache every read asks.
				got := readlinks(&dbg) - before
				if !shared && got > n/2 {
					t.Errorf("%d READLINK requests for %d reads of one link: the kernel does not keep its target", got, 2*n)
				}
				if shared && got < 2*n {
					t.Errorf("shared storage: %d READLINK requests for %d reads, want every read to ask", got, 2*n)
				}
				// A new link under the name, and a rename.
				must(t, os.Remove(l))
				must(t, os.Symlink("other", l))
				if got, err := os.Readlink(l); err != nil || got != "other" {
					t.Errorf("readlink after the link was made again: %q, %v", got, err)
				}
				must(t, os.Rename(l, filepath.Join(tm.mnt, "m")))
				if got, err := os.Readlink(filepath.Join(tm.mnt, "m")); err != nil || got != "other" {
					t.Errorf("readlink after a rename: %q, %v", got, err)
				}
			})
		}
	}
}

// TestSymlinkCacheInodeReuse: where the lower filesystem gives no birth
// time (here LOWER is on a twin mount, itself over ext4), a new symlink
// whose lower inode number is that of a deleted one the kernel still
// holds (an O_PATH descriptor keeps it) gets the same node; the target the
// kernel cached for the old link must not be served for the new one.
func TestSymlinkCacheInodeReuse(t *testing.T) {
	requireFUSE(t)
	base := loopFS(t, "ext4")
	under := newVolumeIn(t, variants[2], base) // the twin
	under.mount(t)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			vdir := filepath.Join(under.mnt, v.name)
			must(t, os.Mkdir(vdir, 0o755))
			tm := newVolumeIn(t, v, vdir)
			tm.mount(t)
			reused := 0
			for try := 0; try < 40 && reused < 3; try++ {
				a, b := filepath.Join(tm.mnt, "a"), filepath.Join(tm.mnt, "b")
				old, fresh := fmt.Sprintf("old-%d", try), fmt.Sprintf("new-target-%d", try)
				must(t, os.Symlink(old, a))
				fd, err := unix.Open(a, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				must(t, err)
				var st0, st1 unix.Stat_t
				must(t, unix.Fstat(fd, &st0))
				if got, err := os.Readlink(a); err != nil || got != old {
					t.Fatalf("readlink: %q, %v", got, err)
				}
				must(t, os.Remove(a))
				must(t, os.Symlink(fresh, b))
				must(t, unix.Lstat(b, &st1))
				if st1.Ino == st0.Ino {
					reused++
					if got, err := os.Readlink(b); err != nil || got != fresh {
						t.Errorf("try %d: a new symlink on a reused inode reads %q (%v), want %q", try, got, err, fresh)
					}
					// Made the kernel forget the new link (not the old
					// one, which fd pins), so that the next access
					// looks it up again.
					must(t, os.WriteFile("/proc/sys/vm/drop_caches", []byte("2"), 0))
					if got, err := os.Readlink(b); err != nil || got != fresh {
						t.Errorf("try %d: a new symlink on a reused inode, looked up again, reads %q (%v), want %q", try, got, err, fresh)
					}
				}
				unix.Close(fd)
				must(t, os.Remove(b))
			}
			t.Logf("%d of the new symlinks had the inode number of the deleted one", reused)
			if reused == 0 {
				t.Skip("ext4 reused no inode number of a deleted symlink in 40 tries: nothing to check here")
			}
		})
	}
}
