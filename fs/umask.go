package fs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// New entries get the mode a native filesystem would give them, which
// depends on two things the kernel cannot settle for a FUSE filesystem with
// POSIX ACLs:
//
//   - The caller's umask applies only when the parent directory has no
//     default ACL; with one, the new entry's ACL is made from the default
//     ACL and the full mode asked for (posix_acl_create). So with
//     FUSE_POSIX_ACL the kernel leaves the umask to the daemon
//     (FUSE_DONT_MASK) and sends it with CREATE, MKDIR and MKNOD.
//   - The daemon's own umask is not the caller's, but the lower kernel
//     applies it to every entry the daemon makes (unless the lower parent
//     has a default ACL). A daemon started with umask 022 would turn a
//     caller's 0664 into 0644.
//
// createMode does both, per lower directory: the lower filesystem inherits
// default ACLs itself (they are stored as real lower ACLs), and the
// daemon's umask is undone by a chmod when it took bits away. The
// process-wide umask is left alone: Mount also runs inside other programs
// (the tests), whose files it must not widen.

// umaskRaw hands the umask of CREATE, MKDIR and MKNOD requests on to the
// node methods, to which go-fuse's bridge passes the mode only. The key is
// the request's cancel channel, which the bridge puts into the context of
// the node call and which no other request uses while this one runs.
type umaskRaw struct {
	fuse.RawFileSystem
}

// requestUmasks maps a running request's cancel channel to its umask.
var requestUmasks sync.Map

func withUmask(cancel <-chan struct{}, umask uint32) func() {
	requestUmasks.Store(cancel, umask)
	return func() { requestUmasks.Delete(cancel) }
}

func (u *umaskRaw) Create(cancel <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer withUmask(cancel, in.Umask)()
	return u.RawFileSystem.Create(cancel, in, name, out)
}

func (u *umaskRaw) Mkdir(cancel <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer withUmask(cancel, in.Umask)()
	return u.RawFileSystem.Mkdir(cancel, in, name, out)
}

func (u *umaskRaw) Mknod(cancel <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer withUmask(cancel, in.Umask)()
	return u.RawFileSystem.Mknod(cancel, in, name, out)
}

// umaskOf returns the umask of the request ctx belongs to; 0 when ctx is
// no request's. Without FUSE_DONT_MASK (Options.NoXattr) the kernel has
// applied it to the mode already, and applying it again changes nothing.
func umaskOf(ctx context.Context) uint32 {
	c, ok := ctx.(*fuse.Context)
	if !ok {
		return 0
	}
	if u, ok := requestUmasks.Load(c.Cancel); ok {
		return u.(uint32) & 0777
	}
	return 0
}

// createMode is the mode a create asks for in one lower directory.
type createMode struct {
	mode, umask uint32
	// acl says whether the lower parent has a default ACL: 0 not looked
	// up yet, 1 yes, -1 no.
	acl int8
	// parent is the parent directory's node when it remembers whether it
	// has a default ACL (the mount's own side; see xattrAbsent).
	parent *node
}

// newCreateMode is the mode of an entry made in directory parent on side s.
func newCreateMode(ctx context.Context, s *side, parent *node, mode uint32) *createMode {
	c := &createMode{mode: mode & 07777, umask: umaskOf(ctx)}
	if s == parent.r().main && parent.r().xattrCache {
		c.parent = parent
	}
	return c
}

// inherits reports whether lower directory dir (an O_PATH descriptor) has
// a default ACL.
func (c *createMode) inherits(a *acct, dir int) bool {
	if c.acl == 0 && c.parent != nil && c.parent.xattrNone.absent(xattrBitACLDefault) {
		c.acl = -1
	}
	if c.acl == 0 {
		var known uint64
		if c.parent != nil {
			known = c.parent.xattrNone.load()
		}
		t0 := a.now()
		n, err := unix.Getxattr(procFd(dir), aclDefault, nil)
		a.lowerSince(t0)
		c.acl = -1
		if err == nil && n > 0 {
			c.acl = 1
		}
		if c.parent != nil && (err == unix.ENODATA || err == unix.EOPNOTSUPP) {
			// EOPNOTSUPP: no ACLs in LOWER, which GETXATTR answers
			// as ENODATA too.
			c.parent.xattrNone.learn(known, xattrBitACLDefault)
		}
	}
	return c.acl > 0
}

// lower returns the permission bits to create the entry with in dir.
// Where the parent node remembers it, whether dir has a default ACL is
// asked even when the umask takes nothing away: once per directory, and
// then every entry made in it knows that it has no ACL (newEntryXattrs).
func (c *createMode) lower(a *acct, dir int) uint32 {
	if c.parent != nil {
		c.inherits(a, dir)
	}
	if c.mode&c.umask == 0 || c.inherits(a, dir) {
		return c.mode
	}
	return c.mode &^ c.umask
}

// settle gives the entry name just made in dir with mode want, which has
// mode got, the permission bits it was made with where the daemon's umask
// took some away. With a default ACL in dir the lower filesystem applied
// the ACL instead, as natively, and the mode stays. The entry exists by
// now, so a failure (none is expected of root's chmod of a new entry)
// leaves the narrower mode rather than failing the create.
func (c *createMode) settle(a *acct, dir int, name string, got, want uint32) {
	if got&0777 == want&0777 || c.inherits(a, dir) {
		return
	}
	a.lowerErr(func() error { return chmodAt(dir, name, got&(07777&^0777)|want&0777) })
}

// settleAt is settle for an entry whose mode is not known yet.
func (c *createMode) settleAt(a *acct, dir int, name string, want uint32) {
	var st syscall.Stat_t
	if a.lowerErr(func() error { return fstatat(dir, name, &st) }) == nil {
		c.settle(a, dir, name, st.Mode, want)
	}
}
