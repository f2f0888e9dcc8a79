package fs

import (
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// pendingNames keeps the directory IVs and long-name sidecars written
// since the last fsync, open, so that the next fsync of anything on the
// mount makes them durable first.
//
// They are written without fsync (one journal commit per mkdir would be
// costly, FORMAT.md §7). But an application that fsyncs a new file in a
// new directory keeps, on ext4 and most journalling filesystems, the
// directory and the name as well (the fsync commits the journal, which
// holds every earlier metadata change), while the IV's content, plain
// data, is not committed with it: after a power cut the name is there and
// cannot be decrypted (a directory IV of zeros or of no bytes hides every
// entry of the directory, git's objects among them). Crash-state
// exploration (integration/crashsim) found it; syncing the pending IVs
// and sidecars at the next fsync closes it at the cost of one fsync per
// directory or long name, paid only by applications that fsync.
type pendingNames struct {
	mu  sync.Mutex
	fds []int
	// overflow is set when more than maxPendingNames were written since
	// the last fsync: the oldest were closed, and the next fsync syncs
	// the whole lower filesystem (syncfs) instead.
	overflow bool
}

// maxPendingNames bounds the descriptors held (an untar makes thousands
// of directories without one fsync).
const maxPendingNames = 64

// add takes fd, an open descriptor of an IV or sidecar just written.
func (p *pendingNames) add(fd int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.fds) >= maxPendingNames {
		// Keep the newest (a descriptor for syncfs).
		for _, old := range p.fds[:len(p.fds)-1] {
			syscall.Close(old)
		}
		p.fds = p.fds[len(p.fds)-1:]
		p.overflow = true
	}
	p.fds = append(p.fds, fd)
}

// sync makes every pending IV and sidecar durable.
func (p *pendingNames) sync() syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.fds) == 0 {
		return 0
	}
	var first error
	if p.overflow {
		first = unix.Syncfs(p.fds[0])
	} else {
		for _, fd := range p.fds {
			if err := syscall.Fsync(fd); err != nil && first == nil {
				first = err
			}
		}
	}
	for _, fd := range p.fds {
		syscall.Close(fd)
	}
	p.fds, p.overflow = nil, false
	return toErrno(first)
}

// close drops the pending descriptors (unmount).
func (p *pendingNames) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, fd := range p.fds {
		syscall.Close(fd)
	}
	p.fds = nil
}
