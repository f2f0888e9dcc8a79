package fs

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/fs/uring"
)

// How requests travel between the kernel and the daemon (Options.Transport).
const (
	// TransportDev is read(2)/write(2) on /dev/fuse, go-fuse's own loop.
	TransportDev = "dev"
	// TransportUring is FUSE over io_uring (fs/uring): per-CPU queues of
	// ring entries; INIT, FORGET, INTERRUPT and notifications stay on
	// /dev/fuse. A mount asked for it falls back to /dev/fuse, saying
	// why, when the kernel cannot do it. As root it switches the fuse
	// module's machine-wide enable_uring on for its INIT if the
	// administrator left it off (acquireUringParam).
	TransportUring = "uring"
	// TransportAuto is uring where the kernel has it and the
	// administrator switched enable_uring on, else dev; it never
	// switches enable_uring itself.
	TransportAuto = "auto"
)

// DefaultTransport is the transport of a mount made through this package
// that names none: /dev/fuse. A program that mounts in its own process and
// also uses the mount (tests, tools built on this package) should stay on
// it: a process killed while one of its threads waits on a request of its
// own ring never exits (Linux 6.18, docs/uring.md).
const DefaultTransport = TransportDev

// DaemonTransport is the transport of twincrypt's own daemon (twincrypt
// mount) when none is named: the ring where the kernel has it and the
// administrator switched it on. The daemon
// makes no request on its own mount, so the case above cannot arise, and
// the ring is faster on most workloads of the bench and level on the rest
// (docs/uring.md).
const DaemonTransport = TransportAuto

// ParseTransport checks a --transport value.
func ParseTransport(s string) (string, error) {
	switch s {
	case "":
		return DefaultTransport, nil
	case TransportDev, TransportUring, TransportAuto:
		return s, nil
	}
	return "", fmt.Errorf("unknown transport %q (want auto, dev or uring)", s)
}

// TransportInfo says how a mount's requests travel.
type TransportInfo struct {
	// Name is TransportDev or TransportUring: what the mount uses.
	Name string
	// Asked is what Options.Transport asked for.
	Asked string
	// Reason says why a mount that asked for the ring is on /dev/fuse.
	Reason string
	// Queues and Depth describe the ring.
	Queues, Depth int
	ring          *uring.Transport
}

// String is the one-line form for logs and stats: "uring (2 queues x 8)",
// "dev", "dev (uring unavailable: ...)".
func (i TransportInfo) String() string {
	switch {
	case i.Name == TransportUring:
		return fmt.Sprintf("uring (%d queues x %d entries)", i.Queues, i.Depth)
	case i.Reason != "":
		return fmt.Sprintf("dev (uring unavailable: %s)", i.Reason)
	}
	return i.Name
}

// RingRequests is the number of requests answered over the ring so far
// (0 on /dev/fuse).
func (i TransportInfo) RingRequests() uint64 {
	if i.ring == nil {
		return 0
	}
	return i.ring.Served()
}

var transports sync.Map // *fuse.Server -> TransportInfo

// TransportOf returns how the mount served by srv gets its requests.
func TransportOf(srv *fuse.Server) TransportInfo {
	if v, ok := transports.Load(srv); ok {
		return v.(TransportInfo)
	}
	return TransportInfo{Name: TransportDev, Asked: TransportDev}
}

// enableUringParam is the fuse module's switch: the kernel offers
// FUSE_OVER_IO_URING in INIT only while it is set.
var enableUringParam = "/sys/module/fuse/parameters/enable_uring"

// uringParamLock serialises, across processes, the window in which a
// mount switches enable_uring on for its INIT: a mount that found it off
// switches it off again as soon as its ring is set up (a connection keeps
// its ring once it has one), and another root twincrypt mount must not
// see it on then and take it for the machine's setting. It is root's
// (0600): a lock others could hold would let them stall root's mounts.
// Any other mount (another user's, another FUSE daemon) whose INIT falls
// in a window is offered the ring: the window --transport uring
// documents.
var uringParamLock = "/run/twincrypt-enable-uring.lock"

// acquireUringParam makes sure the kernel offers the ring to the next
// INIT; release (call it once the ring is up or has failed) lets other
// mounts in. Where enable_uring is off (the administrator's setting), it
// switches it on for the INIT and back off at release only if enable
// (TransportUring, asked for by name) and the process may (root); auto
// never touches it (issue #39, finding 6: a machine-wide switch flipped
// by every root mount let other users' mounts have the ring meanwhile).
// It returns why not when it cannot.
func acquireUringParam(log zerolog.Logger, enable bool) (release func(), err error) {
	if _, err := os.Stat(enableUringParam); errors.Is(err, os.ErrNotExist) {
		return nil, errors.New("kernel without FUSE over io_uring (no " + enableUringParam + "; needs Linux 6.14+ with CONFIG_FUSE_IO_URING)")
	}
	root := true
	unlock := func() {}
	lock, err := os.OpenFile(uringParamLock, os.O_RDWR|os.O_CREATE|syscall.O_NOFOLLOW, 0600)
	if err != nil {
		// Not root: nothing to switch, so nothing to serialise; the ring
		// is there if the administrator switched it on.
		root = false
	} else {
		if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
			lock.Close()
			return nil, fmt.Errorf("lock for %s: %w", enableUringParam, err)
		}
		unlock = func() { lock.Close() } // closing drops the flock
	}
	b, err := os.ReadFile(enableUringParam)
	if err != nil {
		unlock()
		return nil, err
	}
	if strings.TrimSpace(string(b)) == "Y" {
		return unlock, nil
	}
	if !enable || !root {
		unlock()
		if !enable {
			return nil, fmt.Errorf("%s is off (the administrator's setting; --transport uring as root switches it on for the mount's start)", enableUringParam)
		}
		return nil, fmt.Errorf("%s is off and only root may switch it on", enableUringParam)
	}
	if err := os.WriteFile(enableUringParam, []byte("1"), 0); err != nil {
		unlock()
		return nil, fmt.Errorf("%s is off and cannot be switched on: %w", enableUringParam, err)
	}
	log.Info().Msgf("switched %s on for this mount's INIT; it is switched off again once the ring is set up", enableUringParam)
	return func() {
		if err := os.WriteFile(enableUringParam, []byte("0"), 0); err != nil {
			log.Warn().Msgf("restore %s: %v", enableUringParam, err)
		} else {
			log.Info().Msgf("switched %s off again", enableUringParam)
		}
		unlock()
	}, nil
}

// startRing moves a freshly mounted connection to the ring, after INIT
// (NewServer) and before Serve: the kernel holds every request after INIT
// until all queues are registered. raw is the filesystem srv serves. On
// failure the error says why.
func startRing(srv *fuse.Server, raw fuse.RawFileSystem, opts *fuse.MountOptions, depth int, log zerolog.Logger) (*uring.Transport, error) {
	fd, err := devFuseFD(srv)
	if err != nil {
		return nil, err
	}
	// The ring's requests are decoded and dispatched by go-fuse, by a
	// ProtocolServer over the same RawFileSystem. It must know what INIT
	// negotiated (protocol minor, flags) to decode as the Server does: it
	// is told by answering the very INIT the kernel sent, which NewServer
	// has answered before returning.
	ps := fuse.NewProtocolServer(raw, opts)
	if err := primeInit(ps, srv.KernelSettings()); err != nil {
		return nil, err
	}
	page := os.Getpagesize()
	maxWrite := opts.MaxWrite
	if maxWrite <= 0 {
		maxWrite = 128 << 10
	}
	// The kernel wants room for max(max_write, max_pages pages) per entry.
	payload := max(8192, (maxWrite+page-1)/page*page)
	return uring.Start(uring.Config{
		DevFD:       fd,
		Depth:       depth,
		PayloadSize: payload,
		Handle: func(in, out [][]byte) int {
			n, st := ps.HandleRequest(in, out)
			if !st.Ok() {
				return 0
			}
			return n
		},
		Logf: func(format string, args ...any) { log.Warn().Msgf(format, args...) },
	})
}

// primeInit hands ps the kernel's INIT request, so that it negotiates
// exactly what the Server did with the same options.
func primeInit(ps *fuse.ProtocolServer, ks *fuse.InitIn) error {
	// go-fuse's InitIn starts with the request's InHeader.
	initIn := *ks
	initIn.InHeader = fuse.InHeader{Length: uint32(unsafe.Sizeof(initIn)), Opcode: 26 /* FUSE_INIT */, Unique: 1}
	in := unsafe.Slice((*byte)(unsafe.Pointer(&initIn)), unsafe.Sizeof(initIn))
	out := make([]byte, 4096)
	n, st := ps.HandleRequest([][]byte{in}, [][]byte{out})
	if !st.Ok() || n < 16 {
		return fmt.Errorf("decoder INIT: %v", st)
	}
	if errno := int32(*(*uint32)(unsafe.Pointer(&out[4]))); errno != 0 {
		return fmt.Errorf("decoder INIT: %v", syscall.Errno(-errno))
	}
	return nil
}

// devFuseFD returns the /dev/fuse descriptor of srv. go-fuse v2.12 keeps it
// unexported (Server.fuseFD.file); we read it by reflection, the one place
// this package depends on go-fuse's internals. If a go-fuse upgrade moves
// it, this fails and mounts fall back to /dev/fuse, saying so, and
// TestUringTransport fails.
func devFuseFD(srv *fuse.Server) (int, error) {
	v := reflect.ValueOf(srv).Elem().FieldByName("fuseFD")
	if !v.IsValid() || v.Kind() != reflect.Pointer || v.IsNil() {
		return -1, errors.New("go-fuse internals changed: no Server.fuseFD")
	}
	f := v.Elem().FieldByName("file")
	if !f.IsValid() || f.Type() != reflect.TypeOf((*os.File)(nil)) || f.IsNil() {
		return -1, errors.New("go-fuse internals changed: no fuseFD.file")
	}
	file := (*os.File)(unsafe.Pointer(f.Pointer()))
	conn, err := file.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd := -1
	if err := conn.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, err
	}
	return fd, nil
}

var ends sync.Map // *fuse.Server -> chan struct{}, closed when all is released

// WaitEnd is srv.Wait for a server Mount made: it also waits for the ring
// to end and enable_uring to be given back. A daemon calls it, not
// srv.Wait, before it exits.
func WaitEnd(srv *fuse.Server) {
	srv.Wait()
	if ch, ok := ends.Load(srv); ok {
		<-ch.(chan struct{})
	}
}

// startRingFunc is startRing; tests replace it to make the ring fail.
var startRingFunc = startRing

// ringStuckError is a mount lost to a ring that failed after INIT had
// switched the connection to it: the kernel holds every request for a ring
// that never comes, so the connection was aborted.
type ringStuckError struct{ reason string }

func (e *ringStuckError) Error() string {
	return "FUSE over io_uring failed after INIT (" + e.reason + "); connection aborted"
}

// ringHoldsConnection says whether a ring that failed with err leaves the
// connection waiting for it: INIT granted FUSE_OVER_IO_URING (the kernel
// offered it and we asked), and the kernel did not refuse the ring
// outright.
func ringHoldsConnection(srv *fuse.Server, err error) bool {
	return srv.KernelSettings().Flags64()&fuse.CAP_OVER_IO_URING != 0 && !errors.Is(err, uring.ErrUnsupported)
}

// dropStuckConnection ends a connection that waits for a ring that will
// not come: it aborts it, so that nothing waits on it, lets go-fuse's loop
// see the end, and takes the mount away.
func dropStuckConnection(srv *fuse.Server, mnt string, ringErr error) error {
	abortErr := abortConnection(mnt)
	syscall.Unmount(mnt, syscall.MNT_DETACH)
	go srv.Serve()
	srv.Wait()
	if abortErr != nil {
		return fmt.Errorf("mount %s: ring failed (%v) and the connection could not be aborted: %w", mnt, ringErr, abortErr)
	}
	return &ringStuckError{reason: ringErr.Error()}
}

// abortConnection aborts the FUSE connection mounted at mnt through
// /sys/fs/fuse/connections/N/abort: every request waiting on it fails with
// ENOTCONN. N is the mount's device number, read from /proc/self/mountinfo
// (a stat of the mount point would itself wait on the connection).
func abortConnection(mnt string) error {
	dev, err := mountDevice(mnt)
	if err != nil {
		return err
	}
	p := fmt.Sprintf("%s/%d/abort", fuseCtlDir, dev)
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		// fusectl is usually mounted by systemd; where it is not, mount
		// it (it only shows the connections' controls).
		if err := syscall.Mount("fusectl", fuseCtlDir, "fusectl", 0, ""); err != nil && !errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("mount fusectl at %s: %w", fuseCtlDir, err)
		}
	}
	if err := os.WriteFile(p, []byte("1"), 0); err != nil {
		return fmt.Errorf("abort FUSE connection: %w", err)
	}
	return nil
}

// fuseCtlDir is where the fusectl filesystem shows each connection.
const fuseCtlDir = "/sys/fs/fuse/connections"

// mountDevice returns the kernel's device number (major<<20 | minor) of
// the last mount at mnt in /proc/self/mountinfo.
func mountDevice(mnt string) (uint64, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return 0, err
	}
	found := false
	var dev uint64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || unescapeMountinfo(f[4]) != mnt {
			continue
		}
		var major, minor uint64
		if _, err := fmt.Sscanf(f[2], "%d:%d", &major, &minor); err != nil {
			continue
		}
		dev, found = major<<20|minor, true
	}
	if !found {
		return 0, fmt.Errorf("%s not in /proc/self/mountinfo", mnt)
	}
	return dev, nil
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v int
			if _, err := fmt.Sscanf(s[i+1:i+4], "%o", &v); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// finishTransport runs once the mount is up: it records and logs what the
// mount uses (ring, or /dev/fuse because of ringErr). The returned
// function ends the ring after the server is gone.
func finishTransport(srv *fuse.Server, o Options, asked string, t *uring.Transport, ringErr error, mnt string) func() {
	info := TransportInfo{Name: TransportDev, Asked: asked}
	if asked != TransportDev {
		if t == nil {
			if ringErr == nil {
				ringErr = errors.New("no ring")
			}
			if errors.Is(ringErr, uring.ErrUnsupported) && srv.KernelSettings().Flags64()&fuse.CAP_OVER_IO_URING == 0 {
				ringErr = errors.New("the kernel did not offer FUSE_OVER_IO_URING in INIT")
			}
			info.Reason = ringErr.Error()
		} else {
			info.Name, info.Queues, info.Depth, info.ring = TransportUring, t.Queues(), t.Depth(), t
		}
	}
	transports.Store(srv, info)
	if asked == TransportUring && info.Name != TransportUring {
		// Asked for by name: not having it is worth a warning; auto's
		// fallback is only news.
		o.Log.Warn().Msgf("mount %s: transport %s", mnt, info)
	} else {
		o.Log.Info().Msgf("mount %s: transport %s", mnt, info)
	}
	return func() {
		if t != nil {
			// The kernel hands every entry back when the connection
			// ends; give it a moment, then stop what is left.
			select {
			case <-t.Done():
			case <-time.After(5 * time.Second):
				t.Stop()
				t.Wait()
			}
		}
		transports.Delete(srv)
	}
}
