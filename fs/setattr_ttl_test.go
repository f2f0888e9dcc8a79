package fs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// TestSetattrReplyKept: the attributes a SETATTR reply carries (chmod,
// chown, utimes, truncate) are kept by the kernel as long as a GETATTR's,
// so a stat right after asks the daemon nothing (tar x ends every file
// with utimes, chown and chmod, and ls -l then stats it); and they are
// the new ones, as natively.
func TestSetattrReplyKept(t *testing.T) {
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			rec := measure.NewRecorder("test")
			tm.mount(t, func(o *Options) { o.Recorder = rec })
			native := t.TempDir()
			count := func() int64 {
				for _, s := range rec.Snapshot().Ops {
					if s.Op == "getattr" {
						return s.Count
					}
				}
				return 0
			}
			mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
			for _, dir := range []string{native, tm.mnt} {
				f := filepath.Join(dir, "f")
				must(t, os.WriteFile(f, []byte("content"), 0600))
				must(t, os.Truncate(f, 3))
				must(t, os.Chown(f, 1, 2))
				must(t, os.Chmod(f, 0640))
				must(t, os.Chtimes(f, mtime, mtime))
				before := count()
				fi, err := os.Lstat(f)
				must(t, err)
				if fi.Mode().Perm() != 0640 || fi.Size() != 3 || !fi.ModTime().Equal(mtime) || fi.Sys().(*syscall.Stat_t).Uid != 1 {
					t.Errorf("%s: mode %v size %d mtime %v, want 0640, 3, %v, owner 1", dir, fi.Mode(), fi.Size(), fi.ModTime(), mtime)
				}
				if dir == tm.mnt {
					if n := count() - before; n != 0 {
						t.Errorf("%d GETATTR for a stat after a SETATTR whose reply carried the attributes, want 0", n)
					}
				}
			}
		})
	}
}

// TestChownAsksNothingMore: a chown of a file that has no set-user-ID or
// set-group-ID bit (FATTR_KILL_SUIDGID) is one SETATTR: no GETATTR to see
// whether there are bits to clear, since the SETATTR's own reply says so;
// a file that has them loses them, as natively (TestKillPriv*).
func TestChownAsksNothingMore(t *testing.T) {
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			rec := measure.NewRecorder("test")
			tm.mount(t, func(o *Options) { o.Recorder = rec })
			count := func() int64 {
				for _, s := range rec.Snapshot().Ops {
					if s.Op == "getattr" {
						return s.Count
					}
				}
				return 0
			}
			f := filepath.Join(tm.mnt, "f")
			must(t, os.WriteFile(f, []byte("x"), 0644))
			_, err := os.Lstat(f)
			must(t, err)
			before := count()
			must(t, os.Chown(f, 1000, 1000))
			if n := count() - before; n != 0 {
				t.Errorf("a chown made %d GETATTRs in the daemon, want 0", n)
			}
			must(t, syscall.Chmod(f, 06755))
			must(t, os.Chown(f, 1001, 1001))
			fi, err := os.Lstat(f)
			must(t, err)
			if fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
				t.Errorf("mode %v after chown, want the set-ID bits dropped", fi.Mode())
			}
		})
	}
}
