package fs

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/measure"
)

var (
	_ = (fs.NodeGetxattrer)((*node)(nil))
	_ = (fs.NodeSetxattrer)((*node)(nil))
	_ = (fs.NodeListxattrer)((*node)(nil))
	_ = (fs.NodeRemovexattrer)((*node)(nil))
)

// xattrMax is the largest value the kernel passes (XATTR_SIZE_MAX).
const xattrMax = 64 << 10

// Every xattr namespace is stored on the lower file under its own name, on
// the encrypted mount as on the twin; the transform only decides how a
// value is stored (crypt seals user.* and trusted.* values, see
// xattrSealed). POSIX ACLs are the lower files' real ACLs, so that the
// lower filesystem inherits default ACLs and keeps the ACL mask in step
// with chmod, and the kernel enforces them (FUSE_POSIX_ACL).
const (
	aclAccess  = "system.posix_acl_access"
	aclDefault = "system.posix_acl_default"
)

// xattrBufs holds buffers for reading any xattr value or list whole
// (xattrMax plus the sealing overhead): allocating and zeroing 64 KiB per
// GETXATTR cost more than the system call (the kernel asks for
// security.capability before writes).
var xattrBufs = sync.Pool{New: func() any {
	b := make([]byte, xattrMax+keys.Overhead)
	return &b
}}

// xattrNode opens node n on side s for an xattr call: O_PATH without
// following a symlink (so a symlink, a FIFO or a device is not opened for
// real), and returns the /proc path through which the *xattr calls reach
// exactly that object, once it is known to be n's own inode (sameLower:
// an ACL set on a hard link planted under the name would open a file of
// someone else's to the caller). Close fd when done.
func (s *side) xattrNode(a *acct, n *node) (fd int, proc, rel string, errno syscall.Errno) {
	fd, rel, errno = s.openNode(a, n, unix.O_PATH|syscall.O_NOFOLLOW)
	if errno != 0 {
		return -1, "", rel, errno
	}
	if s == n.r().main {
		var st syscall.Stat_t
		if err := a.fstat(fd, &st); err != nil {
			syscall.Close(fd)
			return -1, "", rel, toErrno(err)
		}
		if errno := n.sameLower(s, rel, &st); errno != 0 {
			syscall.Close(fd)
			return -1, "", rel, errno
		}
	}
	return fd, procFd(fd), rel, 0
}

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (size uint32, errno syscall.Errno) {
	o := n.r().begin(measure.OpGetxattr, n)
	defer func() { o.end(errno) }()
	get := func(s *side, a *acct) ([]byte, string, syscall.Errno) {
		fd, p, rel, errno := s.xattrNode(a, n)
		if errno != 0 {
			return nil, "", errno
		}
		defer syscall.Close(fd)
		bp := xattrBufs.Get().(*[]byte)
		defer xattrBufs.Put(bp)
		buf := (*bp)[:xattrMax+s.t.xattrOverhead()]
		t0 := a.now()
		sz, err := unix.Getxattr(p, attr, buf)
		a.lowerSince(t0)
		if err == syscall.EOPNOTSUPP && (attr == aclAccess || attr == aclDefault) {
			// A lower filesystem without ACLs: the kernel, which asks
			// for ACLs to check permissions, takes ENODATA for "none"
			// and EOPNOTSUPP for a failure.
			return nil, "", syscall.ENODATA
		}
		if err != nil {
			return nil, "", toErrno(err)
		}
		value, errno := s.t.decodeXattr(a, attr, buf[:sz])
		if errno != 0 {
			return nil, s.show(rel), errno
		}
		// The value may still be buf (null transform), which goes back
		// to the pool.
		return append([]byte(nil), value...), "", 0
	}
	bit := n.cachedXattr(attr)
	if n.xattrNone.absent(bit) {
		return 0, syscall.ENODATA
	}
	known := n.xattrNone.load()
	value, p, errno := get(n.r().main, &o.a)
	if errno == syscall.ENODATA && bit != 0 {
		n.xattrNone.learn(known, bit)
		if bit == xattrBitCapability {
			n.r().capNoData.Store(true)
		}
	}
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
		_, _, errno := get(s, a)
		return errno
	})
	if errno == syscall.EIO {
		n.r().log.Warn().Str("lower", p).Str("xattr", attr).Msg("xattr value does not decrypt: EIO")
	}
	if errno != 0 {
		return 0, errno
	}
	if len(dest) == 0 {
		return uint32(len(value)), 0
	}
	if len(dest) < len(value) {
		return uint32(len(value)), syscall.ERANGE
	}
	return uint32(copy(dest, value)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) (errno syscall.Errno) {
	o := n.r().begin(measure.OpSetxattr, n)
	defer func() { o.end(errno) }()
	set := func(s *side, a *acct) syscall.Errno {
		value, errno := s.t.encodeXattr(a, attr, data)
		if errno != 0 {
			return errno
		}
		if len(value) > xattrMax {
			// The kernel refused values over XATTR_SIZE_MAX already;
			// this one fits the limit but not once sealed (nonce and
			// tag, 28 bytes): like a value too large for the lower
			// filesystem's xattr space, ENOSPC, which is what ext4
			// answers natively there (E2BIG means over the limit).
			return syscall.ENOSPC
		}
		fd, p, _, errno := s.xattrNode(a, n)
		if errno != 0 {
			return errno
		}
		defer syscall.Close(fd)
		t0 := a.now()
		defer a.lowerSince(t0)
		if err := unix.Setxattr(p, attr, value, int(flags)); err != nil {
			return toErrno(err)
		}
		if attr == aclAccess {
			killACLSetgid(ctx, fd, p)
		}
		return 0
	}
	errno = set(n.r().main, &o.a)
	// Whether or not it took (a failure may come after a change), what
	// the node knew of its xattrs is forgotten, after the change.
	n.xattrNone.reset(0)
	o.mirror(n.r(), set)
	return errno
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (size uint32, errno syscall.Errno) {
	o := n.r().begin(measure.OpListxattr, n)
	defer func() { o.end(errno) }()
	list := func(s *side, a *acct) ([]byte, syscall.Errno) {
		fd, p, _, errno := s.xattrNode(a, n)
		if errno != 0 {
			return nil, errno
		}
		defer syscall.Close(fd)
		bp := xattrBufs.Get().(*[]byte)
		defer xattrBufs.Put(bp)
		buf := (*bp)[:xattrMax]
		t0 := a.now()
		sz, err := unix.Listxattr(p, buf)
		a.lowerSince(t0)
		if err != nil {
			return nil, toErrno(err)
		}
		list := append([]byte(nil), buf[:sz]...)
		if bytes.Contains(list, []byte("trusted.")) && !callerCapable(ctx, capSysAdmin) {
			// Natively trusted.* names are listed to CAP_SYS_ADMIN
			// only; the daemon, which lists them as root, must
			// leave them out for others.
			list = list[:0]
			for _, name := range bytes.Split(buf[:sz], []byte{0}) {
				if len(name) > 0 && !bytes.HasPrefix(name, []byte("trusted.")) {
					list = append(append(list, name...), 0)
				}
			}
		}
		return list, 0
	}
	names, errno := list(n.r().main, &o.a)
	o.mirror(n.r(), func(s *side, a *acct) syscall.Errno {
		_, errno := list(s, a)
		return errno
	})
	if errno != 0 {
		return 0, errno
	}
	if len(dest) == 0 {
		return uint32(len(names)), 0
	}
	if len(dest) < len(names) {
		return uint32(len(names)), syscall.ERANGE
	}
	return uint32(copy(dest, names)), 0
}

func (n *node) Removexattr(ctx context.Context, attr string) (errno syscall.Errno) {
	o := n.r().begin(measure.OpRemovexattr, n)
	defer func() { o.end(errno) }()
	remove := func(s *side, a *acct) syscall.Errno {
		fd, p, _, errno := s.xattrNode(a, n)
		if errno != 0 {
			return errno
		}
		defer syscall.Close(fd)
		t0 := a.now()
		err := unix.Removexattr(p, attr)
		a.lowerSince(t0)
		return toErrno(err)
	}
	errno = remove(n.r().main, &o.a)
	// Whether or not it took, what the node knew is forgotten (as
	// after a SETXATTR).
	n.xattrNone.reset(0)
	o.mirror(n.r(), remove)
	return errno
}

// Capability bit numbers.
const (
	capFsetid   = 4
	capSysAdmin = 21
)

// killACLSetgid clears the set-group-ID bit of the file at p (open as fd)
// after its access ACL was set by a caller neither in the file's group nor
// holding CAP_FSETID, as native filesystems do (posix_acl_update_mode): the
// lower filesystem does not, since the daemon that sets it is root.
func killACLSetgid(ctx context.Context, fd int, p string) {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil || st.Mode&syscall.S_ISGID == 0 {
		return
	}
	c, ok := fuse.FromContext(ctx)
	if !ok || inGroup(c, st.Gid) || callerCapable(ctx, capFsetid) {
		return
	}
	syscall.Chmod(p, st.Mode&07777&^syscall.S_ISGID)
}

// initUserNSIno is the inode number of the initial user namespace
// (PROC_USER_INIT_INO in include/linux/proc_ns.h, fixed since Linux 3.8).
// A constant rather than /proc/1/ns/user: a daemon in a container's PID
// namespace would read its container's init there, and a daemon that is
// not root cannot read it at all.
const initUserNSIno = 0xEFFFFFFD

// callerCapable reports whether the process of request ctx has capability
// bit capBit in its effective set and lives in the initial user
// namespace (from /proc; a caller gone meanwhile has none). CapEff counts
// in the caller's own user namespace: anyone may make one (`unshare -Ur`)
// and hold every capability there, none of which the kernel honours for
// what is checked here (capable() in the initial namespace, for trusted.*;
// CAP_FSETID over an inode whose group the namespace does not map, for
// the set-group-ID rule). A caller in another namespace is taken as
// incapable; natively one that maps the file's owner and group keeps
// CAP_FSETID over it, a difference on the safe side. The cost, a stat
// and a read in /proc, is paid only on the two rare paths that ask
// (listing a file that has trusted.* names, an ACL change of a
// set-group-ID file by a caller outside its group), so nothing is cached:
// a cache keyed by PID would outlive a PID's reuse.
func callerCapable(ctx context.Context, capBit uint) bool {
	c, ok := fuse.FromContext(ctx)
	return ok && capableCaller(c, capBit)
}

// capableCaller is callerCapable for the caller of a raw request.
func capableCaller(c *fuse.Caller, capBit uint) bool {
	proc := "/proc/" + strconv.FormatUint(uint64(c.Pid), 10)
	var ns unix.Stat_t
	if unix.Stat(proc+"/ns/user", &ns) != nil || ns.Ino != initUserNSIno {
		return false
	}
	b, err := os.ReadFile(proc + "/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "CapEff:"); ok {
			caps, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			return err == nil && caps&(1<<capBit) != 0
		}
	}
	return false
}
