package uring

import (
	"fmt"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The io_uring ABI as include/uapi/linux/io_uring.h defines it; only what
// the FUSE transport uses. x/sys/unix has the syscall numbers but not the
// structures.

// params is struct io_uring_params (120 bytes), filled in by io_uring_setup.
type params struct {
	sqEntries    uint32
	cqEntries    uint32
	flags        uint32
	sqThreadCPU  uint32
	sqThreadIdle uint32
	features     uint32
	wqFd         uint32
	resv         [3]uint32
	sqOff        sqringOffsets
	cqOff        cqringOffsets
}

// sqringOffsets is struct io_sqring_offsets (40 bytes): where in the SQ
// ring mapping each field lives.
type sqringOffsets struct {
	head, tail, ringMask, ringEntries, flags, dropped, array, resv1 uint32
	userAddr                                                        uint64
}

// cqringOffsets is struct io_cqring_offsets (40 bytes).
type cqringOffsets struct {
	head, tail, ringMask, ringEntries, overflow, cqes, flags, resv1 uint32
	userAddr                                                        uint64
}

// sqe is one 128-byte submission queue entry (IORING_SETUP_SQE128): the
// 64-byte struct io_uring_sqe followed by 64 more bytes, so that cmd, at
// offset 48, has the 80 bytes a uring command may use.
type sqe struct {
	opcode   uint8  // 0
	flags    uint8  // 1: IOSQE_*
	ioprio   uint16 // 2
	fd       int32  // 4: or the fixed-file index with IOSQE_FIXED_FILE
	off      uint64 // 8: for URING_CMD the low 32 bits are cmd_op
	addr     uint64 // 16: buffer or iovec array
	len      uint32 // 24: buffer size or iovec count
	opFlags  uint32 // 28: rw_flags, uring_cmd_flags...
	userData uint64 // 32: comes back in the CQE
	bufIndex uint16 // 40
	persona  uint16 // 42
	fileIdx  uint32 // 44
	cmd      [80]byte
}

// cqe is struct io_uring_cqe (16 bytes; no IORING_SETUP_CQE32).
type cqe struct {
	userData uint64
	res      int32
	flags    uint32
}

// getEventsArg is struct io_uring_getevents_arg (24 bytes), the argument of
// io_uring_enter with IORING_ENTER_EXT_ARG.
// Only its size is used (the layout test); fields in the uapi's order.
type getEventsArg struct {
	_ uint64 // sigmask
	_ uint32 // sigmask_sz
	_ uint32 // pad
	_ uint64 // ts
}

const (
	sizeofParams = 120
	sizeofSQE    = 128
	sizeofCQE    = 16

	opRead     = 22 // IORING_OP_READ
	opUringCmd = 46 // IORING_OP_URING_CMD

	sqeFixedFile = 1 << 0 // IOSQE_FIXED_FILE

	setupCoopTaskrun  = 1 << 8  // IORING_SETUP_COOP_TASKRUN
	setupSQE128       = 1 << 10 // IORING_SETUP_SQE128
	setupSingleIssuer = 1 << 12 // IORING_SETUP_SINGLE_ISSUER

	featSingleMmap = 1 << 0 // IORING_FEAT_SINGLE_MMAP

	enterGetEvents = 1 << 0 // IORING_ENTER_GETEVENTS

	offSQRing = 0          // IORING_OFF_SQ_RING
	offCQRing = 0x8000000  // IORING_OFF_CQ_RING
	offSQEs   = 0x10000000 // IORING_OFF_SQES

	registerFiles = 2 // IORING_REGISTER_FILES
)

// ring is one io_uring instance with its mapped queues. It is used by one
// OS thread only (IORING_SETUP_SINGLE_ISSUER): no locks.
type ring struct {
	fd     int
	p      params
	sqMap  []byte
	cqMap  []byte // aliases sqMap with IORING_FEAT_SINGLE_MMAP
	sqeMap []byte

	sqHead, sqTail, sqMask *uint32
	sqArray                []uint32
	sqes                   []sqe
	cqHead, cqTail, cqMask *uint32
	cqes                   []cqe

	// sqLocal is the tail of SQEs prepared but not yet published.
	sqLocal uint32
	// toSubmit counts SQEs published but not yet given to io_uring_enter.
	toSubmit uint32
}

// newRing sets up a ring of (at least) entries SQEs with 128-byte SQEs, as
// FUSE's uring commands need. The calling goroutine must be locked to its OS
// thread, and every later call must come from that thread
// (IORING_SETUP_SINGLE_ISSUER).
//
// Task work is cooperative (COOP_TASKRUN): the kernel queues the work that
// hands a request to an entry on this thread and runs it when the thread
// next enters the ring, with no interrupt of a thread busy answering
// another request. (DEFER_TASKRUN, which keeps that work on the ring's own
// list, behaves the same for a killed daemon; see docs/uring.md, Limits.)
func newRing(entries uint32) (*ring, error) {
	r := &ring{fd: -1}
	r.p.flags = setupSQE128 | setupSingleIssuer | setupCoopTaskrun
	fd, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&r.p)), 0)
	if errno == unix.EINVAL {
		// Kernels before 6.0 have no SINGLE_ISSUER.
		r.p = params{flags: setupSQE128 | setupCoopTaskrun}
		fd, _, errno = unix.Syscall(unix.SYS_IO_URING_SETUP, uintptr(entries), uintptr(unsafe.Pointer(&r.p)), 0)
	}
	if errno != 0 {
		return nil, fmt.Errorf("io_uring_setup: %w", errno)
	}
	r.fd = int(fd)
	if err := r.mmap(); err != nil {
		r.close()
		return nil, err
	}
	return r, nil
}

func (r *ring) mmap() error {
	p := &r.p
	if p.features&featSingleMmap == 0 {
		return fmt.Errorf("io_uring: kernel lacks IORING_FEAT_SINGLE_MMAP")
	}
	sqSize := int(p.sqOff.array) + int(p.sqEntries)*4
	cqSize := int(p.cqOff.cqes) + int(p.cqEntries)*sizeofCQE
	size := max(sqSize, cqSize)
	m, err := unix.Mmap(r.fd, offSQRing, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("io_uring: mmap rings: %w", err)
	}
	r.sqMap, r.cqMap = m, m
	s, err := unix.Mmap(r.fd, offSQEs, int(p.sqEntries)*sizeofSQE, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return fmt.Errorf("io_uring: mmap SQEs: %w", err)
	}
	r.sqeMap = s

	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	r.sqHead = u32(m, p.sqOff.head)
	r.sqTail = u32(m, p.sqOff.tail)
	r.sqMask = u32(m, p.sqOff.ringMask)
	r.sqArray = unsafe.Slice(u32(m, p.sqOff.array), p.sqEntries)
	r.sqes = unsafe.Slice((*sqe)(unsafe.Pointer(&s[0])), p.sqEntries)
	r.cqHead = u32(m, p.cqOff.head)
	r.cqTail = u32(m, p.cqOff.tail)
	r.cqMask = u32(m, p.cqOff.ringMask)
	r.cqes = unsafe.Slice((*cqe)(unsafe.Pointer(&m[p.cqOff.cqes])), p.cqEntries)
	r.sqLocal = atomic.LoadUint32(r.sqTail)
	return nil
}

// close unmaps the rings and closes the ring descriptor; the kernel then
// cancels what is still in flight.
func (r *ring) close() {
	if r.sqeMap != nil {
		unix.Munmap(r.sqeMap)
		r.sqeMap = nil
	}
	if r.sqMap != nil {
		unix.Munmap(r.sqMap)
		r.sqMap, r.cqMap = nil, nil
	}
	if r.fd >= 0 {
		unix.Close(r.fd)
		r.fd = -1
	}
}

// registerFile registers fd as fixed file 0: SQEs then name it by index
// (IOSQE_FIXED_FILE), which saves a file lookup per request and keeps the
// file referenced however the descriptor table changes.
func (r *ring) registerFile(fd int) error {
	fds := []int32{int32(fd)}
	_, _, errno := unix.Syscall6(unix.SYS_IO_URING_REGISTER, uintptr(r.fd), registerFiles, uintptr(unsafe.Pointer(&fds[0])), 1, 0, 0)
	if errno != 0 {
		return fmt.Errorf("io_uring_register(FILES): %w", errno)
	}
	return nil
}

// getSQE returns the next free SQE, zeroed, or nil when the SQ is full.
func (r *ring) getSQE() *sqe {
	head := atomic.LoadUint32(r.sqHead)
	if r.sqLocal-head >= r.p.sqEntries {
		return nil
	}
	idx := r.sqLocal & *r.sqMask
	e := &r.sqes[idx]
	*e = sqe{}
	r.sqArray[idx] = idx
	r.sqLocal++
	return e
}

// publish makes the prepared SQEs visible to the kernel.
func (r *ring) publish() {
	tail := atomic.LoadUint32(r.sqTail)
	if r.sqLocal != tail {
		r.toSubmit += r.sqLocal - tail
		atomic.StoreUint32(r.sqTail, r.sqLocal)
	}
}

// enter submits the published SQEs and, when wait is set, blocks until at
// least one completion is there. EINTR is retried.
func (r *ring) enter(wait bool) error {
	r.publish()
	// GETEVENTS also runs the task work that posts completions.
	var flags, minComplete uintptr = enterGetEvents, 0
	if wait {
		minComplete = 1
	}
	for {
		n, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(r.fd), uintptr(r.toSubmit), minComplete, flags, 0, 0)
		if errno == 0 {
			r.toSubmit -= uint32(n)
			return nil
		}
		if errno == syscall.EINTR {
			continue
		}
		if errno == syscall.EBUSY || errno == syscall.EAGAIN {
			// The CQ is full: the caller reaps, then enters again.
			return nil
		}
		return fmt.Errorf("io_uring_enter: %w", errno)
	}
}

// reap calls f for every completion there is and consumes them.
func (r *ring) reap(f func(c cqe)) int {
	head := atomic.LoadUint32(r.cqHead)
	tail := atomic.LoadUint32(r.cqTail)
	n := 0
	for ; head != tail; head++ {
		c := r.cqes[head&*r.cqMask]
		// Consume before calling f, which may prepare SQEs.
		atomic.StoreUint32(r.cqHead, head+1)
		f(c)
		n++
	}
	return n
}
