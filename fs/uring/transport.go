// Package uring serves a FUSE connection over io_uring (FUSE over io_uring,
// Linux 6.14+, protocol 7.42): instead of read(2) and write(2) on /dev/fuse,
// the server registers ring entries (a header buffer and a payload buffer
// each) per queue with IORING_OP_URING_CMD on the /dev/fuse descriptor; the
// kernel completes an entry's command when it has put a request into its
// buffers, and the server answers and asks for the next request in one
// COMMIT_AND_FETCH command. See Documentation/filesystems/fuse-io-uring.rst
// and include/uapi/linux/fuse.h in the kernel tree.
//
// The kernel has one queue per possible CPU and sends a request to the queue
// of the CPU its caller runs on; it uses the ring only once every queue has
// at least one entry registered, and until then (and for INIT, FORGET,
// INTERRUPT and notifications always) keeps using /dev/fuse. This package
// is the ring alone: it knows nothing of go-fuse. The caller decodes and
// answers requests (Config.Handle) and keeps serving /dev/fuse.
//
// Each queue is served by one goroutine locked to its OS thread (and pinned
// to the queue's CPU when the scheduler lets it), which owns its io_uring
// instance (single issuer, cooperative task work: completions are posted
// when the thread enters the ring, with no interrupts) and answers its
// small requests itself, one after another, as libfuse's queue threads do.
// A request that takes long (a large READ, an fsync, a fallocate, a
// copy_file_range: see offload) is answered by a goroutine of its own
// instead, so that the queue keeps serving: the kernel puts the requests
// of one caller, readahead included, on one queue, and a queue that
// answered them one after another would use one CPU where /dev/fuse's
// readers use all. The goroutine hands the answered entry back to the
// queue thread, which alone may submit to its ring, through a list and an
// eventfd the ring reads.
//
// The rule: no request that can wait on someone else is answered on a
// queue thread. Whatever a queue thread waits for, every caller that runs
// on its CPU waits for too (their stat, their ls), and with them anyone
// who waits on those callers. A handler's open(2) of a lower file can wait
// on another process for as long as that process likes: a lease holder
// (until it gives the lease up, up to /proc/sys/fs/lease-break-time), a
// FIFO planted in the file's place (until a writer comes). The engine
// refuses what is not a regular file before opening it, and tries the
// open of a regular file without waiting (O_NONBLOCK). Handing every OPEN to a goroutine would keep that rule at a price: on a
// loaded machine each hand-over is two more thread switches, and an
// open+close on the twin took 5x as long (BenchmarkOpenClose). So a
// request is answered inline as long as it need not wait: a handler that
// finds it would (the engine's open of a lower file gets EWOULDBLOCK from
// its non-blocking attempt: a lease) calls RetryAway, and the transport
// drops that answer and calls the handler again for the same request from
// a goroutine, where it may wait. The requests a handler cannot try
// without waiting (an fsync, a lock to wait for) go to goroutines at once
// (offload). What stays inline waits on no one but the local disk: LOOKUP,
// GETATTR, READDIR, small READs and WRITEs, xattrs, the namespace calls.
// A LOWER on a filesystem served by someone else (NFS, another FUSE
// daemon) can make any of those wait on its server; the ring cannot help
// that, /dev/fuse (a pool of reader threads) bears it better.
//
// Locks, in order: Transport.mu (the descriptors, Stop) and queue.mu (the
// list of entries answered away) are leaves: neither is held while the
// other is taken, while a handler runs, or while a thread enters its ring.
// A queue's other state (its ring, live, away, the retry mark RetryAway
// sets) is its thread's alone; queueThreads, which RetryAway reads, is a
// sync.Map written only as a queue thread starts and ends. Handle is
// called with no lock of this package held; the locks it takes (the node
// tree, a file's content lock) are the caller's, and it may call
// RetryAway under them.
package uring

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Config describes the ring to set up for one FUSE connection.
type Config struct {
	// DevFD is the /dev/fuse descriptor of a connection whose INIT is done
	// and whose INIT reply carried CapOverIOUring. Start dups it; the
	// caller keeps its own.
	DevFD int
	// Queues is the number of queues: the kernel's is the number of
	// possible CPUs (0 means that, PossibleCPUs).
	Queues int
	// Depth is the number of entries per queue (requests a queue can hold
	// at once); 0 means AutoDepth(Queues).
	Depth int
	// PayloadSize is the size of each entry's payload buffer. The kernel
	// refuses a buffer smaller than max(8 KiB, max_write, max_pages*4 KiB)
	// of the connection.
	PayloadSize int
	// Handle answers one request. in is the request as /dev/fuse would
	// deliver it, split in three (fuse_in_header, the opcode's fixed
	// argument, the rest); out is where the reply goes as a byte stream:
	// fuse_out_header first, then the reply's arguments. It returns the
	// number of bytes written to out (at least the out header), or 0 when
	// it did not answer, which the transport turns into EIO.
	Handle func(in, out [][]byte) int
	// Logf reports what goes wrong (nil: silent).
	Logf func(format string, args ...any)
	// InitTimeout bounds the wait for the connection's INIT, which the
	// kernel needs before it takes registrations (0: 30 s). Start may
	// run before INIT is answered: it has to, when the caller's first
	// access to the mount waits for the ring.
	InitTimeout time.Duration
}

// FUSE opcodes the offload rule looks at.
const (
	fuseRead          = 15
	fuseFsync         = 20
	fuseFsyncdir      = 30
	fuseSetlkw        = 33
	fuseFallocate     = 43
	fuseCopyFileRange = 47
)

// OffloadMin is the size from which a READ is answered off the queue
// thread: a readahead, not a 4 KiB random read, whose answer costs less
// than the hand-over.
const OffloadMin = 64 << 10

// offload says which requests are answered off the queue thread: READs of
// OffloadMin bytes or more, the requests that may wait on a disk (fsync,
// fsyncdir, fallocate, copy_file_range), and SETLKW, which waits for a
// lock's holder by definition (should a handler ever forward locks; an
// OPEN that would wait says so itself: RetryAway). The kernel sends a
// file's readahead as several READs
// at once, all to the reader's queue; a WRITE comes alone (the caller
// waits for it: no writeback cache), so nothing queues behind it, and
// handing it over only cost time (2026-12-02, AMD EPYC, 1 MiB writes:
// twin 0.8x, crypt level).
func offload(opcode uint32, in [][]byte) bool {
	switch opcode {
	case fuseRead:
		// fuse_read_in: fh, offset (u64 each), size (u32).
		op := in[1]
		return len(op) >= 20 && binary.LittleEndian.Uint32(op[16:20]) >= OffloadMin
	case fuseFsync, fuseFsyncdir, fuseFallocate, fuseCopyFileRange, fuseSetlkw:
		return true
	}
	return false
}

// DefaultDepth is the number of entries per queue on a machine of up to
// eight CPUs.
const DefaultDepth = 8

// entryBudget is the number of entries AutoDepth spreads over the queues.
const entryBudget = 64

// AutoDepth is the default number of entries per queue for a ring of
// queues queues: DefaultDepth, less on many CPUs so that the ring's
// payload buffers (entries x max_write, resident once used) stay near 64
// in all, but never below 2, so that a queue can take a request while it
// answers another.
func AutoDepth(queues int) int {
	if queues <= 0 {
		return DefaultDepth
	}
	return min(DefaultDepth, max(2, entryBudget/queues))
}

// Transport is a running ring: Queues threads serving requests.
type Transport struct {
	cfg    Config
	devFD  int
	stopFD int
	wg     sync.WaitGroup
	served atomic.Uint64
	done   chan struct{}
	// mu guards the descriptors, which the last queue thread's exit closes.
	mu      sync.Mutex
	stopped bool
}

// ErrUnsupported is returned by Start when the kernel has no FUSE over
// io_uring or refuses it for this connection.
var ErrUnsupported = errors.New("FUSE over io_uring unsupported")

// Start sets up the queues, registers every entry with the kernel and
// starts serving. It returns when all entries are registered, that is when
// the kernel has switched the connection to the ring, or with an error, in
// which case nothing is left running and the connection stays on /dev/fuse.
func Start(cfg Config) (*Transport, error) {
	if cfg.Handle == nil {
		return nil, errors.New("uring: Config.Handle is nil")
	}
	if cfg.Queues <= 0 {
		n, err := PossibleCPUs()
		if err != nil {
			return nil, err
		}
		cfg.Queues = n
	}
	if cfg.Depth <= 0 {
		cfg.Depth = AutoDepth(cfg.Queues)
	}
	if cfg.PayloadSize < 8192 {
		return nil, fmt.Errorf("uring: payload size %d below the kernel's minimum of 8192", cfg.PayloadSize)
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if cfg.InitTimeout <= 0 {
		cfg.InitTimeout = 30 * time.Second
	}
	devFD, err := unix.FcntlInt(uintptr(cfg.DevFD), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("uring: dup /dev/fuse: %w", err)
	}
	stopFD, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
	if err != nil {
		unix.Close(devFD)
		return nil, fmt.Errorf("uring: eventfd: %w", err)
	}
	t := &Transport{cfg: cfg, devFD: devFD, stopFD: stopFD, done: make(chan struct{})}
	ready := make(chan error, cfg.Queues)
	for qid := 0; qid < cfg.Queues; qid++ {
		t.wg.Add(1)
		go t.runQueue(qid, ready)
	}
	go func() {
		t.wg.Wait()
		t.mu.Lock()
		unix.Close(t.devFD)
		unix.Close(t.stopFD)
		t.devFD, t.stopFD = -1, -1
		t.mu.Unlock()
		close(t.done)
	}()
	var errs []error
	for range cfg.Queues {
		if err := <-ready; err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		t.Stop()
		t.Wait()
		return nil, errors.Join(errs...)
	}
	return t, nil
}

// Queues is the number of queues; Depth the entries of each.
func (t *Transport) Queues() int { return t.cfg.Queues }

// Depth is the number of entries per queue.
func (t *Transport) Depth() int { return t.cfg.Depth }

// Served is the number of requests answered over the ring so far.
func (t *Transport) Served() uint64 { return t.served.Load() }

// Stop asks the queue threads to end. The kernel ends them by itself when
// the connection goes (unmount, abort): Stop is for when the caller gives up
// on a connection that is still there.
func (t *Transport) Stop() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.stopFD < 0 {
		return
	}
	t.stopped = true
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b[0])) = uint64(t.cfg.Queues)
	unix.Write(t.stopFD, b[:])
}

// Done is closed when every queue thread has ended and the transport's
// descriptors are released.
func (t *Transport) Done() <-chan struct{} { return t.done }

// Wait blocks until Done.
func (t *Transport) Wait() { <-t.done }

// stopTag is the user data of a queue's read of the stop eventfd; probeTag
// that of the INIT probe; wakeTag that of its read of its wake eventfd.
const (
	stopTag  = ^uint64(0)
	probeTag = ^uint64(1)
	wakeTag  = ^uint64(2)
)

// waitInit waits until the connection has completed INIT. It sends the
// kernel a command it does not know (FUSE_IO_URING_CMD_INVALID), which is
// answered EAGAIN before INIT (the ring is sized from what INIT
// negotiated), EINVAL after it, and EOPNOTSUPP when the connection has no
// io_uring (enable_uring off, or FUSE_OVER_IO_URING not in the INIT
// reply).
func (q *queue) waitInit() error {
	deadline := time.Now().Add(q.t.cfg.InitTimeout)
	for delay := 100 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
		e := q.r.getSQE()
		e.setCmd(cmdInvalid, cmdReq{qid: uint16(q.qid)}, probeTag)
		res, got := int32(0), false
		for !got && !q.stopped {
			if err := q.r.enter(true); err != nil {
				return err
			}
			q.r.reap(func(c cqe) {
				switch c.userData {
				case probeTag:
					res, got = c.res, true
				case stopTag:
					q.stopped = true
				}
			})
		}
		switch {
		case q.stopped:
			return errors.New("stopped while waiting for INIT")
		case res == -int32(syscall.EINVAL):
			return nil
		case res == -int32(syscall.EOPNOTSUPP):
			return fmt.Errorf("%w: the connection has no io_uring (enable_uring off, or FUSE_OVER_IO_URING not negotiated in INIT)", ErrUnsupported)
		case res != -int32(syscall.EAGAIN):
			return fmt.Errorf("INIT probe: %w", syscall.Errno(-res))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no INIT within %v", q.t.cfg.InitTimeout)
		}
		time.Sleep(delay)
	}
}

type entry struct {
	hdr, payload []byte
	commitID     uint64
}

type queue struct {
	t       *Transport
	qid     int
	r       *ring
	hdrMem  []byte // Depth headers, then the 8-byte stop and wake buffers
	payMem  []byte // Depth payload buffers
	ents    []entry
	iovs    []unix.Iovec // two per entry: header, payload
	live    int          // entries with a command in the kernel or a goroutine
	stopped bool
	// wakeFD is the eventfd an offloaded request's goroutine writes when
	// it has put its entry on answered; away counts the entries out with
	// such goroutines (the queue thread's alone).
	wakeFD   int
	away     int
	mu       sync.Mutex
	answered []uint64
	// retry is set by RetryAway while the queue thread runs a handler.
	retry bool
	// registering is set until the REGISTER commands are through; regErr
	// is the first refusal seen meanwhile.
	registering bool
	regErr      error
}

// runQueue is the life of queue qid on its own OS thread. It reports the
// outcome of registration on ready, then serves until the kernel ends every
// entry (the connection is gone) or Stop.
func (t *Transport) runQueue(qid int, ready chan<- error) {
	defer t.wg.Done()
	// The thread is never unlocked: when this goroutine ends, the thread
	// ends with it, and with it its CPU affinity.
	runtime.LockOSThread()
	var set unix.CPUSet
	set.Set(qid)
	// Best effort: a cpuset may forbid this CPU; the queue then serves
	// from wherever the scheduler puts it.
	_ = unix.SchedSetaffinity(0, &set)

	q, err := t.newQueue(qid)
	if err != nil {
		ready <- fmt.Errorf("queue %d: %w", qid, err)
		return
	}
	defer q.close()
	tid := unix.Gettid()
	queueThreads.Store(tid, q)
	defer queueThreads.Delete(tid)
	q.armStop()
	if err := q.waitInit(); err != nil {
		ready <- fmt.Errorf("queue %d: %w", qid, err)
		return
	}
	q.registering = true
	for i := range q.ents {
		e := q.r.getSQE()
		e.setCmd(cmdRegister, cmdReq{qid: uint16(qid)}, uint64(i))
		e.addr = uint64(uintptr(unsafe.Pointer(&q.iovs[2*i])))
		e.len = 2
		q.live++
	}
	if err := q.r.enter(false); err != nil {
		ready <- fmt.Errorf("queue %d: register: %w", qid, err)
		return
	}
	// A refused registration completes at once.
	q.r.reap(q.complete)
	if q.regErr != nil {
		ready <- fmt.Errorf("queue %d: register: %w", qid, q.regErr)
		return
	}
	q.registering = false
	ready <- nil
	// After a Stop the thread still waits for the entries out with
	// goroutines: they write into the buffers that close unmaps.
	for (q.live > 0 && !q.stopped) || q.away > 0 {
		if err := q.r.enter(true); err != nil {
			t.cfg.Logf("uring queue %d: %v", qid, err)
			if q.away > 0 {
				// Still the buffers must outlive the goroutines.
				q.waitAway()
			}
			return
		}
		q.r.reap(q.complete)
	}
}

// waitAway waits, without the ring, for the goroutines still answering
// requests of this queue (the ring may still hold a read of the wake
// eventfd: it polls their list instead).
func (q *queue) waitAway() {
	for {
		q.mu.Lock()
		q.away -= len(q.answered)
		q.answered = nil
		away := q.away
		q.mu.Unlock()
		if away == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func (t *Transport) newQueue(qid int) (*queue, error) {
	depth := t.cfg.Depth
	// One SQE per entry plus the stop and wake reads; each has at most one
	// in flight.
	r, err := newRing(uint32(depth + 2))
	if err != nil {
		return nil, err
	}
	q := &queue{t: t, qid: qid, r: r, wakeFD: -1}
	if err := r.registerFile(t.devFD); err != nil {
		q.close()
		return nil, err
	}
	if q.wakeFD, err = unix.Eventfd(0, unix.EFD_CLOEXEC); err != nil {
		q.close()
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	// Anonymous mappings: page-aligned, never moved, and only the pages
	// touched cost memory.
	q.hdrMem, err = unix.Mmap(-1, 0, depth*HeaderSize+16, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		q.close()
		return nil, fmt.Errorf("mmap headers: %w", err)
	}
	q.payMem, err = unix.Mmap(-1, 0, depth*t.cfg.PayloadSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		q.close()
		return nil, fmt.Errorf("mmap payload: %w", err)
	}
	q.ents = make([]entry, depth)
	q.iovs = make([]unix.Iovec, 2*depth)
	for i := range q.ents {
		h := q.hdrMem[i*HeaderSize : (i+1)*HeaderSize : (i+1)*HeaderSize]
		p := q.payMem[i*t.cfg.PayloadSize : (i+1)*t.cfg.PayloadSize : (i+1)*t.cfg.PayloadSize]
		q.ents[i] = entry{hdr: h, payload: p}
		q.iovs[2*i] = unix.Iovec{Base: &h[0]}
		q.iovs[2*i].SetLen(len(h))
		q.iovs[2*i+1] = unix.Iovec{Base: &p[0]}
		q.iovs[2*i+1].SetLen(len(p))
	}
	return q, nil
}

// armStop queues a read of the stop eventfd, and one of the wake eventfd.
func (q *queue) armStop() {
	e := q.r.getSQE()
	e.opcode = opRead
	e.fd = int32(q.t.stopFD)
	e.addr = uint64(uintptr(unsafe.Pointer(&q.hdrMem[len(q.ents)*HeaderSize])))
	e.len = 8
	e.userData = stopTag
	q.armWake()
}

// armWake queues a read of the wake eventfd.
func (q *queue) armWake() {
	e := q.r.getSQE()
	e.opcode = opRead
	e.fd = int32(q.wakeFD)
	e.addr = uint64(uintptr(unsafe.Pointer(&q.hdrMem[len(q.ents)*HeaderSize+8])))
	e.len = 8
	e.userData = wakeTag
}

// close releases the ring and, when the kernel holds no entry any more,
// the buffers. With entries still registered (Stop on a live connection)
// the kernel may write into them until it has cancelled them, after the
// ring is closed: their mappings are then left in place.
func (q *queue) close() {
	if q.r != nil {
		q.r.close()
	}
	if q.wakeFD >= 0 {
		unix.Close(q.wakeFD)
	}
	if q.live > 0 {
		q.t.cfg.Logf("uring queue %d: %d entries still registered at close; their buffers stay mapped", q.qid, q.live)
		return
	}
	if q.hdrMem != nil {
		unix.Munmap(q.hdrMem)
	}
	if q.payMem != nil {
		unix.Munmap(q.payMem)
	}
}

// complete handles one completion: a request to answer, an entry the
// kernel gave back, entries answered by goroutines, or the stop signal.
func (q *queue) complete(c cqe) {
	switch c.userData {
	case stopTag:
		q.stopped = true
		return
	case wakeTag:
		q.mu.Lock()
		done := q.answered
		q.answered = nil
		q.mu.Unlock()
		for _, idx := range done {
			q.away--
			q.commit(idx)
		}
		q.armWake()
		return
	}
	if c.userData >= uint64(len(q.ents)) {
		q.t.cfg.Logf("uring queue %d: completion for unknown entry %d", q.qid, c.userData)
		return
	}
	idx := c.userData
	ent := &q.ents[idx]
	if c.res < 0 {
		// The entry is out of the kernel: refused at registration, or
		// released because the connection ends (ENOTCONN).
		q.live--
		errno := syscall.Errno(-c.res)
		if q.registering {
			if q.regErr == nil {
				q.regErr = errno
			}
		} else if errno != syscall.ENOTCONN && errno != syscall.ECONNABORTED && errno != syscall.ECANCELED {
			q.t.cfg.Logf("uring queue %d entry %d: %v", q.qid, idx, errno)
		}
		return
	}
	req := parseEntry(ent.hdr, ent.payload)
	ent.commitID = req.commitID
	if req.malformed {
		q.t.cfg.Logf("uring queue %d: malformed request (opcode %d)", q.qid, req.opcode)
		setErrorReply(ent.hdr, req.commitID, int32(syscall.EIO))
	} else if !q.stopped && offload(req.opcode, req.in[:]) {
		q.away++
		go q.answerAway(idx, req)
		return
	} else if q.answerInline(ent, req) {
		q.away++
		go q.answerAway(idx, req)
		return
	}
	q.commit(idx)
}

// queueThreads maps the thread id of each queue thread to its queue, for
// RetryAway. A queue thread is locked to its goroutine and ends with it,
// so no other goroutine ever runs under one of these ids.
var queueThreads sync.Map

// RetryAway is for a handler that finds it would have to wait on someone
// (a lease holder, a lock's owner) to answer its request. On a queue
// thread it marks the request to be answered again by a goroutine, where
// waiting holds up no one else, and returns true: the handler returns at
// once, with any answer (it is dropped), before it has changed anything.
// Anywhere else (a goroutine answering away, /dev/fuse's readers) it
// returns false: the handler may wait there.
func RetryAway() bool {
	q := threadQueue()
	if q == nil {
		return false
	}
	q.retry = true
	return true
}

// OnQueueThread reports whether the caller runs on a queue thread, where
// it must not wait on anyone.
func OnQueueThread() bool { return threadQueue() != nil }

// threadQueue is the queue whose thread the caller runs on, or nil.
func threadQueue() *queue {
	v, ok := queueThreads.Load(unix.Gettid())
	if !ok {
		return nil
	}
	return v.(*queue)
}

// answerInline answers req on the queue thread, unless the handler asks
// for the request to be answered away (RetryAway): it then restores the
// fuse_in_header that the dropped answer's out header overwrote and
// returns true. The rest of the request is intact: an error answer writes
// no payload, and op_in is not written at all.
func (q *queue) answerInline(ent *entry, req request) (away bool) {
	var inHead [sizeofOutHeader]byte
	copy(inHead[:], ent.hdr)
	q.answer(ent, req)
	if !q.retry {
		return false
	}
	q.retry = false
	if q.stopped {
		setErrorReply(ent.hdr, req.commitID, int32(syscall.EIO))
		return false
	}
	copy(ent.hdr, inHead[:])
	return true
}

// answer has the caller's handler answer req into ent's buffers.
func (q *queue) answer(ent *entry, req request) {
	out := [][]byte{ent.hdr[:sizeofOutHeader], ent.payload}
	n := q.t.cfg.Handle(req.in[:], out)
	if n < sizeofOutHeader {
		setErrorReply(ent.hdr, req.commitID, int32(syscall.EIO))
	} else {
		setReplySize(ent.hdr, uint32(n-sizeofOutHeader))
	}
}

// answerAway answers entry idx on a goroutine of its own, then hands it
// back to the queue thread for its commit.
func (q *queue) answerAway(idx uint64, req request) {
	q.answer(&q.ents[idx], req)
	q.mu.Lock()
	q.answered = append(q.answered, idx)
	q.mu.Unlock()
	var b [8]byte
	*(*uint64)(unsafe.Pointer(&b[0])) = 1
	unix.Write(q.wakeFD, b[:])
}

// commit sends the answer in entry idx and asks for the next request.
func (q *queue) commit(idx uint64) {
	q.t.served.Add(1)
	e := q.r.getSQE()
	if e == nil {
		// Cannot happen: every entry and the two reads hold at most one
		// SQE, and the SQ has room for all of them.
		q.t.cfg.Logf("uring queue %d: submission queue full", q.qid)
		q.r.enter(false)
		if e = q.r.getSQE(); e == nil {
			return
		}
	}
	e.setCmd(cmdCommitAndFetch, cmdReq{commitID: q.ents[idx].commitID, qid: uint16(q.qid)}, idx)
}

// PossibleCPUs is the number of possible CPUs (the kernel's number of
// queues per FUSE ring), from /sys/devices/system/cpu/possible ("0-7").
func PossibleCPUs() (int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/possible")
	if err != nil {
		return 0, fmt.Errorf("uring: %w", err)
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

// parseCPUList counts the CPUs of a cpulist ("0-3,5" is 5), as the
// kernel's num_possible_cpus() does.
func parseCPUList(s string) (int, error) {
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("uring: bad cpu list %q", s)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0, fmt.Errorf("uring: bad cpu list %q", s)
			}
		}
		n += b - a + 1
	}
	return n, nil
}
