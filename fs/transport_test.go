package fs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/fs/uring"
	"golang.org/x/sys/unix"
)

// requireUringKernel skips, saying why, where FUSE over io_uring cannot
// be had: no kernel support, or not root (enable_uring is root's switch).
func requireUringKernel(t *testing.T) {
	t.Helper()
	requireFUSE(t)
	if _, err := os.Stat(enableUringParam); err != nil {
		t.Skipf("kernel without FUSE over io_uring (%v): needs Linux 6.14+ with CONFIG_FUSE_IO_URING", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot switch on " + enableUringParam)
	}
}

// settledParam reads enableUringParam until it says want, for up to 30 s,
// and returns what it last said: other test processes switch it on for a
// moment while their ring mounts start (and back off once up), so one
// read may catch their window (longer on a loaded machine); a mount that
// left it changed for good still shows after 30 s.
func settledParam(want []byte) []byte {
	now, _ := os.ReadFile(enableUringParam)
	for deadline := time.Now().Add(30 * time.Second); !bytes.Equal(now, want) && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
		now, _ = os.ReadFile(enableUringParam)
	}
	return now
}

// TestUringTransport mounts every variant over the ring and checks that it
// is the ring that carries the requests (the transport says so and its
// request counter moves with the operations), that data written through it
// reads back, from the mount and after a remount, and that enable_uring is
// back to what it was as soon as the ring is up.
func TestUringTransport(t *testing.T) {
	requireUringKernel(t)
	// A moment's "Y" may be another test process's mount starting (go
	// test runs packages at once, and every ring mount switches it on
	// for its start): the state to come back to is the one it settles in.
	paramBefore := settledParam([]byte("N\n"))
	for _, v := range append(variants, variant{name: "plainnames", cipher: "aes-xts", keyBytes: 64, plaintextNames: true}) {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.mount(t, func(o *Options) { o.Transport = TransportUring; o.UringDepth = 4 })
			info := TransportOf(tm.srv)
			if info.Name != TransportUring {
				t.Fatalf("transport %s, want uring", info)
			}
			if n, _ := uring.PossibleCPUs(); info.Queues != n || info.Depth != 4 {
				t.Errorf("ring %d queues x %d, want %d x 4", info.Queues, info.Depth, n)
			}
			if now := settledParam(paramBefore); !bytes.Equal(now, paramBefore) {
				t.Errorf("%s is %q while the ring mount runs, was %q before", enableUringParam, now, paramBefore)
			}
			if !strings.Contains(tm.log.String(), "transport uring") {
				t.Errorf("mount log does not name the transport: %q", tm.log.String())
			}
			before := info.RingRequests()
			big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16+7) // 300 KiB and a bit: many extents, a partial last one
			must(t, os.WriteFile(filepath.Join(tm.mnt, "big"), big, 0644))
			must(t, os.Mkdir(filepath.Join(tm.mnt, "d"), 0755))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "d", "small"), []byte("hello ring"), 0600))
			must(t, os.Rename(filepath.Join(tm.mnt, "d", "small"), filepath.Join(tm.mnt, "d", "moved")))
			must(t, syscall.Setxattr(filepath.Join(tm.mnt, "big"), "user.k", []byte("v"), 0))
			got, err := os.ReadFile(filepath.Join(tm.mnt, "big"))
			must(t, err)
			if !bytes.Equal(got, big) {
				t.Fatalf("read back %d bytes differ from the %d written", len(got), len(big))
			}
			ents, err := os.ReadDir(filepath.Join(tm.mnt, "d"))
			must(t, err)
			if len(ents) != 1 || ents[0].Name() != "moved" {
				t.Fatalf("readdir %v", ents)
			}
			val := make([]byte, 8)
			if n, err := syscall.Getxattr(filepath.Join(tm.mnt, "big"), "user.k", val); err != nil || string(val[:n]) != "v" {
				t.Fatalf("getxattr %q, %v", val[:n], err)
			}
			if d := TransportOf(tm.srv).RingRequests() - before; d < 8 {
				t.Fatalf("only %d requests came over the ring for a dozen operations", d)
			}
			tm.unmountNow(t)
			// What the ring wrote is on disk: read it over /dev/fuse.
			tm.unmounted = false
			tm.mount(t, func(o *Options) { o.Transport = TransportDev })
			got, err = os.ReadFile(filepath.Join(tm.mnt, "big"))
			must(t, err)
			if !bytes.Equal(got, big) {
				t.Fatal("content written over the ring differs when read over /dev/fuse")
			}
		})
	}
	if after := settledParam(paramBefore); !bytes.Equal(after, paramBefore) {
		t.Errorf("%s is %q after the mounts ended, was %q", enableUringParam, after, paramBefore)
	}
}

// TestUringFallbackNoKernel asks for the ring where the kernel has none
// (the module parameter is missing): auto and uring mount on /dev/fuse and
// say why.
func TestUringFallbackNoKernel(t *testing.T) {
	requireFUSE(t)
	old := enableUringParam
	enableUringParam = filepath.Join(t.TempDir(), "no-such-param")
	t.Cleanup(func() { enableUringParam = old })
	for _, tr := range []string{TransportAuto, TransportUring} {
		tm := newVolume(t, variants[2])
		tm.mount(t, func(o *Options) { o.Transport = tr })
		info := TransportOf(tm.srv)
		if info.Name != TransportDev || !strings.Contains(info.Reason, "kernel without FUSE over io_uring") {
			t.Errorf("%s: transport %q reason %q", tr, info.Name, info.Reason)
		}
		if !strings.Contains(tm.log.String(), "uring unavailable") {
			t.Errorf("%s: the log does not say why: %q", tr, tm.log.String())
		}
		must(t, os.WriteFile(filepath.Join(tm.mnt, "f"), []byte("x"), 0644))
	}
}

// TestUringFallbackRingFails makes the ring fail after INIT has handed the
// connection to it, when the kernel holds every request for the ring: the
// mount must still come up, on /dev/fuse, saying why, and work.
func TestUringFallbackRingFails(t *testing.T) {
	requireUringKernel(t)
	old := startRingFunc
	startRingFunc = func(*fuse.Server, fuse.RawFileSystem, *fuse.MountOptions, int, zerolog.Logger) (*uring.Transport, error) {
		return nil, errors.New("injected registration failure")
	}
	t.Cleanup(func() { startRingFunc = old })
	tm := newVolume(t, variants[0])
	tm.mount(t, func(o *Options) { o.Transport = TransportUring })
	info := TransportOf(tm.srv)
	if info.Name != TransportDev || !strings.Contains(info.Reason, "injected registration failure") {
		t.Fatalf("transport %q reason %q", info.Name, info.Reason)
	}
	must(t, os.WriteFile(filepath.Join(tm.mnt, "f"), []byte("still works"), 0644))
	if b, err := os.ReadFile(filepath.Join(tm.mnt, "f")); err != nil || string(b) != "still works" {
		t.Fatalf("read %q, %v", b, err)
	}
}

// blockingFS stalls LOOKUP of "block-me" until release is closed: a daemon
// that hangs on one request.
type blockingFS struct {
	fuse.RawFileSystem
	release chan struct{}
	// arrived, if set, is called when a LOOKUP of block-me arrives,
	// before it is held: the event a test waits for.
	arrived func()
}

func (b *blockingFS) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	if name == "block-me" {
		if b.arrived != nil {
			b.arrived()
		}
		<-b.release
		return fuse.ENOENT
	}
	return b.RawFileSystem.Lookup(cancel, h, name, out)
}

// mountBlocking mounts the twin over the ring with a daemon that stalls on
// block-me; arrived is closed when the daemon holds such a request.
func mountBlocking(t *testing.T, tm *testMount, release chan struct{}) (srv *fuse.Server, arrived <-chan struct{}) {
	t.Helper()
	o := Options{Lower: tm.lower, Log: zerolog.New(tm.log), Transport: TransportUring}
	r, err := newRoot(o)
	must(t, err)
	held := make(chan struct{})
	var once sync.Once
	srv, err = r.serve(tm.mnt, o, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		return &blockingFS{RawFileSystem: raw, release: release, arrived: func() { once.Do(func() { close(held) }) }}
	})
	must(t, err)
	if TransportOf(srv).Name != TransportUring {
		t.Fatalf("transport %s, want uring", TransportOf(srv))
	}
	return srv, held
}

// statInBackground stats path and sends the error when it returns.
func statInBackground(path string) chan error {
	done := make(chan error, 1)
	go func() {
		_, err := os.Stat(path)
		done <- err
	}()
	return done
}

// TestUringAbortStalledDaemon: a client waits on a request the daemon
// never answers; aborting the connection (/sys/fs/fuse/connections/N/abort,
// what a watchdog does) gives the client an error, and the server ends.
func TestUringAbortStalledDaemon(t *testing.T) {
	requireUringKernel(t)
	tm := newVolume(t, variants[2])
	release := make(chan struct{})
	srv, arrived := mountBlocking(t, tm, release)
	t.Cleanup(func() {
		close(release)
		syscall.Unmount(tm.mnt, syscall.MNT_DETACH)
		WaitEnd(srv)
	})
	done := statInBackground(filepath.Join(tm.mnt, "block-me"))
	select {
	case err := <-done:
		t.Fatalf("stat returned (%v) while the daemon stalls", err)
	case <-arrived:
	case <-time.After(time.Minute):
		t.Fatal("the stat's LOOKUP did not reach the daemon in a minute")
	}
	must(t, abortConnection(tm.mnt))
	select {
	case err := <-done:
		if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
			t.Errorf("stat after abort: %v, want ENOTCONN or ECONNABORTED", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("client still blocked 30 s after the connection was aborted")
	}
}

// TestUringKilledDaemon: a client blocked on the mount gets an error, not
// a hang, when the daemon serving it over the ring is killed (SIGKILL).
// The daemon is this test binary re-executed (TestUringDaemonHelper); the
// client's request holds the thread of its CPU's queue. (The client waits
// until the daemon has finished mounting, only so that its request is the
// one held. The daemon makes no request on its own mount, which matters:
// a daemon killed while one of its own threads waits on its own ring never
// exits, see docs/uring.md and TestDaemonLeavesItsMountAlone.)
func TestUringKilledDaemon(t *testing.T) {
	requireUringKernel(t)
	tm := newVolume(t, variants[2])
	// The killed helper cannot switch enable_uring back: we do.
	if param, err := os.ReadFile(enableUringParam); err == nil {
		t.Cleanup(func() { os.WriteFile(enableUringParam, param, 0) })
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestUringDaemonHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), "TWINCRYPT_URING_DAEMON="+tm.mnt, "TWINCRYPT_URING_DAEMON_LOWER="+tm.lower)
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	must(t, cmd.Start())
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		syscall.Unmount(tm.mnt, syscall.MNT_DETACH)
	})
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "helper: transport") {
		if time.Now().After(deadline) {
			t.Fatalf("helper daemon did not mount: %s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "helper: transport uring") {
		t.Fatalf("helper is not on the ring: %s", out.String())
	}
	done := statInBackground(filepath.Join(tm.mnt, "block-me"))
	for deadline := time.Now().Add(time.Minute); !strings.Contains(out.String(), "helper: holding block-me"); time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("stat returned (%v) while the daemon stalls; daemon said: %s", err, out.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stat's LOOKUP did not reach the daemon in a minute; daemon said: %s", out.String())
		}
	}
	must(t, cmd.Process.Signal(syscall.SIGKILL))
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("stat succeeded on a killed daemon")
		}
		t.Logf("client got: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("client still blocked 30 s after the daemon was killed")
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("killed daemon has not exited after 30 s")
	}
}

// TestUringDaemonHelper is the daemon of TestUringKilledDaemon; it does
// nothing unless started by it.
func TestUringDaemonHelper(t *testing.T) {
	mnt, lower := os.Getenv("TWINCRYPT_URING_DAEMON"), os.Getenv("TWINCRYPT_URING_DAEMON_LOWER")
	if mnt == "" {
		t.Skip("helper process of TestUringKilledDaemon")
	}
	o := Options{Lower: lower, Log: zerolog.New(os.Stderr), Transport: TransportUring, Daemon: true}
	r, err := newRoot(o)
	must(t, err)
	srv, err := r.serve(mnt, o, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		return &blockingFS{RawFileSystem: raw, release: make(chan struct{}), arrived: func() {
			os.Stderr.WriteString("helper: holding block-me\n")
		}}
	})
	must(t, err)
	os.Stderr.WriteString("helper: transport " + TransportOf(srv).String() + "\n")
	srv.Wait()
}

// TestUringLazyUnmount: umount --lazy of a ring mount with an open file;
// the file keeps working, and once it is closed the server and its ring
// end.
func TestUringLazyUnmount(t *testing.T) {
	requireUringKernel(t)
	tm := newVolume(t, variants[0])
	tm.mount(t, func(o *Options) { o.Transport = TransportUring })
	must(t, os.WriteFile(filepath.Join(tm.mnt, "f"), []byte("kept open"), 0644))
	f, err := os.Open(filepath.Join(tm.mnt, "f"))
	must(t, err)
	must(t, syscall.Unmount(tm.mnt, syscall.MNT_DETACH))
	tm.unmounted = true
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if string(buf[:n]) != "kept open" {
		t.Fatalf("read after lazy umount: %q, %v", buf[:n], err)
	}
	f.Close()
	ended := make(chan struct{})
	go func() { WaitEnd(tm.srv); close(ended) }()
	select {
	case <-ended:
	case <-time.After(30 * time.Second):
		t.Fatal("server and ring still running 30 s after the last file of a lazily unmounted mount was closed")
	}
}

// TestUringWaitsForInit starts the ring on a connection whose INIT nobody
// has answered (mounted by hand, /dev/fuse never read): the kernel must
// refuse with EAGAIN rather than take entries sized from defaults, so Start
// waits for INIT and gives up after its InitTimeout, leaving nothing
// registered.
func TestUringWaitsForInit(t *testing.T) {
	requireUringKernel(t)
	release, err := acquireUringParam(zerolog.Nop(), true)
	must(t, err)
	defer release()
	mnt := t.TempDir()
	fd, err := syscall.Open("/dev/fuse", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { syscall.Close(fd) })
	must(t, syscall.Mount("twincrypt-test", mnt, "fuse.twincrypt-test", syscall.MS_NOSUID|syscall.MS_NODEV,
		fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0", fd)))
	t.Cleanup(func() { syscall.Unmount(mnt, syscall.MNT_DETACH) })
	tr, err := uring.Start(uring.Config{DevFD: fd, Depth: 1, PayloadSize: 128 << 10, InitTimeout: 300 * time.Millisecond,
		Handle: func(in, out [][]byte) int { t.Error("request before INIT"); return 0 }})
	if err == nil {
		tr.Stop()
		tr.Wait()
		t.Fatal("ring registered before INIT was answered")
	}
	if !strings.Contains(err.Error(), "no INIT within") {
		t.Fatalf("Start before INIT: %v, want a wait for INIT", err)
	}
}

// slowReadFS holds every READ of uring.OffloadMin bytes or more until
// release is closed, after saying so on arrived.
type slowReadFS struct {
	fuse.RawFileSystem
	arrived chan struct{}
	once    sync.Once
	release chan struct{}
}

func (s *slowReadFS) Read(cancel <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	if in.Size >= uring.OffloadMin {
		s.once.Do(func() { close(s.arrived) })
		<-s.release
	}
	return s.RawFileSystem.Read(cancel, in, buf)
}

// onCPU runs f on a thread pinned to cpu, so that its FUSE requests go to
// that CPU's ring queue.
func onCPU(t *testing.T, cpu int, f func()) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		var set unix.CPUSet
		set.Set(cpu)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			errc <- err
			return
		}
		errc <- nil
		f()
	}()
	if err := <-errc; err != nil {
		t.Skipf("cannot pin a thread to CPU %d: %v", cpu, err)
	}
}

// TestUringOffloadKeepsQueueServing: a large READ is answered off its
// queue's thread, so that while it takes long (here: held by the daemon),
// the other requests of the same CPU's queue are still answered. The
// reader and the second caller run pinned to one CPU, whose queue gets
// both; a queue that answered its requests one after another would leave
// the LOOKUP waiting behind the READ. The READ's data must then arrive
// whole.
func TestUringOffloadKeepsQueueServing(t *testing.T) {
	requireUringKernel(t)
	tm := newVolume(t, variants[2])
	want := bytes.Repeat([]byte("offloaded read, "), 1<<20/16)
	must(t, os.WriteFile(filepath.Join(tm.lower, "big"), want, 0644))
	slow := &slowReadFS{arrived: make(chan struct{}), release: make(chan struct{})}
	o := Options{Lower: tm.lower, Log: zerolog.New(tm.log), Transport: TransportUring}
	r, err := newRoot(o)
	must(t, err)
	srv, err := r.serve(tm.mnt, o, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
		slow.RawFileSystem = raw
		return slow
	})
	must(t, err)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { close(slow.release) }) }
	t.Cleanup(func() {
		release()
		syscall.Unmount(tm.mnt, syscall.MNT_DETACH)
		WaitEnd(srv)
	})
	if TransportOf(srv).Name != TransportUring {
		t.Fatalf("transport %s, want uring", TransportOf(srv))
	}
	type result struct {
		b   []byte
		err error
	}
	read := make(chan result, 1)
	onCPU(t, 0, func() {
		b, err := os.ReadFile(filepath.Join(tm.mnt, "big"))
		read <- result{b, err}
	})
	select {
	case <-slow.arrived:
	case <-time.After(30 * time.Second):
		t.Fatal("no large READ reached the daemon in 30 s")
	}
	looked := make(chan error, 1)
	onCPU(t, 0, func() {
		_, err := os.Lstat(filepath.Join(tm.mnt, "no-such-name"))
		looked <- err
	})
	select {
	case err := <-looked:
		if !errors.Is(err, syscall.ENOENT) {
			t.Errorf("lstat while a READ is held: %v, want ENOENT", err)
		}
	case <-time.After(60 * time.Second):
		t.Error("a LOOKUP on the same queue got no answer in 60 s while a large READ was held: the queue answers one request at a time")
	}
	release()
	select {
	case res := <-read:
		if res.err != nil || !bytes.Equal(res.b, want) {
			t.Fatalf("read %d bytes (%v), want the %d written", len(res.b), res.err, len(want))
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the held READ never completed once released")
	}
}
