package keys

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"
)

// vmLockedKiB reads this process's locked memory from /proc.
func vmLockedKiB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skipf("no /proc/self/status: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmLck:" {
			n, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatal(line)
			}
			return n
		}
	}
	t.Skip("no VmLck line in /proc/self/status")
	return 0
}

func TestLockedHoldsAndLocksKey(t *testing.T) {
	before := vmLockedKiB(t)
	key := bytes.Repeat([]byte{0xA5}, 64)
	l := LockedCopy(key)
	if !bytes.Equal(key, make([]byte, 64)) {
		t.Fatal("LockedCopy left the caller's copy of the key in place")
	}
	if got := l.Bytes(); len(got) != 64 || cap(got) != 64 || !bytes.Equal(got, bytes.Repeat([]byte{0xA5}, 64)) {
		t.Fatalf("Bytes() = %x (cap %d)", got, cap(got))
	}
	if os.Geteuid() == 0 {
		// Root has CAP_IPC_LOCK: locking must have worked and shows in
		// the process's VmLck.
		if !l.IsLocked() {
			t.Fatal("running as root but the key memory is not locked")
		}
		if after := vmLockedKiB(t); after < before+os.Getpagesize()/1024 {
			t.Fatalf("VmLck %d KiB -> %d KiB: the key page is not counted as locked", before, after)
		}
	} else {
		t.Logf("not root: locked=%v (depends on RLIMIT_MEMLOCK)", l.IsLocked())
	}
	l.Destroy()
	if len(l.Bytes()) != 0 {
		t.Fatal("Bytes() still returns memory after Destroy")
	}
	if os.Geteuid() == 0 {
		if after := vmLockedKiB(t); after != before {
			t.Fatalf("VmLck %d KiB after Destroy, %d before NewLocked: not unlocked", after, before)
		}
	}
	l.Destroy() // twice is fine
}

func TestLockedDestroyWipesBeforeRelease(t *testing.T) {
	// Observe the wipe through a heap-backed Locked (same Destroy path up
	// to the unmap, which would make the mapping unreadable).
	l := &Locked{mem: bytes.Repeat([]byte{7}, 32), n: 32}
	mem := l.mem
	l.Destroy()
	if !bytes.Equal(mem, make([]byte, 32)) {
		t.Fatalf("Destroy left key bytes behind: %x", mem)
	}
}

func TestNewLockedSizes(t *testing.T) {
	for _, n := range []int{0, 1, 32, 64, os.Getpagesize(), os.Getpagesize() + 1} {
		l := NewLocked(n)
		b := l.Bytes()
		if len(b) != n {
			t.Fatalf("NewLocked(%d): %d bytes", n, len(b))
		}
		for i := range b {
			b[i] = byte(i)
		}
		l.Destroy()
	}
}
