package fs

import (
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

var (
	_ = (fs.NodeMkdirer)((*node)(nil))
	_ = (fs.NodeRmdirer)((*node)(nil))
	_ = (fs.NodeUnlinker)((*node)(nil))
	_ = (fs.NodeRenamer)((*node)(nil))
	_ = (fs.NodeSymlinker)((*node)(nil))
	_ = (fs.NodeReadlinker)((*node)(nil))
	_ = (fs.NodeLinker)((*node)(nil))
	_ = (fs.NodeMknoder)((*node)(nil))
	_ = (fs.NodeReaddirer)((*node)(nil))
)

// preserveOwner gives a new lower entry the caller's uid and gid when the
// daemon runs as root (as go-fuse's loopback does).
func preserveOwner(ctx context.Context, path string) {
	if syscall.Geteuid() != 0 {
		return
	}
	if caller, ok := fuse.FromContext(ctx); ok {
		unix.Lchown(path, int(caller.Uid), int(caller.Gid))
	}
}

// create runs mk to make the lower entry for name in n, with the long-name
// sidecar written first and removed again if mk fails, then registers it.
func (n *node) create(ctx context.Context, name string, out *fuse.EntryOut, mk func(path string) error) (*fs.Inode, string, syscall.Errno) {
	dirPath, lower, long, errno := n.childPath(name)
	if errno != 0 {
		return nil, "", errno
	}
	if errno := n.r.t.writeLong(dirPath, lower, long); errno != 0 {
		return nil, "", errno
	}
	p := dirPath + "/" + lower
	if err := mk(p); err != nil {
		if long != "" && err != syscall.EEXIST {
			n.r.t.dropLong(dirPath, lower)
		}
		return nil, "", toErrno(err)
	}
	preserveOwner(ctx, p)
	var st syscall.Stat_t
	gen, err := lstatGen(p, &st)
	if err != nil {
		return nil, "", toErrno(err)
	}
	ch := n.newChild(ctx, p, &st, gen, out)
	if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
		// A new directory has a new IV, even should its inode number and
		// birth time match a node that is still cached.
		cn := ch.Operations().(*node)
		cn.dirIVMu.Lock()
		cn.dirIVCache = nil
		cn.dirIVMu.Unlock()
	}
	return ch, p, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, _, errno := n.create(ctx, name, out, func(p string) error {
		// Made private first, so that the directory IV can be written
		// even when mode has no write bit, then given its real mode.
		if err := syscall.Mkdir(p, 0700); err != nil {
			return err
		}
		if errno := n.r.t.newDir(p); errno != 0 {
			syscall.Rmdir(p)
			return errno
		}
		return syscall.Chmod(p, mode&07777)
	})
	return ch, errno
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	dirPath, lower, _, errno := n.childPath(name)
	if errno != 0 {
		return errno
	}
	p := dirPath + "/" + lower
	restore, errno := n.clearDirMeta(p)
	if errno != 0 {
		return errno
	}
	if err := syscall.Rmdir(p); err != nil {
		restore()
		return toErrno(err)
	}
	n.r.t.dropLong(dirPath, lower)
	return 0
}

// clearDirMeta prepares the lower directory at path for removal (rmdir,
// or rename over it): the lower directory holds our metadata even when the
// plaintext one is empty. It returns ENOTEMPTY unless only metadata is
// there, removes it, and returns a function that puts it back should the
// removal still fail.
func (n *node) clearDirMeta(path string) (restore func(), errno syscall.Errno) {
	meta := n.r.t.dirMeta()
	if len(meta) == 0 {
		return func() {}, 0
	}
	if errno := lowerDirEmpty(path, meta); errno != 0 {
		return nil, errno
	}
	saved := make(map[string][]byte, len(meta))
	for _, m := range meta {
		if b, err := readSmallFile(path+"/"+m, 4096); err == nil {
			saved[m] = b
		}
		syscall.Unlink(path + "/" + m)
	}
	return func() {
		for m, b := range saved {
			writeSmallFile(path+"/"+m, b, 0400)
		}
	}, 0
}

// lowerDirEmpty returns ENOTEMPTY unless the directory holds only meta.
func lowerDirEmpty(path string, meta []string) syscall.Errno {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return toErrno(err)
	}
	defer syscall.Close(fd)
	buf := make([]byte, 4096)
	for {
		nb, err := syscall.ReadDirent(fd, buf)
		if err != nil {
			return toErrno(err)
		}
		if nb == 0 {
			return 0
		}
		_, _, names := syscall.ParseDirent(buf[:nb], -1, nil)
	next:
		for _, name := range names {
			for _, m := range meta {
				if name == m {
					continue next
				}
			}
			return syscall.ENOTEMPTY
		}
	}
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	dirPath, lower, _, errno := n.childPath(name)
	if errno != 0 {
		return errno
	}
	if err := syscall.Unlink(dirPath + "/" + lower); err != nil {
		return toErrno(err)
	}
	n.r.t.dropLong(dirPath, lower)
	return 0
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	np, ok := newParent.(*node)
	if !ok || np.r != n.r {
		return syscall.EXDEV
	}
	dirPath, lower, long, errno := n.childPath(name)
	if errno != 0 {
		return errno
	}
	newDirPath, newLower, newLong, errno := np.childPath(newName)
	if errno != 0 {
		return errno
	}
	if errno := n.r.t.writeLong(newDirPath, newLower, newLong); errno != 0 {
		return errno
	}
	if flags&unix.RENAME_EXCHANGE != 0 {
		// Both names stay in use: each needs its sidecar in the other
		// directory.
		if errno := n.r.t.writeLong(dirPath, lower, long); errno != 0 {
			return errno
		}
	}
	oldPath, newPath := dirPath+"/"+lower, newDirPath+"/"+newLower
	restore := func() {}
	if flags&unix.RENAME_EXCHANGE == 0 {
		var st, newSt syscall.Stat_t
		if syscall.Lstat(oldPath, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFDIR &&
			syscall.Lstat(newPath, &newSt) == nil && newSt.Mode&syscall.S_IFMT == syscall.S_IFDIR && st.Ino != newSt.Ino {
			// A directory replacing an empty one.
			if restore, errno = n.clearDirMeta(newPath); errno != 0 {
				return errno
			}
		}
	}
	err := unix.Renameat2(unix.AT_FDCWD, oldPath, unix.AT_FDCWD, newPath, uint(flags))
	if err != nil {
		restore()
		if newLong != "" && flags&unix.RENAME_EXCHANGE == 0 {
			// Only drop a sidecar nobody else uses.
			var st syscall.Stat_t
			if syscall.Lstat(newDirPath+"/"+newLower, &st) != nil {
				n.r.t.dropLong(newDirPath, newLower)
			}
		}
		return toErrno(err)
	}
	if flags&unix.RENAME_EXCHANGE == 0 && (dirPath != newDirPath || lower != newLower) {
		n.r.t.dropLong(dirPath, lower)
	}
	return 0
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	cTarget, errno := n.r.t.encodeLink(target)
	if errno != 0 {
		return nil, errno
	}
	ch, _, errno := n.create(ctx, name, out, func(p string) error {
		return syscall.Symlink(cTarget, p)
	})
	return ch, errno
}

func (n *node) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	p, errno := n.lowerPath()
	if errno != 0 {
		return nil, errno
	}
	target, errno := n.r.readlink(p)
	if errno == syscall.EIO {
		n.r.log.Warn().Str("lower", p).Msg("symlink target does not decrypt: EIO")
	}
	return target, errno
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	tn, ok := target.(*node)
	if !ok || tn.r != n.r {
		return nil, syscall.EXDEV
	}
	oldPath, errno := tn.lowerPath()
	if errno != 0 {
		return nil, errno
	}
	ch, _, errno := n.create(ctx, name, out, func(p string) error {
		return syscall.Link(oldPath, p)
	})
	return ch, errno
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	ch, _, errno := n.create(ctx, name, out, func(p string) error {
		return syscall.Mknod(p, mode, int(rdev))
	})
	return ch, errno
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	p, errno := n.lowerPath()
	if errno != 0 {
		return nil, errno
	}
	fd, err := syscall.Open(p, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, toErrno(err)
	}
	defer syscall.Close(fd)
	var entries []fuse.DirEntry
	buf := make([]byte, 32<<10)
	for {
		nb, err := unix.Getdents(fd, buf)
		if err != nil {
			return nil, toErrno(err)
		}
		if nb == 0 {
			break
		}
		for b := buf[:nb]; len(b) > 0; {
			ino, typ, name, reclen := parseDirent(b)
			b = b[reclen:]
			if name == "." || name == ".." {
				continue
			}
			plain, ok := n.r.t.plainName(n, p, name)
			if !ok {
				continue
			}
			entries = append(entries, fuse.DirEntry{Name: plain, Ino: ino, Mode: uint32(typ) << 12})
		}
	}
	return fs.NewListDirStream(entries), 0
}
