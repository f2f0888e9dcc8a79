package fs

import (
	"path"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// acct accumulates where one side of one operation spent its time: in
// crypto (content, names, links, xattr values) and in lower-filesystem
// system calls. With instrumentation off it does not even read the clock.
type acct struct {
	on            bool
	crypto, lower time.Duration
}

func (a *acct) now() time.Time {
	if !a.on {
		return time.Time{}
	}
	return time.Now()
}

func (a *acct) lowerSince(t0 time.Time) {
	if a.on {
		a.lower += time.Since(t0)
	}
}

func (a *acct) cryptoSince(t0 time.Time) {
	if a.on {
		a.crypto += time.Since(t0)
	}
}

// opRun is one FUSE operation being served: its span in the recorder and
// the accounts of the mount's side and, in mirror mode, of the twin side.
type opRun struct {
	sp *measure.Span
	a  acct
}

func (r *root) begin(op measure.Op, n *node) opRun {
	return r.beginNamed(op, n, "")
}

// beginNamed begins an operation on the entry name of directory n (or on
// n itself for an empty name). The plaintext path is computed only when
// the op log records paths.
func (r *root) beginNamed(op measure.Op, n *node, name string) opRun {
	var o opRun
	if r.activity != nil && isActivity(op, n) {
		r.activity.Add(1)
	}
	if r.rec != nil {
		o.sp = r.rec.Start(op, n.StableAttr().Ino)
		o.a.on = o.sp != nil
		if r.rec.WantsPaths() {
			p := "/" + n.Path(nil)
			if name != "" {
				p = path.Join(p, name)
			}
			o.sp.SetPath(p)
		}
	}
	return o
}

// isActivity says whether op on n is something a user does with the
// volume, which keeps a mount with --idle from unmounting (Options.Activity).
// What is not: STATFS, and reading the root's own attributes (GETATTR,
// GETXATTR, LISTXATTR of the mount point). Those are what walkers of the
// mount table do to every mount, on their own schedule: df, findmnt, a
// desktop's disk-space applet, systemd, a monitoring agent's filesystem
// collector. Counting them, the mount would never go idle on a real
// machine. gocryptfs -idle draws the line in the same place: only the
// operations that reach below the root mark it busy. Unlike gocryptfs we
// do count listing and opening the root itself (ls MNT is a user's).
func isActivity(op measure.Op, n *node) bool {
	switch op {
	case measure.OpStatfs:
		return false
	case measure.OpGetattr, measure.OpGetxattr, measure.OpListxattr:
		return !n.isRoot()
	}
	return true
}

// mirror applies the operation to the twin side (mirror mode only), timed
// separately, and pairs its timing with the span.
func (o *opRun) mirror(r *root, f func(s *side, a *acct) syscall.Errno) {
	if r.twin == nil {
		return
	}
	a := acct{on: o.sp != nil}
	t0 := a.now()
	errno := f(r.twin, &a)
	if o.sp != nil {
		o.sp.SetTwin(measure.Part{Total: time.Since(t0), Crypto: a.crypto, Lower: a.lower}, errno)
	}
}

// io records the offset and length of a data operation.
func (o *opRun) io(off int64, n int) {
	if o.sp != nil {
		o.sp.SetIO(off, n)
	}
}

func (o *opRun) end(errno syscall.Errno) {
	if o.sp == nil {
		return
	}
	o.sp.AddCrypto(o.a.crypto)
	o.sp.AddLower(o.a.lower)
	o.sp.End(errno)
}

// Timed lower-filesystem calls.

func (a *acct) pread(fd int, dst []byte, off int64) (int, error) {
	t0 := a.now()
	n, err := preadFull(fd, dst, off)
	a.lowerSince(t0)
	return n, err
}

func (a *acct) pwrite(fd int, src []byte, off int64) (int, error) {
	t0 := a.now()
	n, err := pwriteFull(fd, src, off)
	a.lowerSince(t0)
	return n, err
}

// pwritev writes b and then c from off, in one call where it can.
func (a *acct) pwritev(fd int, b, c []byte, off int64) (int, error) {
	t0 := a.now()
	defer a.lowerSince(t0)
	n, err := unix.Pwritev(fd, [][]byte{b, c}, off)
	for err == syscall.EINTR {
		n, err = unix.Pwritev(fd, [][]byte{b, c}, off)
	}
	if err != nil || n == len(b)+len(c) {
		return n, err
	}
	// A short write: the rest one buffer at a time.
	done := n
	for _, p := range [][]byte{b, c} {
		if done >= len(p) {
			done -= len(p)
			continue
		}
		m, err := pwriteFull(fd, p[done:], off+int64(n))
		n += m
		if err != nil {
			return n, err
		}
		done = 0
	}
	return n, nil
}

func (a *acct) ftruncate(fd int, size int64) error {
	t0 := a.now()
	err := syscall.Ftruncate(fd, size)
	a.lowerSince(t0)
	return err
}

func (a *acct) fstat(fd int, st *syscall.Stat_t) error {
	t0 := a.now()
	err := syscall.Fstat(fd, st)
	a.lowerSince(t0)
	return err
}

func (a *acct) fallocate(fd int, mode uint32, off, size int64) error {
	t0 := a.now()
	err := unix.Fallocate(fd, mode, off, size)
	a.lowerSince(t0)
	return err
}

func (a *acct) seek(fd int, off int64, whence int) (int64, error) {
	t0 := a.now()
	n, err := unix.Seek(fd, off, whence)
	a.lowerSince(t0)
	return n, err
}

// lowerErr runs one lower-filesystem call and times it.
func (a *acct) lowerErr(f func() error) error {
	t0 := a.now()
	err := f()
	a.lowerSince(t0)
	return err
}
