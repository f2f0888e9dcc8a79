package fs

import (
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

// Negative xattr cache. The kernel caches no xattr of a FUSE inode but its
// POSIX ACLs, and those not for long (a READDIRPLUS or a revalidating
// LOOKUP drops them): ls -l asks for security.selinux and the access ACL
// of every file, a chown asks for security.capability (to drop it), and
// each question used to cost a path walk, an open, an fstat, a getxattr
// and a close in LOWER, to learn what a native filesystem answers from
// memory: there is none. A node remembers which of a few well-known names
// its lower object lacks, and answers ENODATA for them at once.
//
// This is right because LOWER changes through this daemon only (without
// Options.SharedStorage, where the cache is off): an xattr appears on an
// existing inode through SETXATTR, which forgets what the node knew; a
// new inode (CREATE, MKDIR, MKNOD, SYMLINK) starts from what is certain
// of a new lower entry (newEntryXattrs). What is remembered is only ever
// an ENODATA the lower filesystem gave for that very name.

// knownXattrs are the names remembered, one bit each: the ones asked for
// on (nearly) every file by the kernel and by ls.
var knownXattrs = [...]string{
	"security.capability", // the kernel, before a chown and a file's first write (killpriv)
	"security.selinux",    // ls -l, getfilecon(3), whether or not SELinux is on
	aclAccess,             // ls -l, the kernel's ACL checks
	aclDefault,            // ls -l of a directory, CREATE/MKDIR (umask.go)
	"security.ima",
	"security.evm",
	"security.SMACK64",
	"security.apparmor",
}

const (
	xattrBitCapability = 1 << 0
	xattrBitSELinux    = 1 << 1
	xattrBitACLAccess  = 1 << 2
	xattrBitACLDefault = 1 << 3
)

// knownXattr returns the bit of name, 0 for a name not remembered.
func knownXattr(name string) uint64 {
	for i, k := range knownXattrs {
		if name == k {
			return 1 << i
		}
	}
	return 0
}

// xattrAbsent is one node's knowledge: the low 32 bits are the names
// known absent, the high 32 a generation, bumped by every change, so that
// an answer learned while a SETXATTR ran is not kept (learn).
type xattrAbsent struct{ v atomic.Uint64 }

// absent reports whether the names of bits are all known absent.
func (x *xattrAbsent) absent(bits uint64) bool {
	return bits != 0 && x.v.Load()&bits == bits
}

// load returns the state to pass to learn after asking LOWER.
func (x *xattrAbsent) load() uint64 { return x.v.Load() }

// learn records that the names of bits were absent, as LOWER answered
// when the state was v; nothing if it changed since.
func (x *xattrAbsent) learn(v, bits uint64) { x.v.CompareAndSwap(v, v|bits) }

// reset forgets everything and then knows bits (a new inode), in a new
// generation.
func (x *xattrAbsent) reset(bits uint64) {
	for {
		v := x.v.Load()
		if x.v.CompareAndSwap(v, (v>>32+1)<<32|bits) {
			return
		}
	}
}

// cachedXattr returns the bit under which node n remembers attr, 0 when
// it is not remembered on this mount.
func (n *node) cachedXattr(attr string) uint64 {
	if !n.r().xattrCache {
		return 0
	}
	return knownXattr(attr)
}

// newEntryXattrs is what is certain of the xattrs of an entry of type
// mode (S_IFMT bits) that the daemon has just made in directory parent:
// no security.capability (only a SETXATTR gives one) once LOWER has shown
// that it answers ENODATA for it; no security.selinux when the first entry
// it made had none (probeLabel); and no ACLs when the
// parent is known to have no default ACL (the lower filesystem gives a
// new entry ACLs from its parent's default ACL only).
func (r *root) newEntryXattrs(parent *node, mode uint32) uint64 {
	if !r.xattrCache {
		return 0
	}
	var bits uint64
	if r.capNoData.Load() {
		bits |= xattrBitCapability
	}
	if r.selinuxNoData.Load() {
		bits |= xattrBitSELinux
	}
	if parent.xattrNone.absent(xattrBitACLDefault) {
		bits |= xattrBitACLAccess
		if mode&syscall.S_IFMT == syscall.S_IFDIR {
			bits |= xattrBitACLDefault
		}
	}
	return bits
}

// probeLabel learns, from the first entry the daemon makes on this
// mount (e, just made on the mount's side), whether the entries it makes
// get a security.selinux: SELinux labels every file, directory and
// symlink as it is made, so either every new entry has one or none has.
// ls -l asks for it of every file; without this, each file made through
// the mount cost a lookup in LOWER at its first listing. One system call
// per mount.
func (r *root) probeLabel(a *acct, e entry) {
	if !r.xattrCache || !r.labelProbed.CompareAndSwap(false, true) {
		return
	}
	t0 := a.now()
	_, err := unix.Lgetxattr(procFd(e.dir)+"/"+e.name, "security.selinux", nil)
	a.lowerSince(t0)
	if err == unix.ENODATA {
		r.selinuxNoData.Store(true)
	}
}

// madeEntry sets what the new node ch, an entry of type mode just made in
// directory n (not a hard link: that is an old inode), knows of its
// xattrs (nothing for a symlink) and, for a directory, of the kernel's
// entries of its children. ch may be nil (the create failed).
func (n *node) madeEntry(ch *fs.Inode, mode uint32) {
	if ch == nil {
		return
	}
	var bits uint64
	if mode&syscall.S_IFMT != syscall.S_IFLNK {
		bits = n.r().newEntryXattrs(n, mode)
	}
	cn := ch.Operations().(*node)
	cn.xattrNone.reset(bits)
	if mode&syscall.S_IFMT == syscall.S_IFDIR && !n.r().sharedStorage {
		// Empty: every child it will have is made through us, and the
		// kernel gets each one's entry then (see listing).
		cn.dir().listed.Store(time.Now().UnixNano())
	}
}

// forgetChildXattrs drops what the node of the entry name of n (about to
// be unlinked, removed or renamed over) knows: once its inode is gone, a
// new lower inode may get its number, and on a lower filesystem without
// birth times go-fuse would hand the new entry this node (same inode
// number and generation) rather than the fresh one we make.
func (n *node) forgetChildXattrs(name string) {
	if ch := n.GetChild(name); ch != nil {
		if cn, ok := ch.Operations().(*node); ok {
			cn.xattrNone.reset(0)
		}
	}
}
