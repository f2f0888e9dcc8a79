package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
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
			checkReadahead(t, tm.mnt, "")
		})
	}
}

// checkReadahead checks that the backing device of the mount at mnt reads
// ahead max_write (1 MiB); how names how it was mounted, for the message.
func checkReadahead(t *testing.T, mnt, how string) {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Stat(mnt, &st))
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	b, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("no sysfs entry for the mount's backing device: %v", err)
	}
	if got, want := strings.TrimSpace(string(b)), fmt.Sprint(fuse.MAX_KERNEL_WRITE/1024); got != want {
		t.Errorf("%s = %s, want %s%s", p, got, want, how)
	}
}

// selfWatchFS records the requests that this process makes on its own
// mount while watching is set.
type selfWatchFS struct {
	fuse.RawFileSystem
	watching atomic.Bool
	mu       sync.Mutex
	seen     []string
}

func (s *selfWatchFS) note(op string, h *fuse.InHeader) {
	if s.watching.Load() && int(h.Pid) == os.Getpid() {
		s.mu.Lock()
		s.seen = append(s.seen, op)
		s.mu.Unlock()
	}
}

func (s *selfWatchFS) GetAttr(cancel <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	s.note("GETATTR", &in.InHeader)
	return s.RawFileSystem.GetAttr(cancel, in, out)
}

func (s *selfWatchFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	s.note("LOOKUP "+name, h)
	return s.RawFileSystem.Lookup(cancel, h, name, out)
}

func (s *selfWatchFS) Access(cancel <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	s.note("ACCESS", &in.InHeader)
	return s.RawFileSystem.Access(cancel, in)
}

func (s *selfWatchFS) GetXAttr(cancel <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	s.note("GETXATTR "+attr, h)
	return s.RawFileSystem.GetXAttr(cancel, h, attr, dest)
}

func (s *selfWatchFS) OpenDir(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	s.note("OPENDIR", &in.InHeader)
	return s.RawFileSystem.OpenDir(cancel, in, out)
}

func (s *selfWatchFS) StatFs(cancel <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	s.note("STATFS", h)
	return s.RawFileSystem.StatFs(cancel, h, out)
}

// TestDaemonLeavesItsMountAlone: a daemon's mount (Options.Daemon, as
// twincrypt mount makes it) makes no request on the new mount from the
// daemon's own process (a daemon killed while one of its threads waits on
// its own ring never exits, docs/uring.md), on either transport, and the
// readahead is still raised, also for a mount point named through a
// symlink. (go-fuse's poll hack, which only other mounts run, is answered
// inside go-fuse and would not show here; serve skips it for a daemon.)
func TestDaemonLeavesItsMountAlone(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("raising the readahead needs root (sysfs)")
	}
	requireFUSE(t)
	for _, transport := range []string{TransportDev, TransportUring} {
		t.Run(transport, func(t *testing.T) {
			if transport == TransportUring {
				requireUringKernel(t)
			}
			tm := newVolume(t, variants[0])
			link := filepath.Join(t.TempDir(), "via-link")
			must(t, os.Symlink(tm.mnt, link))
			watch := &selfWatchFS{}
			watch.watching.Store(true)
			o := Options{Lower: tm.lower, Config: tm.cfg, MasterKey: tm.master, Log: zerolog.New(tm.log), Transport: transport, Daemon: true}
			r, err := newRoot(o)
			must(t, err)
			srv, err := r.serve(link, o, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
				watch.RawFileSystem = raw
				return watch
			})
			must(t, err)
			watch.watching.Store(false)
			t.Cleanup(func() {
				syscall.Unmount(tm.mnt, syscall.MNT_DETACH)
				WaitEnd(srv)
			})
			if TransportOf(srv).Name != transport {
				t.Fatalf("transport %s, want %s", TransportOf(srv), transport)
			}
			watch.mu.Lock()
			if len(watch.seen) > 0 {
				t.Errorf("the daemon made requests on its own mount while mounting: %v", watch.seen)
			}
			watch.mu.Unlock()
			checkReadahead(t, tm.mnt, " (mounted through the symlink "+link+")")
		})
	}
}
