package fs

import (
	"crypto/rand"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/lowerfd"
	"github.com/twincrypt/twincrypt/cipher/names"
	"github.com/twincrypt/twincrypt/measure"
)

// side is one place where the operations of the mounted view are carried
// out: the mount's lower directory through its transform, and in mirror
// mode also a plaintext twin directory through the null transform. The
// operation code is written once against a side.
type side struct {
	// lower is the side's directory, for log lines; rootFd is its O_PATH
	// descriptor, opened at mount, through which every lower object is
	// reached (see openBeneath).
	lower  string
	rootFd int
	t      transform
	io     contentIO
	// linkSizes caches the markers of long links, which hold their
	// plaintext target length (see longlink.go).
	linkSizes linkSizeCache
	// linkLimit is what is known of the longest symlink target the
	// lower filesystem takes (see linkFits).
	linkLimit linkLimit
	// rootDev and rootIno identify the lower root, whose link count
	// must not count the transform's hidden directories (fillAttr).
	rootDev, rootIno uint64
	// rootCloseNoop is set when the filesystem of the lower root does
	// nothing at close(2) (see closeIsNoop).
	rootCloseNoop bool
	// rootDirAtime is how the filesystem of the lower root updates a
	// directory's atime when it is listed (see dirAtimeOf).
	rootDirAtime dirAtime
}

// root is shared by all nodes of one mount.
type root struct {
	main *side
	// twin is the mirror side (mirror mode), nil otherwise.
	twin *side
	dev  uint64
	log  zerolog.Logger
	rec  *measure.Recorder
	// activity counts the operations begun (Options.Activity), or nil.
	activity *atomic.Uint64
	// kernelPassthrough hands open files to the kernel (twin only).
	kernelPassthrough bool
	// xattrCache lets nodes remember which well-known xattrs their
	// lower object lacks (see xattrAbsent): off with SharedStorage,
	// where others may set them in LOWER, and in mirror mode, where
	// every operation must reach both sides.
	xattrCache bool
	// sharedStorage: LOWER is changed behind the mount too.
	sharedStorage bool
	// attrTTL is how long the kernel may keep attributes (CacheTimeout,
	// or SharedCacheTimeout with shared storage).
	attrTTL time.Duration
	// capNoData is set once LOWER answered ENODATA for a
	// security.capability (see newEntryXattrs).
	capNoData atomic.Bool
	// selinuxNoData is set when the first entry this daemon made had
	// no security.selinux (probeLabel, once: labelProbed).
	selinuxNoData, labelProbed atomic.Bool
	rootNode                   *node
	closeOnce                  sync.Once
	// open holds the open files and directory handles (*file,
	// *dirHandle): an unmount drops the RELEASEs still queued in the
	// kernel, and close then closes their lower descriptors, so that an
	// in-process mount leaves none behind (a LOWER that is itself a mount
	// can be unmounted at once).
	open sync.Map
}

// node is one file, directory, symlink or special file of the mounted view.
// It holds no lower path: the path is rebuilt from the parent chain on each
// operation, so renames anywhere above a node need no bookkeeping.
//
// The daemon keeps a node for every inode the kernel has cached (until
// its FORGET), so a walk of a big tree (find, ls -lR, du) makes them by
// the hundred thousand, most never opened: a node is kept small (160
// bytes with go-fuse's Inode, 128 of them: a size class of its own), what
// only directories need is in dirState and what only open files need in
// nodeExtra, each made at the first need, and the mount is found through
// go-fuse's root (r) rather than a pointer in every node.
type node struct {
	fs.Inode

	// xattrNone remembers which well-known xattrs the lower object is
	// known to lack (see xattrAbsent). It is in the node itself: ls -l
	// asks for ACLs of every entry.
	xattrNone xattrAbsent

	// m is what only some nodes need, nil before the first need (see
	// more); the root node's is made with the node and holds the mount
	// (see r).
	m atomic.Pointer[nodeMore]
}

// nodeMore is what a node holds beyond go-fuse's Inode and xattrNone,
// made at the first need: a node only looked up (find, du, a stat of
// every file) has none, and its number of nodes is that of the
// directories, the nodes opened and those whose lower name was asked for.
type nodeMore struct {
	// lower caches the node's lower name (see nodeName).
	lower atomic.Pointer[lowerCache]
	// d is the state of a directory node, nil before its first use (see
	// dir).
	d atomic.Pointer[dirState]
	// x is the state of an opened node, nil before (see extra).
	x atomic.Pointer[nodeExtra]
}

// more returns the node's nodeMore, made at the first call; it stays
// until the node is forgotten.
func (n *node) more() *nodeMore { return loadOrNew(&n.m) }

// loadOrNew returns what p points to, pointing it at a new zero T first
// if it is nil (the first of racing callers wins).
func loadOrNew[T any](p *atomic.Pointer[T]) *T {
	if v := p.Load(); v != nil {
		return v
	}
	v := new(T)
	if p.CompareAndSwap(nil, v) {
		return v
	}
	return p.Load()
}

// cachedLower returns the node's cached lower name, nil if none.
func (n *node) cachedLower() *lowerCache {
	if m := n.m.Load(); m != nil {
		return m.lower.Load()
	}
	return nil
}

// opened returns the node's nodeExtra, nil if it was never made.
func (n *node) opened() *nodeExtra {
	if m := n.m.Load(); m != nil {
		return m.x.Load()
	}
	return nil
}

// dirState is what a directory node caches.
type dirState struct {
	// iv caches the directory IV (see dirIV).
	iv atomic.Pointer[dirIVBox]
	// listed is when the kernel last got every entry of this directory
	// with its attributes (a READDIRPLUS that looked each one up; see
	// listing), in Unix nanoseconds.
	listed atomic.Int64
	// childAtimeStale is set when a file's atimeStale is (a READ of it
	// was served since the kernel last got its attributes): the next
	// listing goes to the daemon instead of the kernel's cached one, so
	// that its READDIRPLUS refreshes those attributes (dirOpenFlags).
	childAtimeStale atomic.Bool
	// listedMtime is the lower directory's mtime (Unix nanoseconds) at
	// the daemon's last listing of it (see atimeWantsListing).
	listedMtime atomic.Int64
	// r is the mount, in the root node's dirState only.
	r *root
}

// dir returns the node's dirState, made at the first call; it stays
// until the node is forgotten.
func (n *node) dir() *dirState { return loadOrNew(&n.more().d) }

// r returns the mount of node n, which go-fuse has made (NewInode; the
// root node at NewNodeFS).
func (n *node) r() *root { return n.Root().Operations().(*node).m.Load().d.Load().r }

// nodeExtra is what a node needs once it is opened (or truncated).
type nodeExtra struct {
	// io is the content state of a regular file (see ioState).
	io ioState

	// files are the node's open files: after the last name of a file is
	// gone they are the only way to it, and an open of /proc/PID/fd/N
	// (which reaches the kernel inode without a lookup) reopens the file
	// through one of them (reopen).
	filesMu sync.Mutex
	files   []*file
	// dirs are the open handles of a directory node, which reach it the
	// same way once it is removed (an open of /proc/PID/fd/N of a
	// removed directory).
	dirs []*dirHandle

	// atimeStale is set when a READ of the file or a READDIR of the
	// directory was served: the kernel then marks its cached atime of
	// the inode stale (fuse_invalidate_atime) and its next stat asks
	// GETATTR, though the entry itself is fresh. A READDIRPLUS of the
	// parent sends such a child in full instead of skipping it
	// (dirHandle.Lookup), which refreshes the kernel's attributes and
	// spares that GETATTR (rm -rf or find of files just read); a
	// LOOKUP or GETATTR answered clears it. Only ever a round trip, never
	// an answer, depends on it.
	atimeStale atomic.Bool
}

// readServed notes a READ or READDIR served for n (see atimeStale), and
// reports whether the kernel's atime of n just became stale.
func (n *node) readServed() bool {
	x := n.extra()
	return !x.atimeStale.Load() && !x.atimeStale.Swap(true)
}

// fileReadServed notes a READ served for file n: readServed, and the
// parent's childAtimeStale (not for a READDIR of a directory: its parent's
// listing made again for one stale subdirectory would cost more than the
// GETATTR it spares, and each uncached listing would mark the next level).
func (n *node) fileReadServed() {
	if !n.readServed() {
		return
	}
	if _, p := n.Parent(); p != nil {
		if pd := p.Operations().(*node).dir(); !pd.childAtimeStale.Load() {
			pd.childAtimeStale.Store(true)
		}
	}
}

// attrsSent notes that the kernel got n's attributes (see atimeStale).
func (n *node) attrsSent() {
	if x := n.opened(); x != nil && x.atimeStale.Load() {
		x.atimeStale.Store(false)
	}
}

// kernelAtimeStale reports whether the kernel's atime of n is stale.
func (n *node) kernelAtimeStale() bool {
	x := n.opened()
	return x != nil && x.atimeStale.Load()
}

// extra returns the node's nodeExtra, made at the first call; it stays
// until the node is forgotten.
func (n *node) extra() *nodeExtra { return loadOrNew(&n.more().x) }

func (n *node) isRoot() bool { return n.IsRoot() }

func (n *node) ino() uint64 { return n.StableAttr().Ino }

func toErrno(err error) syscall.Errno { return fs.ToErrno(err) }

func randRead(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic("no randomness: " + err.Error())
	}
}

// rel returns the path of n on side s, relative to the side's root ("" for
// the root itself). With encrypted names the whole walk up the parent chain
// counts as crypto time (the name transform: EME per component, and the
// first read of each directory's IV): one pair of clock reads per operation
// rather than one per component. The path is only ever opened beneath the
// side's root descriptor and never through a symlink (openBeneath).
func (s *side) rel(a *acct, n *node) (string, syscall.Errno) {
	if !a.on || !s.t.namesCost() {
		return s.walk(n)
	}
	t0 := time.Now()
	p, errno := s.walk(n)
	a.crypto += time.Since(t0)
	return p, errno
}

var untimed = &acct{}

// maxDepth bounds the depth of a node below the root: 65,536 levels,
// far deeper than the trees programs make (a path to the bottom would be
// at least 128 KiB, 32 times PATH_MAX), and a stop should a loop ever
// appear in the tree.
const maxDepth = 1 << 16

// walk builds the path from the root down in one buffer: the parent chain
// first, then one lower name per level, each computed knowing its
// directory's path (a prefix of the buffer, shared, not copied), so that
// a node at depth d costs O(d) and not a copy of its path per level.
func (s *side) walk(n *node) (string, syscall.Errno) {
	type step struct {
		n    *node
		name string
	}
	var stack [16]step
	up := stack[:0]
	for m := n; !m.isRoot(); {
		name, parent := m.Parent()
		if parent == nil {
			// Unlinked while open: only its file handles still reach it.
			return "", syscall.ENOENT
		}
		if len(up) >= maxDepth {
			// Never met in a tree without loops (Lookup refuses
			// them): a bound rather than a walk without end.
			return "", syscall.ELOOP
		}
		up = append(up, step{m, name})
		m = parent.Operations().(*node)
	}
	// A strings.Builder only appends: what String returned stays valid.
	var b strings.Builder
	pn := n.r().rootNode
	for i := len(up) - 1; i >= 0; i-- {
		lower, errno := s.nodeName(pn, up[i].n, b.String(), up[i].name)
		if errno != 0 {
			return "", errno
		}
		if b.Len() > 0 {
			b.WriteByte('/')
		}
		b.WriteString(lower)
		pn = up[i].n
	}
	return b.String(), 0
}

// lowerCache is the lower name of a node as computed under one parent,
// plain name and parent IV.
type lowerCache struct {
	dir   *node
	name  string
	iv    *byte // the first byte of the parent's IV slice (compared by identity)
	lower string
}

// valid reports whether c was computed for the entry name of dir under
// dir's current IV iv.
func (c *lowerCache) valid(dir *node, name string, iv []byte) bool {
	return c != nil && c.dir == dir && c.name == name && len(iv) > 0 && c.iv == &iv[0]
}

// nodeName returns the lower name of node n, the entry name of directory
// pn (at dirRel). With encrypted names every operation rebuilds the whole
// lower path, one EME encryption per component: the result is cached in
// n, valid while n sits under the same parent node and name and that
// parent keeps the same IV (a new IV is a new slice). A rename moves the
// node in go-fuse's tree, which changes the key, so nothing needs to be
// invalidated by hand.
func (s *side) nodeName(pn, n *node, dirRel, name string) (string, syscall.Errno) {
	d := s.loc(s.rootFd, "", dirRel)
	if !s.t.namesCost() {
		lower, _, errno := s.t.lowerName(untimed, pn, d, name)
		return lower, errno
	}
	iv, errno := pn.dirIV(untimed, s.t, d)
	if errno != 0 {
		return "", errno
	}
	if c := n.cachedLower(); c.valid(pn, name, iv) {
		return c.lower, 0
	}
	lower, _, errno := s.t.lowerName(untimed, pn, d, name)
	if errno != 0 {
		return "", errno
	}
	if len(iv) > 0 {
		n.more().lower.Store(&lowerCache{dir: pn, name: name, iv: &iv[0], lower: lower})
	}
	return lower, 0
}

// join appends a name to a relative path ("" is the directory itself).
func join(rel, name string) string {
	if rel == "" {
		return name
	}
	return rel + "/" + name
}

// show is the lower path of rel on side s, for log lines.
func (s *side) show(rel string) string {
	return join(s.lower, rel)
}

// loc locates the directory rel below the descriptor fd, whose own path
// below the side's root is fdRel.
func (s *side) loc(fd int, fdRel, rel string) dirLoc {
	return dirLoc{fd: fd, rel: rel, top: s.lower, sub: fdRel}
}

// entry is one lower directory entry, reached through a descriptor of its
// lower parent directory: operations on it are the *at system calls on
// (dir, name), which never follow a symlink in name (AT_SYMLINK_NOFOLLOW,
// O_NOFOLLOW) and cannot leave the parent. Release it with s.done.
type entry struct {
	dir    int    // O_PATH descriptor of the parent (or the side's root)
	name   string // lower name in dir; "." for the root itself
	dirRel string // the parent's path below the side's root
}

// dirOf opens the lower directory of node n on side s: an O_PATH
// descriptor reached from the side's root without crossing a symlink, or
// the root descriptor itself for the root. Release it with closeDir.
func (s *side) dirOf(a *acct, n *node) (fd int, rel string, errno syscall.Errno) {
	rel, errno = s.rel(a, n)
	if errno != 0 {
		return -1, "", errno
	}
	fd, errno = s.openDir(a, rel)
	return fd, rel, errno
}

// openDir opens the directory rel below the side's root as O_PATH.
func (s *side) openDir(a *acct, rel string) (int, syscall.Errno) {
	if rel == "" {
		return s.rootFd, 0
	}
	t0 := a.now()
	fd, err := openBeneath(s.rootFd, rel, unix.O_PATH|syscall.O_DIRECTORY, 0)
	a.lowerSince(t0)
	if err != nil {
		return -1, toErrno(err)
	}
	return fd, 0
}

func (s *side) closeDir(fd int) {
	if fd >= 0 && fd != s.rootFd {
		syscall.Close(fd)
	}
}

func (s *side) done(e entry) { s.closeDir(e.dir) }

// loc of an entry's parent directory.
func (s *side) parentLoc(e entry) dirLoc { return s.loc(e.dir, e.dirRel, "") }

// rel of the entry itself.
func (e entry) rel() string {
	if e.name == "." {
		return e.dirRel
	}
	return join(e.dirRel, e.name)
}

// entryOf returns the lower entry of node n on side s: its parent
// directory opened and its lower name. The root is (root descriptor, ".").
func (s *side) entryOf(a *acct, n *node) (entry, syscall.Errno) {
	if n.isRoot() {
		return entry{dir: s.rootFd, name: "."}, 0
	}
	name, parent := n.Parent()
	if parent == nil {
		return entry{dir: -1}, syscall.ENOENT
	}
	return s.childAt(a, parent.Operations().(*node), name)
}

// childAt returns the lower entry for the entry name of directory n on
// side s (which need not exist yet). childLong also returns the long name
// to keep in a sidecar when the entry is created.
func (s *side) childAt(a *acct, n *node, name string) (entry, syscall.Errno) {
	e, _, errno := s.childLong(a, n, name)
	return e, errno
}

func (s *side) childLong(a *acct, n *node, name string) (e entry, long string, errno syscall.Errno) {
	fd, rel, errno := s.dirOf(a, n)
	if errno != 0 {
		return entry{dir: -1}, "", errno
	}
	e, long, errno = s.childIn(a, n, fd, rel, name)
	if errno != 0 {
		s.closeDir(fd)
		return entry{dir: -1}, "", errno
	}
	return e, long, 0
}

// childIn names the entry name of directory n, already open as fd.
func (s *side) childIn(a *acct, n *node, fd int, rel, name string) (entry, string, syscall.Errno) {
	var t0 time.Time
	timed := a.on && s.t.namesCost()
	if timed {
		t0 = time.Now()
	}
	lower, ok := s.knownChild(n, fd, rel, name)
	var long string
	var errno syscall.Errno
	if !ok {
		lower, long, errno = s.t.lowerName(untimed, n, s.loc(fd, rel, ""), name)
	}
	if timed {
		a.crypto += time.Since(t0)
	}
	return entry{dir: fd, name: lower, dirRel: rel}, long, errno
}

// knownChild returns the cached lower name of the child name of n when
// the kernel still has a node for it (unlink, rmdir, rename, setattr by
// name): no EME encryption. Long names are left to lowerName, whose
// callers may need the full encrypted name.
func (s *side) knownChild(n *node, fd int, rel, name string) (string, bool) {
	if !s.t.namesCost() {
		return "", false
	}
	ch := n.GetChild(name)
	if ch == nil {
		return "", false
	}
	cn, ok := ch.Operations().(*node)
	if !ok {
		return "", false
	}
	c := cn.cachedLower()
	if c == nil || names.IsLong(c.lower) {
		return "", false
	}
	iv, errno := n.dirIV(untimed, s.t, s.loc(fd, rel, ""))
	if errno != 0 || !c.valid(n, name, iv) {
		return "", false
	}
	return c.lower, true
}

// openNode opens node n itself on side s with flags (O_NOFOLLOW is
// implied: a node whose lower object became a symlink gives ELOOP).
func (s *side) openNode(a *acct, n *node, flags int) (int, string, syscall.Errno) {
	rel, errno := s.rel(a, n)
	if errno == syscall.ENOENT && n.unlinked() {
		// No name left, but still open: through an open descriptor.
		fd, errno := n.openUnlinked(a, s, flags)
		return fd, "", errno
	}
	if errno != 0 {
		return -1, rel, errno
	}
	t0 := a.now()
	fd, err := openBeneath(s.rootFd, rel, flags, 0)
	a.lowerSince(t0)
	if err != nil {
		return -1, rel, toErrno(err)
	}
	return fd, rel, 0
}

// Containment. Every lower object is reached from the side's root
// descriptor, opened once at mount, with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS): whatever an attacker who
// can write to LOWER puts there (a directory replaced by a symlink to /etc
// while the kernel still has a node for it, a file swapped for a symlink),
// the daemon never reads or writes outside LOWER. A symlink met on the way
// gives ELOOP to the application ("too many levels of symbolic links"),
// the error the final O_NOFOLLOW component always gave. A path longer
// than one system call takes is resolved in pieces, each under the same
// rules (openBeneathIn). Without openat2 the path is walked one component
// at a time under the same rules (openStepwise).

const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openFlagsMask is what openat2 accepts (it refuses unknown bits, open(2)
// ignores them: FUSE open flags may carry kernel-internal ones).
const openFlagsMask = unix.O_ACCMODE | unix.O_CREAT | unix.O_EXCL | unix.O_NOCTTY | unix.O_TRUNC |
	unix.O_APPEND | unix.O_NONBLOCK | unix.O_DSYNC | unix.O_SYNC | unix.O_ASYNC | unix.O_DIRECT |
	unix.O_LARGEFILE | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_NOATIME | unix.O_CLOEXEC | unix.O_PATH

// noOpenat2 is set when the kernel has no openat2 (before Linux 5.6) or a
// seccomp filter refuses it: lower paths are then walked one component at
// a time (openStepwise), under the same rules, at one openat and one fstat
// per component.
var noOpenat2 atomic.Bool

// probeOpenat2 checks once per mount that openat2 works and says so when
// it does not.
func probeOpenat2(rootFd int, log zerolog.Logger) {
	fd, err := unix.Openat2(rootFd, ".", &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: resolveBeneath})
	if err == nil {
		syscall.Close(fd)
		return
	}
	if err == unix.ENOSYS || err == unix.EPERM {
		if !noOpenat2.Swap(true) {
			log.Info().Err(err).Msg("no openat2 (Linux < 5.6 or seccomp): lower paths are resolved one component at a time")
		}
	}
}

// openRegularBeneath opens the regular file rel below dirFd (its
// resolution as openBeneath's, never through a symlink) with flags. A
// metadata file (directory IV, sidecar) may be a FIFO or device node
// planted by whoever can write LOWER: it is refused (a
// *lowerfd.NotRegularError) on an O_PATH descriptor and never opened,
// so that no FIFO's open waits and no driver's open runs. This costs an
// openat of the /proc link and a close more than a plain open.
func openRegularBeneath(dirFd int, rel string, flags int) (int, error) {
	pfd, err := openBeneath(dirFd, rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if err != nil {
		return -1, err
	}
	defer syscall.Close(pfd)
	var st unix.Stat_t
	return lowerfd.OpenRegular(pfd, flags, &st, nil)
}

// openBeneath opens rel below the directory dirFd ("" for dirFd itself)
// without following any symlink and without leaving dirFd's tree.
// O_CLOEXEC is implied; mode is used with O_CREAT only.
func openBeneath(dirFd int, rel string, flags int, mode uint32) (int, error) {
	return openBeneathIn(dirFd, rel, flags, mode, maxPathArg)
}

// maxPathArg is the longest path one system call takes: PATH_MAX (4096)
// counts the terminating NUL. It bounds each call, not the depth of a
// tree: a program goes deeper with *at calls or chdir, and the lower path
// of a deep node, with encrypted names longer than the plaintext ones,
// passes it long before the plaintext path does.
const maxPathArg = unix.PathMax - 1

// openBeneathIn resolves a rel longer than chunk in pieces of whole
// components, each at most chunk bytes and opened O_PATH from the
// descriptor of the previous piece under the same rules (beneath it, no
// symlink), so the whole path stays beneath dirFd and crosses no symlink,
// as one call would (our paths hold no ".."). Paths that fit take one
// call, as before.
func openBeneathIn(dirFd int, rel string, flags int, mode uint32, chunk int) (int, error) {
	fd := dirFd
	for len(rel) > chunk {
		i := strings.LastIndexByte(rel[:chunk+1], '/')
		if i <= 0 {
			// A component longer than a whole call (none is: NAME_MAX).
			if fd != dirFd {
				syscall.Close(fd)
			}
			return -1, syscall.ENAMETOOLONG
		}
		next, err := openBeneath1(fd, rel[:i], unix.O_PATH|unix.O_DIRECTORY, 0)
		if fd != dirFd {
			syscall.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd, rel = next, rel[i+1:]
	}
	res, err := openBeneath1(fd, rel, flags, mode)
	if fd != dirFd {
		syscall.Close(fd)
	}
	return res, err
}

// openBeneath1 is openBeneath for a rel that fits in one call.
func openBeneath1(dirFd int, rel string, flags int, mode uint32) (int, error) {
	if rel == "" {
		rel = "."
	}
	flags = flags&openFlagsMask | unix.O_CLOEXEC
	if flags&unix.O_CREAT == 0 {
		mode = 0
	}
	if !noOpenat2.Load() {
		how := unix.OpenHow{Flags: uint64(flags), Mode: uint64(mode), Resolve: resolveBeneath}
		for i := 0; ; i++ {
			fd, err := unix.Openat2(dirFd, rel, &how)
			if err == unix.EINTR || err == unix.EAGAIN && i < 8 {
				// EAGAIN: the kernel could not be sure that a ".." stayed
				// beneath dirFd during a concurrent rename. Our paths hold
				// no "..", but a retry is what the kernel asks for.
				continue
			}
			if err != unix.ENOSYS {
				return fd, err
			}
			noOpenat2.Store(true)
			break
		}
	}
	return openStepwise(dirFd, rel, flags, mode)
}

// openStepwise is openBeneath1 without openat2: one component at a time,
// each directory on the way opened O_PATH|O_NOFOLLOW from the descriptor
// of the previous one and checked to be a directory, the last component
// opened with O_NOFOLLOW. A plain openat of the whole path would follow
// a symlink in any component but the last: a directory of LOWER swapped
// for a symlink to /etc would take the daemon there. A symlink on the way
// gives ELOOP, as openat2 does; ".." (which our paths never hold) EXDEV,
// as RESOLVE_BENEATH does for a ".." that would leave dirFd.
func openStepwise(dirFd int, rel string, flags int, mode uint32) (int, error) {
	fd := dirFd
	release := func() {
		if fd != dirFd {
			syscall.Close(fd)
		}
	}
	for {
		comp, rest, more := strings.Cut(rel, "/")
		if comp == "" || comp == "." {
			if more {
				rel = rest
				continue
			}
			comp = "."
		}
		if comp == ".." {
			release()
			return -1, unix.EXDEV
		}
		if !more {
			res, err := openatRetry(fd, comp, flags|unix.O_NOFOLLOW, mode)
			if err == unix.ENOTDIR && flags&unix.O_DIRECTORY != 0 {
				// O_DIRECTORY|O_NOFOLLOW on a symlink: ELOOP, as openat2.
				var st unix.Stat_t
				if unix.Fstatat(fd, comp, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
					err = unix.ELOOP
				}
			}
			release()
			return res, err
		}
		next, err := openatRetry(fd, comp, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		release()
		if err != nil {
			return -1, err
		}
		fd = next
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			release()
			return -1, err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
		case unix.S_IFLNK:
			release()
			return -1, unix.ELOOP
		default:
			release()
			return -1, unix.ENOTDIR
		}
		rel = rest
	}
}

func openatRetry(dirFd int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dirFd, name, flags, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// unlinkBeneath removes rel below dirFd, its parent reached as openBeneath does.
func unlinkBeneath(dirFd int, rel string, flags int) error {
	dir, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	if dir != "" {
		fd, err := openBeneath(dirFd, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		dirFd = fd
	}
	return unix.Unlinkat(dirFd, name, flags)
}

// dirLoc locates a lower directory for the transforms' metadata (the
// directory IV, long-name sidecars): rel below the directory descriptor fd
// ("" for fd itself). Files in it are opened with openBeneath only.
type dirLoc struct {
	fd  int
	rel string
	// For log lines: fd is the lower directory top/sub.
	top, sub string
}

// file returns where the file name of the directory is: a path below d.fd.
func (d dirLoc) file(name string) string { return join(d.rel, name) }

// show is the lower path of the file name of the directory, for log lines.
func (d dirLoc) show(name string) string {
	p := d.top
	for _, c := range []string{d.sub, d.rel, name} {
		if c != "" {
			p += "/" + c
		}
	}
	return p
}

// dirIVBox is the cached IV of a directory node; a box with a nil iv is
// an emptied cache (forgetDirIV).
type dirIVBox struct{ iv []byte }

// dirIV returns the IV of directory n, found at d. Only the mount's own
// side has directory IVs, so the cache lives in the node. An IV read
// while the cache was emptied (forgetDirIV) is returned but not kept.
func (n *node) dirIV(a *acct, t transform, d dirLoc) ([]byte, syscall.Errno) {
	ds := n.dir()
	b := ds.iv.Load()
	if b != nil && b.iv != nil {
		return b.iv, 0
	}
	iv, errno := t.readDirIV(a, d)
	if errno == 0 && !ds.iv.CompareAndSwap(b, &dirIVBox{iv}) {
		// Another reader was first (keep one slice: lowerCache compares
		// IVs by identity), or the cache was emptied meanwhile.
		if b := ds.iv.Load(); b != nil && b.iv != nil {
			return b.iv, 0
		}
	}
	return iv, errno
}

// forgetDirIV empties n's directory IV cache; a read of the IV that
// started before does not fill it.
func (n *node) forgetDirIV() { n.dir().iv.Store(&dirIVBox{}) }

func newNode() *node { return new(node) }

// newRootNode makes the root node of mount r.
func (r *root) newRootNode() *node {
	n := newNode()
	n.more().d.Store(&dirState{r: r})
	return n
}

// stableAttr composes an inode number from the lower inode and device the
// way go-fuse's loopback does, so that hard links share one node. The
// generation is the lower birth time where the filesystem has one: an
// inode number reused by a new file must not find the node (and cached
// directory IV) of the old one.
func (r *root) stableAttr(st *syscall.Stat_t, gen uint64) fs.StableAttr {
	swapped := (uint64(st.Dev) << 32) | (uint64(st.Dev) >> 32)
	swappedRootDev := (r.dev << 32) | (r.dev >> 32)
	return fs.StableAttr{
		Mode: uint32(st.Mode),
		Ino:  (swapped ^ swappedRootDev) ^ st.Ino,
		Gen:  gen,
	}
}

// sameLower checks that the lower object st, just opened on side s for
// node n by its name, is n's own inode (the node's inode number is
// composed from it, see stableAttr). The kernel checked the caller's
// permissions against the attributes it holds for n; whoever can write
// LOWER may since have put another file under the name, a hard link to a
// file the caller may not touch among them. ESTALE, unlike EIO, makes the
// kernel look the name up again (an open, a path-based chmod...) and
// check the caller against what is there now. Only the mount's own side
// is checked (the nodes know its inodes, not the mirror's), and not the
// root, which is the root descriptor itself.
func (n *node) sameLower(s *side, rel string, st *syscall.Stat_t) syscall.Errno {
	if s != n.r().main || n.isRoot() || n.r().stableAttr(st, 0).Ino == n.ino() {
		return 0
	}
	n.r().log.Warn().Str("lower", s.show(rel)).Uint64("lowerIno", st.Ino).
		Msg("the lower object is not the inode the kernel knows under this name (replaced in LOWER): ESTALE")
	return syscall.ESTALE
}

// lstatGen is fstatat(2) of an entry, never following a symlink, that also
// returns a generation from the birth time.
func (a *acct) lstatGen(e entry, st *syscall.Stat_t) (gen uint64, err error) {
	t0 := a.now()
	defer a.lowerSince(t0)
	var x unix.Statx_t
	err = unix.Statx(e.dir, e.name, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x)
	if err == unix.ENOSYS {
		return 1, fstatat(e.dir, e.name, st)
	}
	if err != nil {
		return 0, err
	}
	*st = syscall.Stat_t{
		Dev:     unix.Mkdev(x.Dev_major, x.Dev_minor),
		Ino:     x.Ino,
		Nlink:   uint64(x.Nlink),
		Mode:    uint32(x.Mode),
		Uid:     x.Uid,
		Gid:     x.Gid,
		Rdev:    unix.Mkdev(x.Rdev_major, x.Rdev_minor),
		Size:    int64(x.Size),
		Blksize: int64(x.Blksize),
		Blocks:  int64(x.Blocks),
		Atim:    syscall.Timespec{Sec: x.Atime.Sec, Nsec: int64(x.Atime.Nsec)},
		Mtim:    syscall.Timespec{Sec: x.Mtime.Sec, Nsec: int64(x.Mtime.Nsec)},
		Ctim:    syscall.Timespec{Sec: x.Ctime.Sec, Nsec: int64(x.Ctime.Nsec)},
	}
	gen = 1
	if x.Mask&unix.STATX_BTIME != 0 && (x.Btime.Sec != 0 || x.Btime.Nsec != 0) {
		gen = uint64(x.Btime.Sec)*1e9 + uint64(x.Btime.Nsec)
	}
	return gen, nil
}

// fstatat is lstat(2) of name in the directory dir.
func fstatat(dir int, name string, st *syscall.Stat_t) error {
	// syscall.Stat_t and unix.Stat_t are both the kernel's struct stat.
	return unix.Fstatat(dir, name, (*unix.Stat_t)(unsafe.Pointer(st)), unix.AT_SYMLINK_NOFOLLOW)
}

func (a *acct) lstat(e entry, st *syscall.Stat_t) error {
	t0 := a.now()
	err := fstatat(e.dir, e.name, st)
	a.lowerSince(t0)
	return err
}

// fillAttr converts a lower stat on side s to the plaintext view.
func (s *side) fillAttr(st *syscall.Stat_t, out *fuse.Attr) {
	out.FromStat(st)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		if st.Ino == s.rootIno && uint64(st.Dev) == s.rootDev {
			out.Nlink -= s.hiddenRootDirs(out.Nlink)
		}
	case syscall.S_IFREG:
		out.Size = uint64(s.t.plainSize(st.Size))
	case syscall.S_IFLNK:
		out.Size = uint64(s.linkSize(st))
	}
}

// hiddenRootDirs is the number of subdirectories of the lower root that
// the view does not show (the long-link store, cipher/links): a
// directory's link count counts its subdirectories, so the root's must
// leave them out to be what a native directory with the visible entries
// has. nlink is the lower count, never taken below 2.
func (s *side) hiddenRootDirs(nlink uint32) uint32 {
	if nlink <= 2 || !s.t.hidden(true, links.StoreDir) {
		return 0
	}
	var st syscall.Stat_t
	if fstatat(s.rootFd, links.StoreDir, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return 0
	}
	return 1
}

func (s *side) readlink(a *acct, e entry) ([]byte, syscall.Errno) {
	buf := make([]byte, 4096)
	t0 := a.now()
	n, err := unix.Readlinkat(e.dir, e.name, buf)
	a.lowerSince(t0)
	if err != nil {
		return nil, toErrno(err)
	}
	return s.t.decodeLink(a, s.rootLoc(), buf[:n])
}

// chmodAt changes the mode of name in dir, an entry the daemon has just
// made, without following a symlink (EOPNOTSUPP for one, as fchmodat2
// with AT_SYMLINK_NOFOLLOW). It acts through an O_PATH descriptor of the
// entry and refuses (EPERM) a non-directory with more than one link:
// between the creation and this call, whoever can write LOWER may have
// put under the name a hard link to someone else's file.
func chmodAt(dir int, name string, mode uint32) error {
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return err
	}
	switch {
	case st.Mode&syscall.S_IFMT == syscall.S_IFLNK:
		return unix.EOPNOTSUPP
	case st.Mode&syscall.S_IFMT != syscall.S_IFDIR && st.Nlink > 1:
		return unix.EPERM
	}
	return syscall.Chmod(procFd(fd), mode)
}

// procFd is the /proc path of our descriptor fd: the object itself, even
// for an O_PATH descriptor of a symlink (the magic link is not followed
// any further).
func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }
