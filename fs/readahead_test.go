package fs

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// TestReadahead: the mount's backing device reads ahead 1 MiB (the FUSE
// handshake's max_readahead), not the kernel's 128 KiB default, so that a
// sequential reader gets 1 MiB READ requests.
func TestReadahead(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("raising the readahead needs root (sysfs)")
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.mount(t)
			var st unix.Stat_t
			must(t, unix.Stat(tm.mnt, &st))
			p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Skipf("no sysfs entry for the mount's backing device: %v", err)
			}
			if got, want := strings.TrimSpace(string(b)), fmt.Sprint(fuse.MAX_KERNEL_WRITE/1024); got != want {
				t.Errorf("%s = %s, want %s", p, got, want)
			}
		})
	}
}
