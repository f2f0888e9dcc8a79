package fs

import (
	"crypto/rand"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// side is one place where the operations of the mounted view are carried
// out: the mount's lower directory through its transform, and in mirror
// mode also a plaintext twin directory through the null transform. The
// operation code is written once against a side.
type side struct {
	lower string
	t     transform
	io    contentIO
}

// root is shared by all nodes of one mount.
type root struct {
	main *side
	// twin is the mirror side (mirror mode), nil otherwise.
	twin *side
	dev  uint64
	log  zerolog.Logger
	rec  *measure.Recorder
	// kernelPassthrough hands open files to the kernel (twin only).
	kernelPassthrough bool
	rootNode          *node
}

// node is one file, directory, symlink or special file of the mounted view.
// It holds no lower path: the path is rebuilt from the parent chain on each
// operation, so renames anywhere above a node need no bookkeeping.
type node struct {
	fs.Inode
	r *root

	// io is the content state of a regular file (see ioState).
	io ioState

	// dirIVMu guards dirIVCache, the directory IV of a directory node.
	dirIVMu    sync.Mutex
	dirIVCache []byte
}

func (n *node) isRoot() bool { return n == n.r.rootNode }

func (n *node) ino() uint64 { return n.StableAttr().Ino }

func toErrno(err error) syscall.Errno { return fs.ToErrno(err) }

func randRead(b []byte) {
	if _, err := rand.Read(b); err != nil {
		panic("no randomness: " + err.Error())
	}
}

// path returns the path of n on side s. With encrypted names the whole
// walk up the parent chain counts as crypto time (the name transform: EME
// per component, and the first read of each directory's IV): one pair of
// clock reads per operation rather than one per component.
func (s *side) path(a *acct, n *node) (string, syscall.Errno) {
	if !a.on || !s.t.namesCost() {
		return s.walk(n)
	}
	t0 := time.Now()
	p, errno := s.walk(n)
	a.crypto += time.Since(t0)
	return p, errno
}

var untimed = &acct{}

func (s *side) walk(n *node) (string, syscall.Errno) {
	if n.isRoot() {
		return s.lower, 0
	}
	name, parent := n.Parent()
	if parent == nil {
		// Unlinked while open: only its file handles still reach it.
		return "", syscall.ENOENT
	}
	pn := parent.Operations().(*node)
	dirPath, errno := s.walk(pn)
	if errno != 0 {
		return "", errno
	}
	lower, _, errno := s.t.lowerName(untimed, pn, dirPath, name)
	if errno != 0 {
		return "", errno
	}
	return dirPath + "/" + lower, 0
}

// child returns the path on side s of the entry name in directory n, and
// the long name to keep in a sidecar when the entry is created.
func (s *side) child(a *acct, n *node, name string) (dirPath, lower, long string, errno syscall.Errno) {
	var t0 time.Time
	timed := a.on && s.t.namesCost()
	if timed {
		t0 = time.Now()
	}
	dirPath, errno = s.walk(n)
	if errno == 0 {
		lower, long, errno = s.t.lowerName(untimed, n, dirPath, name)
	}
	if timed {
		a.crypto += time.Since(t0)
	}
	return
}

// dirIV returns the IV of directory n, whose lower path is path. Only the
// mount's own side has directory IVs, so the cache lives in the node.
func (n *node) dirIV(a *acct, t transform, path string) ([]byte, syscall.Errno) {
	n.dirIVMu.Lock()
	defer n.dirIVMu.Unlock()
	if n.dirIVCache != nil {
		return n.dirIVCache, 0
	}
	iv, errno := t.readDirIV(a, path)
	if errno == 0 {
		n.dirIVCache = iv
	}
	return iv, errno
}

func (r *root) newNode() *node { return &node{r: r} }

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

// lstatGen is lstat(2) that also returns a generation from the birth time.
func (a *acct) lstatGen(path string, st *syscall.Stat_t) (gen uint64, err error) {
	t0 := a.now()
	defer a.lowerSince(t0)
	var x unix.Statx_t
	err = unix.Statx(unix.AT_FDCWD, path, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &x)
	if err == unix.ENOSYS {
		return 1, syscall.Lstat(path, st)
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

func (a *acct) lstat(path string, st *syscall.Stat_t) error {
	t0 := a.now()
	err := syscall.Lstat(path, st)
	a.lowerSince(t0)
	return err
}

// fillAttr converts a lower stat on side s to the plaintext view.
func (s *side) fillAttr(a *acct, path string, st *syscall.Stat_t, out *fuse.Attr) {
	out.FromStat(st)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		out.Size = uint64(s.t.plainSize(st.Size))
	case syscall.S_IFLNK:
		out.Size = uint64(s.t.linkSize(st.Size))
	}
}

func (s *side) readlink(a *acct, path string) ([]byte, syscall.Errno) {
	buf := make([]byte, 4096)
	t0 := a.now()
	n, err := syscall.Readlink(path, buf)
	a.lowerSince(t0)
	if err != nil {
		return nil, toErrno(err)
	}
	return s.t.decodeLink(a, buf[:n])
}
