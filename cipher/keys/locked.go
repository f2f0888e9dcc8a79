package keys

import (
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Locked is key material kept outside the Go heap: in an anonymous mapping
// of its own that is locked in RAM (mlock: never written to swap), left out
// of core dumps (MADV_DONTDUMP) and not inherited by a forked child
// (MADV_WIPEONFORK). The garbage collector never moves or copies it, so
// Destroy's wipe reaches the only copy we hold.
//
// Locking needs CAP_IPC_LOCK or room under RLIMIT_MEMLOCK; where neither is
// available the key still lives in its own mapping but may be swapped, and
// IsLocked says so.
type Locked struct {
	mu     sync.Mutex
	mem    []byte // whole pages when mapped
	n      int
	mapped bool
	locked bool
}

// NewLocked returns n zero bytes of locked key memory. It does not fail:
// if no mapping can be made at all the bytes come from the heap (and
// IsLocked is false).
func NewLocked(n int) *Locked {
	page := os.Getpagesize()
	size := (n + page - 1) / page * page
	if size == 0 {
		size = page
	}
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return &Locked{mem: make([]byte, n), n: n}
	}
	// Both advices are best effort: older kernels lack them.
	_ = unix.Madvise(mem, unix.MADV_DONTDUMP)
	_ = unix.Madvise(mem, unix.MADV_WIPEONFORK)
	l := &Locked{mem: mem, n: n, mapped: true}
	l.locked = unix.Mlock(mem) == nil
	return l
}

// LockedCopy returns key in locked memory and wipes key.
func LockedCopy(key []byte) *Locked {
	l := NewLocked(len(key))
	copy(l.Bytes(), key)
	Wipe(key)
	return l
}

// Bytes is the key memory. It must not be used after Destroy.
func (l *Locked) Bytes() []byte { return l.mem[:l.n:l.n] }

// IsLocked reports whether the memory is locked in RAM.
func (l *Locked) IsLocked() bool { return l.locked }

// Destroy wipes the key and releases its memory. It is safe to call more
// than once.
func (l *Locked) Destroy() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mem == nil {
		return
	}
	Wipe(l.mem)
	if l.mapped {
		if l.locked {
			_ = unix.Munlock(l.mem)
		}
		_ = unix.Munmap(l.mem)
	}
	l.mem = nil
	l.n = 0
	l.locked = false
}
