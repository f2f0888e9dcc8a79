package fs

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestActivityIgnoresMountTableWalkers: what df, findmnt and monitoring
// agents do to every mount (statfs, stat and the xattrs of the mount
// point) does not count as activity (Options.Activity, which mount --idle
// watches); what a user does below the root, and listing the root, does.
func TestActivityIgnoresMountTableWalkers(t *testing.T) {
	tm := newVolume(t, variants[0])
	var activity atomic.Uint64
	tm.mount(t, func(o *Options) { o.Activity = &activity })
	must(t, os.WriteFile(filepath.Join(tm.mnt, "f"), []byte("x"), 0o644))
	// Its RELEASE counts as activity: wait until the daemon has it.
	waitReleased(t, tm)

	before := activity.Load()
	for i := 0; i < 20; i++ {
		var sfs unix.Statfs_t
		must(t, unix.Statfs(tm.mnt, &sfs))
		var st unix.Stat_t
		must(t, unix.Stat(tm.mnt, &st))
		// ENODATA or ENOTSUP: the request is what matters.
		unix.Getxattr(tm.mnt, "security.selinux", make([]byte, 64))
		unix.Listxattr(tm.mnt, make([]byte, 256))
	}
	if n := activity.Load(); n != before {
		t.Errorf("statfs, stat and xattr reads of the mount point counted as %d operations of activity, want 0", n-before)
	}

	for _, c := range []struct {
		what string
		do   func() error
	}{
		{"stat of a file", func() error { _, err := os.Stat(filepath.Join(tm.mnt, "new-name-1")); return ignoreNotExist(err) }},
		{"read of a file", func() error { _, err := os.ReadFile(filepath.Join(tm.mnt, "f")); return err }},
		{"listing the root", func() error { _, err := os.ReadDir(tm.mnt); return err }},
	} {
		before := activity.Load()
		must(t, c.do())
		if activity.Load() == before {
			t.Errorf("%s: no activity counted", c.what)
		}
	}
}

func ignoreNotExist(err error) error {
	if os.IsNotExist(err) {
		return nil
	}
	return err
}
