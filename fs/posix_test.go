package fs

import (
	"sort"
	"testing"

	"github.com/hanwen/go-fuse/v2/posixtest"
)

// nonPOSIX lists posixtest cases that assert behaviour POSIX and the
// native kernel filesystems do not have; TestLocks shows it on a plain
// directory.
var nonPOSIX = map[string]string{
	// Expects a second fcntl(F_SETLK) by the same process on another
	// descriptor to conflict. POSIX record locks belong to the process, so
	// ext4 and tmpfs grant it; go-fuse's loopback only fails it because it
	// maps POSIX locks onto OFD locks of its own descriptors. twincrypt
	// leaves locks to the kernel, which keeps POSIX semantics (what sqlite
	// and other lock users rely on); TestLocks checks them.
	"FcntlFlockLocksFile": "asserts OFD semantics for POSIX locks; see TestLocks",
}

// TestPosix runs go-fuse's POSIX conformance suite against the encrypted
// mount (both ciphers) and the twin, each case on a fresh mount.
func TestPosix(t *testing.T) {
	var names []string
	for name := range posixtest.All {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			for _, name := range names {
				t.Run(name, func(t *testing.T) {
					if why, ok := nonPOSIX[name]; ok {
						t.Skip(why)
					}
					tm := mountVariant(t, v)
					posixtest.All[name](t, tm.mnt)
				})
			}
		})
	}
}
