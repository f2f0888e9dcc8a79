package fs

// A LOWER writer freezes the mount by swapping a file for a FIFO (issue 39,
// finding 1): the daemon's open(2) of a FIFO for reading waits for a
// writer, and on the ring it waits on a queue thread, so every caller on
// that CPU waits too. And a request that waits on LOWER for a good reason
// (an open held by a lease break) must not hold up its ring queue either.

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// openResult is what an open through the mount gave.
type openResult struct {
	fd  int
	err error
}

// TestHostileFifoOpen: on both transports, a file the kernel has a node
// for (held by an O_PATH descriptor, so no lookup comes between) is
// replaced in LOWER by a FIFO; opening it through the mount for reading,
// then for writing, must fail promptly with EIO (what the mount gives for
// a lower object it will not read: a corrupt file, a device swapped in)
// and leave the mount serving. Before the fix the read open hung in the
// daemon's open(2) of the FIFO (on the ring, with the whole queue), and so
// did the twin's write open (waiting for a reader; crypt opens read-write,
// which a FIFO lets through, and newFile refused it). The test unblocks
// such an open itself by opening the FIFO, so that a failing run ends.
func TestHostileFifoOpen(t *testing.T) {
	requireFUSE(t)
	for _, tr := range []string{TransportDev, TransportUring} {
		for _, v := range []variant{variants[0], variants[2]} {
			t.Run(tr+"/"+v.name, func(t *testing.T) {
				if tr == TransportUring {
					requireUringKernel(t)
				}
				tm := newVolume(t, v)
				tm.mount(t, func(o *Options) { o.Transport = tr })
				if got := TransportOf(tm.srv).Name; got != tr {
					t.Fatalf("transport %s, want %s", TransportOf(tm.srv), tr)
				}
				must(t, os.WriteFile(filepath.Join(tm.mnt, "keep"), []byte("keep"), 0644))
				must(t, os.WriteFile(filepath.Join(tm.mnt, "victim"), []byte("victim"), 0666))
				vfd := opath(t, filepath.Join(tm.mnt, "victim"), 0)
				lv := lowerPath(t, tm, "victim")
				must(t, os.Remove(lv))
				must(t, unix.Mkfifo(lv, 0666))
				// A writer's open wakes every reader waiting in the FIFO's
				// open; O_RDWR never waits itself.
				unblock := func() {
					if fd, err := unix.Open(lv, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
						unix.Close(fd)
					}
				}
				t.Cleanup(unblock)

				for _, mode := range []struct {
					name  string
					flags int
				}{{"read", unix.O_RDONLY}, {"write", unix.O_WRONLY}} {
					done := make(chan openResult, 1)
					go func() {
						fd, err := unix.Open(procPath(vfd), mode.flags|unix.O_CLOEXEC, 0)
						done <- openResult{fd, err}
					}()
					var res openResult
					select {
					case res = <-done:
					case <-time.After(30 * time.Second):
						t.Errorf("open for %s of a file swapped for a FIFO in LOWER: no answer in 30 s (the daemon waits in the FIFO's open)", mode.name)
						unblock()
						select {
						case res = <-done:
						case <-time.After(60 * time.Second):
							t.Fatalf("open for %s still waiting after the FIFO was opened for writing", mode.name)
						}
					}
					if res.err == nil {
						unix.Close(res.fd)
					}
					if !errors.Is(res.err, syscall.EIO) {
						t.Errorf("open for %s of a file swapped for a FIFO: %v, want EIO", mode.name, res.err)
					}
				}
				if !strings.Contains(tm.log.String(), "not a regular file in LOWER") {
					t.Errorf("no log line names the FIFO in LOWER:\n%s", tm.log.String())
				}

				// The other lower opens a FIFO could meet: a listing of
				// a directory swapped for one (O_DIRECTORY: the kernel
				// refuses a non-directory before its open) and the
				// xattr calls on the swapped file (O_PATH). Any answer
				// will do, as long as one comes.
				must(t, os.Mkdir(filepath.Join(tm.mnt, "d"), 0755))
				dfd := opath(t, filepath.Join(tm.mnt, "d"), unix.O_DIRECTORY)
				ld := lowerPath(t, tm, "d")
				must(t, os.RemoveAll(ld))
				must(t, unix.Mkfifo(ld, 0666))
				t.Cleanup(func() {
					if fd, err := unix.Open(ld, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
						unix.Close(fd)
					}
				})
				for _, c := range []struct {
					what string
					do   func() error
				}{
					{"readdir of a directory swapped for a FIFO", func() error { _, err := os.ReadDir(procPath(dfd)); return err }},
					{"getxattr of a file swapped for a FIFO", func() error {
						_, err := unix.Getxattr(procPath(vfd), "user.x", make([]byte, 64))
						return err
					}},
					{"listxattr of a file swapped for a FIFO", func() error {
						_, err := unix.Listxattr(procPath(vfd), make([]byte, 256))
						return err
					}},
				} {
					done := make(chan error, 1)
					go func() { done <- c.do() }()
					select {
					case err := <-done:
						t.Logf("%s: %v", c.what, err)
					case <-time.After(30 * time.Second):
						t.Errorf("%s: no answer in 30 s", c.what)
					}
				}
				alive(t, tm)
			})
		}
	}
}

// TestLeaseHeldOpenKeepsServing: an OPEN that waits on LOWER holds up no
// other request. A process holding a read lease on a lower file makes the
// daemon's open of it for writing wait until the lease is given up (or
// lease-break-time, 45 s, passes); meanwhile a LOOKUP from the same CPU
// (on the ring: the same queue) must be answered, and the OPEN must still
// be waiting when it is (so the order proves it, not a time), then succeed
// once the lease is given up, as a native open does. Before the fix the
// OPEN ran on the ring's queue thread and the LOOKUP came back only after
// the kernel broke the lease by force. Now the OPEN's first, non-blocking
// try on the queue thread meets the lease and asks to be answered again
// off the thread (uring.RetryAway); on /dev/fuse the try is followed by a
// waiting open on the same reader thread.
func TestLeaseHeldOpenKeepsServing(t *testing.T) {
	requireFUSE(t)
	for _, tr := range []string{TransportDev, TransportUring} {
		t.Run(tr, func(t *testing.T) {
			if tr == TransportUring {
				requireUringKernel(t)
			}
			leaseHeldOpen(t, tr)
		})
	}
}

func leaseHeldOpen(t *testing.T, tr string) {
	tm := newVolume(t, variants[2])
	tm.mount(t, func(o *Options) { o.Transport = tr })
	if TransportOf(tm.srv).Name != tr {
		t.Fatalf("transport %s, want %s", TransportOf(tm.srv), tr)
	}
	lp := filepath.Join(tm.lower, "leased")
	must(t, os.WriteFile(lp, []byte("leased"), 0644))
	// Looked up before the lease: the LOOKUP below must be a new one.
	_, err := os.Stat(filepath.Join(tm.mnt, "leased"))
	must(t, err)

	lfd, err := unix.Open(lp, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	must(t, err)
	released := false
	release := func() {
		if !released {
			released = true
			unix.FcntlInt(uintptr(lfd), unix.F_SETLEASE, unix.F_UNLCK)
			unix.Close(lfd)
		}
	}
	t.Cleanup(release)
	if _, err := unix.FcntlInt(uintptr(lfd), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		t.Skipf("cannot take a read lease on %s: %v", lp, err)
	}

	opened := make(chan openResult, 1)
	onCPU(t, 0, func() {
		fd, err := unix.Open(filepath.Join(tm.mnt, "leased"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		opened <- openResult{fd, err}
	})
	// The event: a break under way, which F_GETLEASE shows as the type
	// the lease is to become (F_UNLCK). (The SIGIO that announces it is
	// sent to the thread that took the lease, if it still exists: not a
	// thing a Go test controls.)
	for deadline := time.Now().Add(30 * time.Second); ; {
		lt, err := unix.FcntlInt(uintptr(lfd), unix.F_GETLEASE, 0)
		must(t, err)
		if lt == unix.F_UNLCK {
			break
		}
		select {
		case res := <-opened:
			t.Fatalf("open for writing of a leased file returned (%v) before the lease was broken", res.err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the daemon's open broke no lease in 30 s")
		}
		time.Sleep(time.Millisecond)
	}

	looked := make(chan error, 1)
	onCPU(t, 0, func() {
		_, err := os.Lstat(filepath.Join(tm.mnt, "no-such-name"))
		looked <- err
	})
	select {
	case err := <-looked:
		if !errors.Is(err, syscall.ENOENT) {
			t.Errorf("lstat while an OPEN waits for a lease: %v, want ENOENT", err)
		}
		select {
		case res := <-opened:
			t.Errorf("the LOOKUP was answered only after the OPEN (%v): the OPEN held its queue or thread until it returned", res.err)
			if res.err == nil {
				unix.Close(res.fd)
			}
			return
		default:
		}
	case <-time.After(60 * time.Second):
		t.Error("a LOOKUP from the same CPU got no answer in 60 s while an OPEN waited for a lease")
	}
	release()
	select {
	case res := <-opened:
		if res.err != nil {
			t.Fatalf("open once the lease was given up: %v", res.err)
		}
		unix.Close(res.fd)
	case <-time.After(60 * time.Second):
		t.Fatal("the OPEN never completed once the lease was given up")
	}
}

// TestHostileDeviceOpen: a file replaced in LOWER by a character device is
// refused before its driver's open runs. The device is 0:0, which no
// driver serves: an open of it fails ENXIO in the driver lookup, so EIO
// (the mount's refusal) shows that the daemon never opened it, both for
// an OPEN and for a truncate by path (SETATTR). Before the fix both
// opened it first (and gave the driver's ENXIO).
func TestHostileDeviceOpen(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("making a device node needs root (CAP_MKNOD)")
	}
	for _, tr := range []string{TransportDev, TransportUring} {
		for _, v := range []variant{variants[0], variants[2]} {
			t.Run(tr+"/"+v.name, func(t *testing.T) {
				if tr == TransportUring {
					requireUringKernel(t)
				}
				tm := newVolume(t, v)
				tm.mount(t, func(o *Options) { o.Transport = tr })
				if got := TransportOf(tm.srv).Name; got != tr {
					t.Fatalf("transport %s, want %s", TransportOf(tm.srv), tr)
				}
				must(t, os.WriteFile(filepath.Join(tm.mnt, "keep"), []byte("keep"), 0644))
				must(t, os.WriteFile(filepath.Join(tm.mnt, "victim"), []byte("victim"), 0666))
				vfd := opath(t, filepath.Join(tm.mnt, "victim"), 0)
				lv := lowerPath(t, tm, "victim")
				must(t, os.Remove(lv))
				if err := unix.Mknod(lv, unix.S_IFCHR|0666, 0); err != nil {
					t.Skipf("mknod in LOWER: %v", err)
				}
				for _, c := range []struct {
					what string
					do   func() error
				}{
					{"open for read", func() error {
						fd, err := unix.Open(procPath(vfd), unix.O_RDONLY|unix.O_CLOEXEC, 0)
						if err == nil {
							unix.Close(fd)
						}
						return err
					}},
					{"open for write", func() error {
						fd, err := unix.Open(procPath(vfd), unix.O_WRONLY|unix.O_CLOEXEC, 0)
						if err == nil {
							unix.Close(fd)
						}
						return err
					}},
					{"truncate", func() error { return unix.Truncate(procPath(vfd), 0) }},
				} {
					// ESTALE where the device did not get the file's
					// inode number (sameLower), EIO where it did: both
					// refused before the device's open.
					if err := c.do(); !errors.Is(err, syscall.EIO) && !(c.what == "truncate" && errors.Is(err, syscall.ESTALE)) {
						t.Errorf("%s of a file swapped for a device in LOWER: %v, want EIO (refused before the device's open)", c.what, err)
					}
				}
				alive(t, tm)
			})
		}
	}
}

// TestHostileDeviceMetadata: the mount's own metadata files in LOWER (a
// long name's sidecar, a directory's IV, a long symlink's sidecar)
// replaced by a character device, and another sidecar by a FIFO, are
// refused without their open: the listing hides the long names and says
// why ("character device" in the log), the directory whose IV is a device
// fails to list, the long link reads EIO, and an fsync of the directory,
// which syncs its sidecars, skips them. The device is 0:0,
// which no driver serves, so the driver lookup's ENXIO anywhere (in an
// answer or in the log) shows that the daemon opened it; before the fix
// the sidecar and IV reads (readSmallFile) and the sidecar syncs
// (syncMeta) opened them O_NONBLOCK and checked the type afterwards.
func TestHostileDeviceMetadata(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("making a device node needs root (CAP_MKNOD)")
	}
	for _, tr := range []string{TransportDev, TransportUring} {
		t.Run(tr, func(t *testing.T) {
			if tr == TransportUring {
				requireUringKernel(t)
			}
			tm := newVolume(t, variants[0])
			setTr := func(o *Options) { o.Transport = tr }
			tm.mount(t, setTr)
			longDev, longFifo := strings.Repeat("d", 200), strings.Repeat("f", 200)
			for _, p := range []string{"keep", longDev, longFifo, "sub/f"} {
				if strings.HasPrefix(p, "sub/") {
					must(t, os.MkdirAll(filepath.Join(tm.mnt, "sub"), 0755))
				}
				must(t, os.WriteFile(filepath.Join(tm.mnt, p), []byte("keep"), 0644))
			}
			// A target this long is sealed into a sidecar in the links store.
			must(t, os.Symlink(strings.Repeat("t/", 2000), filepath.Join(tm.mnt, "longlink")))
			stored, err := os.ReadDir(filepath.Join(tm.lower, links.StoreDir))
			if err != nil || len(stored) != 1 {
				t.Fatalf("links store: %v, %d entries, want the long link's sidecar", err, len(stored))
			}
			linkSide := filepath.Join(tm.lower, links.Sidecar(stored[0].Name()))
			sideDev := lowerPath(t, tm, longDev) + names.LongSuffix
			sideFifo := lowerPath(t, tm, longFifo) + names.LongSuffix
			subIV := filepath.Join(lowerPath(t, tm, "sub"), names.DirIVFile)
			// Unmounted while planting, so that nothing read before is
			// remembered.
			tm.unmountNow(t)
			for _, p := range []string{sideDev, subIV, linkSide} {
				must(t, os.Remove(p))
				if err := unix.Mknod(p, unix.S_IFCHR|0666, 0); err != nil {
					t.Skipf("mknod in LOWER: %v", err)
				}
			}
			must(t, os.Remove(sideFifo))
			must(t, unix.Mkfifo(sideFifo, 0666))
			t.Cleanup(func() {
				if fd, err := unix.Open(sideFifo, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
					unix.Close(fd)
				}
			})
			tm.unmounted = false
			tm.mount(t, setTr)

			for _, c := range []struct {
				what string
				do   func() error
				ok   func(error) bool
				want string
			}{
				{"list the root", func() error {
					ents, err := os.ReadDir(tm.mnt)
					for _, e := range ents {
						if e.Name() == longDev || e.Name() == longFifo {
							return errors.New("lists " + e.Name()[:1] + "... whose sidecar is not a file")
						}
					}
					return err
				}, func(err error) bool { return err == nil }, "success, the two long names hidden"},
				{"list the directory whose IV is a device", func() error { _, err := os.ReadDir(filepath.Join(tm.mnt, "sub")); return err },
					func(err error) bool { return errors.Is(err, syscall.EIO) }, "EIO (a damaged IV)"},
				{"readlink of a long link whose sidecar is a device", func() error { _, err := os.Readlink(filepath.Join(tm.mnt, "longlink")); return err },
					func(err error) bool { return errors.Is(err, syscall.EIO) }, "EIO (an unreadable target)"},
				{"fsync the root", func() error {
					f, err := os.Open(tm.mnt)
					if err != nil {
						return err
					}
					defer f.Close()
					return f.Sync()
				}, func(err error) bool { return err == nil }, "success (a planted sidecar is nothing of ours to sync)"},
			} {
				done := make(chan error, 1)
				go func() { done <- c.do() }()
				select {
				case err := <-done:
					if !c.ok(err) {
						t.Errorf("%s: %v, want %s", c.what, err, c.want)
					}
				case <-time.After(30 * time.Second):
					t.Errorf("%s: no answer in 30 s (the daemon waits in a FIFO's open)", c.what)
				}
			}
			log := tm.log.String()
			if strings.Contains(log, "no such device or address") || !strings.Contains(log, "character device") {
				t.Errorf("the log does not say that the device was refused unopened:\n%s", log)
			}
			alive(t, tm)
		})
	}
}
