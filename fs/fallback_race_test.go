package fs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// forceNoOpenat2 puts the daemon on the path taken where openat2 is
// missing (Linux < 5.6) or refused by seccomp, for the rest of the test.
func forceNoOpenat2(t *testing.T) {
	old := noOpenat2.Swap(true)
	t.Cleanup(func() { noOpenat2.Store(old) })
}

// TestNoOpenat2SwapRace races operations through the mount against a
// directory of LOWER that keeps being exchanged (renameat2
// RENAME_EXCHANGE) with a symlink to a copy of itself outside LOWER, on
// the path without openat2. Only the middle component of the lower paths
// the daemon opens is swapped (the operations run in d/sub through a
// descriptor the application holds, so the kernel looks nothing up
// through d): an openat of the whole path with O_NOFOLLOW would follow it
// and create, rename, truncate and unlink in the outside copy. Every
// operation must succeed (inside LOWER) or fail with ELOOP, ENOENT or
// ENOTDIR, and the outside tree must be exactly as before.
func TestNoOpenat2SwapRace(t *testing.T) {
	forceNoOpenat2(t)
	for _, v := range deepVariants[:4] {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			mnt := tm.mnt
			must(t, os.WriteFile(filepath.Join(mnt, "keep"), []byte("keep"), 0644))
			must(t, os.MkdirAll(filepath.Join(mnt, "d", "sub"), 0755))
			must(t, os.WriteFile(filepath.Join(mnt, "d", "sub", "victim"), []byte("victim"), 0644))
			subfd := opath(t, filepath.Join(mnt, "d", "sub"), unix.O_DIRECTORY)
			ld := lowerPath(t, tm, "d")

			// The decoy: the lower d copied outside, so that a daemon
			// following the symlink finds every name it expects.
			out := outsideTree(t)
			copyTree(t, ld, filepath.Join(out, "decoy"))
			swap := filepath.Join(tm.lower, "swap")
			must(t, os.Symlink(filepath.Join(out, "decoy"), swap))
			ageTree(t, out)
			before := snapshot(t, out)

			var stop atomic.Bool
			var wg sync.WaitGroup
			wg.Add(1)
			var swaps int
			go func() {
				defer wg.Done()
				for !stop.Load() {
					if err := unix.Renameat2(unix.AT_FDCWD, ld, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE); err != nil {
						t.Errorf("exchange: %v", err)
						return
					}
					swaps++
				}
			}()
			counts := map[string]int{}
			var bad []string
			note := func(what string, err error) {
				var errno syscall.Errno
				switch {
				case err == nil:
					counts["ok"]++
				case errors.As(err, &errno) && (errno == syscall.ELOOP || errno == syscall.ENOENT || errno == syscall.ENOTDIR):
					counts[errno.Error()]++
				default:
					if len(bad) < 10 {
						bad = append(bad, fmt.Sprintf("%s: %v", what, err))
					}
				}
			}
			for i := 0; i < 5000 && (counts["ok"] < 200 || counts[syscall.ELOOP.Error()] < 200); i++ {
				c, r, m := fmt.Sprintf("c%d", i), fmt.Sprintf("r%d", i), fmt.Sprintf("m%d", i)
				fd, err := unix.Openat(subfd, c, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
				if err == nil {
					unix.Write(fd, []byte("created"))
					unix.Close(fd)
				}
				note("create", err)
				note("rename", unix.Renameat(subfd, c, subfd, r))
				fd, err = unix.Openat(subfd, "victim", unix.O_WRONLY|unix.O_TRUNC|unix.O_CLOEXEC, 0)
				if err == nil {
					unix.Write(fd, []byte("victim"))
					unix.Close(fd)
				}
				note("open O_TRUNC", err)
				note("mkdir", unix.Mkdirat(subfd, m, 0755))
				note("unlink", unix.Unlinkat(subfd, r, 0))
				note("rmdir", unix.Unlinkat(subfd, m, unix.AT_REMOVEDIR))
			}
			stop.Store(true)
			wg.Wait()
			var st unix.Stat_t
			must(t, unix.Lstat(ld, &st))
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				must(t, unix.Renameat2(unix.AT_FDCWD, ld, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE))
			}
			must(t, os.Remove(swap))
			t.Logf("%d exchanges; results %v", swaps, counts)
			if len(bad) > 0 {
				t.Errorf("errors other than ELOOP, ENOENT, ENOTDIR:\n%s", strings.Join(bad, "\n"))
			}
			if counts["ok"] < 200 || counts[syscall.ELOOP.Error()] < 200 {
				t.Errorf("the race was not exercised: %v", counts)
			}
			alive(t, tm)
			requireUnchanged(t, out, before)
			if got, err := os.ReadFile(filepath.Join(mnt, "d", "sub", "victim")); err != nil || string(got) != "victim" {
				t.Errorf("d/sub/victim reads %q, %v", got, err)
			}
		})
	}
}
