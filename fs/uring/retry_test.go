package uring

import (
	"bytes"
	"encoding/binary"
	"runtime"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRetryAway: a handler that calls RetryAway on a queue thread has its
// answer dropped and is called again with the request as the kernel wrote
// it (the fuse_in_header its out header overwrote restored); anywhere
// else RetryAway says no and the handler answers where it is. A queue that
// is stopping answers EIO instead of handing the request on.
func TestRetryAway(t *testing.T) {
	le := binary.LittleEndian
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()

	var calls []bool // what RetryAway said, per call
	var seen [][]byte
	q := &queue{t: &Transport{cfg: Config{Handle: func(in, out [][]byte) int {
		seen = append(seen, bytes.Clone(in[0]))
		retry := RetryAway()
		calls = append(calls, retry)
		// An error answer, as the engine gives when it retries.
		le.PutUint32(out[0][0:], sizeofOutHeader)
		errno := -int32(syscall.EWOULDBLOCK)
		le.PutUint32(out[0][4:], uint32(errno))
		le.PutUint64(out[0][8:], 7)
		return sizeofOutHeader
	}}}}
	hdr, payload := make([]byte, HeaderSize), make([]byte, 8192)
	fill := func() {
		le.PutUint32(hdr[0:], sizeofInHeader+8)
		le.PutUint32(hdr[4:], 14) // OPEN
		le.PutUint64(hdr[8:], 7)
		le.PutUint64(hdr[16:], 1234) // nodeid
		le.PutUint64(hdr[offEntInOut+8:], 7)
	}
	fill()
	want := bytes.Clone(hdr[:sizeofInHeader])
	ent := &entry{hdr: hdr, payload: payload}
	req := parseEntry(hdr, payload)

	if RetryAway() || OnQueueThread() {
		t.Fatal("RetryAway or OnQueueThread true off any queue thread")
	}
	if away := q.answerInline(ent, req); away {
		t.Fatal("answered away though the handler ran on no queue thread")
	}
	if calls[0] {
		t.Error("RetryAway said yes on a thread that is no queue's")
	}

	fill()
	tid := unix.Gettid()
	queueThreads.Store(tid, q)
	defer queueThreads.Delete(tid)
	if !OnQueueThread() {
		t.Fatal("OnQueueThread false on a queue thread")
	}
	if away := q.answerInline(ent, req); !away {
		t.Fatal("a handler's RetryAway on the queue thread did not send the request away")
	}
	if !bytes.Equal(hdr[:sizeofInHeader], want) {
		t.Errorf("in header after the dropped answer:\n% x\nwant\n% x", hdr[:sizeofInHeader], want)
	}
	if q.retry {
		t.Error("the retry mark outlived its request")
	}
	// The goroutine's call: RetryAway says no there, the answer stands.
	done := make(chan bool)
	go func() {
		before := len(calls)
		q.answer(ent, req)
		done <- len(calls) == before+1 && !calls[before]
	}()
	if !<-done {
		t.Error("RetryAway said yes on the goroutine answering away")
	}
	if !bytes.Equal(seen[2], want) {
		t.Errorf("the handler's second call saw in header % x, want % x", seen[2], want)
	}

	fill()
	q.stopped = true
	if away := q.answerInline(ent, req); away {
		t.Error("a stopping queue handed a request away")
	}
	if e := int32(le.Uint32(hdr[4:])); e != -int32(syscall.EIO) {
		t.Errorf("a stopping queue's retried request answered %d, want -EIO", e)
	}
}

// TestOffload: the requests that wait by nature go to goroutines at once;
// OPEN and CREATE stay on the queue thread (they retry when they would
// wait), as do the small requests.
func TestOffload(t *testing.T) {
	read := func(size uint32) [][]byte {
		op := make([]byte, 40)
		binary.LittleEndian.PutUint32(op[16:], size)
		return [][]byte{nil, op, nil}
	}
	none := [][]byte{nil, nil, nil}
	for _, c := range []struct {
		name   string
		opcode uint32
		in     [][]byte
		want   bool
	}{
		{"lookup", 1, none, false},
		{"getattr", 3, none, false},
		{"open", 14, none, false},
		{"create", 35, none, false},
		{"read 4k", fuseRead, read(4096), false},
		{"read 64k", fuseRead, read(OffloadMin), true},
		{"fsync", fuseFsync, none, true},
		{"setlkw", fuseSetlkw, none, true},
		{"fallocate", fuseFallocate, none, true},
	} {
		if got := offload(c.opcode, c.in); got != c.want {
			t.Errorf("%s: offload %v, want %v", c.name, got, c.want)
		}
	}
}
