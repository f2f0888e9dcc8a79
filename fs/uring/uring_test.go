package uring

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"syscall"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestLayout pins the structures to the sizes and offsets of the kernel's
// uapi (include/uapi/linux/io_uring.h, include/uapi/linux/fuse.h 7.42).
func TestLayout(t *testing.T) {
	var s sqe
	var p params
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"sizeof io_uring_params", unsafe.Sizeof(p), sizeofParams},
		{"io_uring_params.sq_off", unsafe.Offsetof(p.sqOff), 40},
		{"io_uring_params.cq_off", unsafe.Offsetof(p.cqOff), 80},
		{"sizeof io_sqring_offsets", unsafe.Sizeof(sqringOffsets{}), 40},
		{"sizeof io_cqring_offsets", unsafe.Sizeof(cqringOffsets{}), 40},
		{"sizeof SQE128", unsafe.Sizeof(s), sizeofSQE},
		{"sqe.fd", unsafe.Offsetof(s.fd), 4},
		{"sqe.off/cmd_op", unsafe.Offsetof(s.off), 8},
		{"sqe.addr", unsafe.Offsetof(s.addr), 16},
		{"sqe.len", unsafe.Offsetof(s.len), 24},
		{"sqe.uring_cmd_flags", unsafe.Offsetof(s.opFlags), 28},
		{"sqe.user_data", unsafe.Offsetof(s.userData), 32},
		{"sqe.buf_index", unsafe.Offsetof(s.bufIndex), 40},
		{"sqe.file_index", unsafe.Offsetof(s.fileIdx), 44},
		{"sqe.cmd", unsafe.Offsetof(s.cmd), 48},
		{"sizeof cqe", unsafe.Sizeof(cqe{}), sizeofCQE},
		{"sizeof io_uring_getevents_arg", unsafe.Sizeof(getEventsArg{}), 24},
		{"sizeof fuse_uring_ent_in_out", unsafe.Sizeof(entInOut{}), sizeofEntInOut},
		{"sizeof fuse_uring_cmd_req", unsafe.Sizeof(cmdReq{}), sizeofCmdReq},
		{"sizeof fuse_uring_req_header", HeaderSize, 128 + 128 + 32},
		{"fuse_uring_cmd_req fits the SQE128 cmd area", sizeofCmdReq, 24},
	} {
		if c.got != c.want {
			t.Errorf("%s = %d, want %d", c.name, c.got, c.want)
		}
	}
	if CapOverIOUring != 1<<41 {
		t.Errorf("FUSE_OVER_IO_URING = %#x", uint64(CapOverIOUring))
	}
}

// TestCmdEncoding checks the bytes of a COMMIT_AND_FETCH SQE as the kernel
// reads them: opcode, fixed file, cmd_op, user data and the
// fuse_uring_cmd_req in the cmd area.
func TestCmdEncoding(t *testing.T) {
	var e sqe
	e.setCmd(cmdCommitAndFetch, cmdReq{commitID: 0x1122334455667788, qid: 3}, 7)
	b := unsafe.Slice((*byte)(unsafe.Pointer(&e)), sizeofSQE)
	le := binary.LittleEndian
	if b[0] != 46 {
		t.Errorf("opcode %d, want IORING_OP_URING_CMD (46)", b[0])
	}
	if b[1] != 1 {
		t.Errorf("flags %#x, want IOSQE_FIXED_FILE", b[1])
	}
	if fd := int32(le.Uint32(b[4:])); fd != 0 {
		t.Errorf("fd %d, want fixed file 0", fd)
	}
	if op := le.Uint32(b[8:]); op != 2 {
		t.Errorf("cmd_op %d, want FUSE_IO_URING_CMD_COMMIT_AND_FETCH (2)", op)
	}
	if ud := le.Uint64(b[32:]); ud != 7 {
		t.Errorf("user_data %d, want 7", ud)
	}
	if f := le.Uint64(b[48:]); f != 0 {
		t.Errorf("cmd_req.flags %#x, want 0", f)
	}
	if id := le.Uint64(b[56:]); id != 0x1122334455667788 {
		t.Errorf("cmd_req.commit_id %#x", id)
	}
	if qid := le.Uint16(b[64:]); qid != 3 {
		t.Errorf("cmd_req.qid %d, want 3", qid)
	}
	for i := 66; i < sizeofSQE; i++ {
		if b[i] != 0 {
			t.Fatalf("byte %d of the SQE is %#x, want 0", i, b[i])
		}
	}
}

// TestParseEntry decodes an entry as the kernel fills it for a LOOKUP
// (empty op header, name in the payload) and a WRITE (fuse_write_in in
// op_in, data in the payload), and refuses inconsistent lengths.
func TestParseEntry(t *testing.T) {
	le := binary.LittleEndian
	fill := func(inLen, opcode uint32, unique uint64, payloadSz uint32) []byte {
		h := make([]byte, HeaderSize)
		le.PutUint32(h[0:], inLen)
		le.PutUint32(h[4:], opcode)
		le.PutUint64(h[8:], unique)
		le.PutUint64(h[offEntInOut+8:], unique)
		le.PutUint32(h[offEntInOut+16:], payloadSz)
		return h
	}
	payload := make([]byte, 8192)
	for _, c := range []struct {
		name                string
		inLen, payloadSz    uint32
		wantOp, wantPayload int
		malformed           bool
	}{
		{"lookup", 40 + 6, 6, 0, 6, false},
		{"write", 40 + 40 + 4096, 4096, 40, 4096, false},
		{"getattr", 40 + 16, 0, 16, 0, false},
		{"short header", 39, 0, 0, 0, true},
		{"payload beyond len", 40 + 4, 8, 0, 0, true},
		{"payload beyond buffer", 40 + 9000, 9000, 0, 0, true},
		{"op header beyond op_in", 40 + 129, 0, 0, 0, true},
	} {
		r := parseEntry(fill(c.inLen, 15, 99, c.payloadSz), payload)
		if r.malformed != c.malformed {
			t.Errorf("%s: malformed %v, want %v", c.name, r.malformed, c.malformed)
			continue
		}
		if c.malformed {
			continue
		}
		if len(r.in[0]) != 40 || len(r.in[1]) != c.wantOp || len(r.in[2]) != c.wantPayload {
			t.Errorf("%s: iov %d/%d/%d, want 40/%d/%d", c.name, len(r.in[0]), len(r.in[1]), len(r.in[2]), c.wantOp, c.wantPayload)
		}
		if r.commitID != 99 || r.unique != 99 || r.opcode != 15 {
			t.Errorf("%s: commit %d unique %d opcode %d", c.name, r.commitID, r.unique, r.opcode)
		}
	}
	h := make([]byte, HeaderSize)
	setErrorReply(h, 42, int32(syscall.ENOENT))
	if int32(le.Uint32(h[4:])) != -int32(syscall.ENOENT) || le.Uint64(h[8:]) != 42 || le.Uint32(h[offEntInOut+16:]) != 0 {
		t.Errorf("error reply header % x", h[:16])
	}
}

func TestParseCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-1": 2, "0-7": 8, "0-3,5": 5, "0,2-3": 3} {
		if got, err := parseCPUList(in); err != nil || got != want {
			t.Errorf("parseCPUList(%q) = %d, %v, want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "3-1", "0-"} {
		if _, err := parseCPUList(in); err == nil {
			t.Errorf("parseCPUList(%q) succeeded", in)
		}
	}
}

// TestRingRoundTrip sets up a ring, reads an eventfd through it (the same
// path the stop signal takes) and tears it down: mapping, SQ publication,
// io_uring_enter and CQ reaping against the running kernel.
func TestRingRoundTrip(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r, err := newRing(4)
	if errors.Is(err, syscall.ENOSYS) || errors.Is(err, syscall.EPERM) {
		t.Skipf("io_uring unavailable here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	if r.p.sqEntries < 4 || r.p.cqEntries < r.p.sqEntries {
		t.Fatalf("ring of %d/%d entries", r.p.sqEntries, r.p.cqEntries)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(efd)
	buf := make([]byte, 8)
	for round := uint64(1); round <= 3; round++ {
		e := r.getSQE()
		e.opcode = opRead
		e.fd = int32(efd)
		e.addr = uint64(uintptr(unsafe.Pointer(&buf[0])))
		e.len = 8
		e.userData = round
		if err := r.enter(false); err != nil {
			t.Fatal(err)
		}
		var v [8]byte
		binary.LittleEndian.PutUint64(v[:], round*10)
		if _, err := unix.Write(efd, v[:]); err != nil {
			t.Fatal(err)
		}
		var got []cqe
		for len(got) == 0 {
			if err := r.enter(true); err != nil {
				t.Fatal(err)
			}
			r.reap(func(c cqe) { got = append(got, c) })
		}
		if len(got) != 1 || got[0].userData != round || got[0].res != 8 {
			t.Fatalf("round %d: completions %+v", round, got)
		}
		if v := binary.LittleEndian.Uint64(buf); v != round*10 {
			t.Fatalf("round %d: read %d", round, v)
		}
	}
	runtime.KeepAlive(buf)
}

// TestStartRefusedCleanly starts the transport on a descriptor that is not
// /dev/fuse (a regular file: /dev/null answers uring commands on recent
// kernels): every registration is refused, Start returns the kernel's
// error and leaves no thread or descriptor behind.
func TestStartRefusedCleanly(t *testing.T) {
	f, err := os.Create(t.TempDir() + "/not-fuse")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := countFDs(t)
	tr, err := Start(Config{DevFD: int(f.Fd()), Queues: 2, Depth: 2, PayloadSize: 8192,
		Handle: func(in, out [][]byte) int { t.Error("handler called"); return 0 }})
	if err == nil {
		tr.Stop()
		tr.Wait()
		t.Fatal("Start on /dev/null succeeded")
	}
	t.Logf("refused as expected: %v", err)
	if after := countFDs(t); after != before {
		t.Errorf("descriptors: %d before, %d after a refused Start", before, after)
	}
}

func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestAutoDepth: eight entries per queue up to eight CPUs, then about 64
// entries in all, never fewer than two per queue.
func TestAutoDepth(t *testing.T) {
	for _, c := range []struct{ queues, want int }{
		{0, 8}, {1, 8}, {2, 8}, {8, 8}, {16, 4}, {32, 2}, {64, 2}, {256, 2}, {12, 5},
	} {
		if got := AutoDepth(c.queues); got != c.want {
			t.Errorf("AutoDepth(%d) = %d, want %d", c.queues, got, c.want)
		}
	}
}
