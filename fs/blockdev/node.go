package blockdev

import (
	"context"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// rootNode is the mount's root: a read-only directory holding the volume.
type rootNode struct {
	fs.Inode
	d *device
}

var (
	_ = (fs.NodeGetattrer)((*rootNode)(nil))
	_ = (fs.NodeLookuper)((*rootNode)(nil))
	_ = (fs.NodeReaddirer)((*rootNode)(nil))
)

func (r *rootNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	o := r.d.begin(measure.OpGetattr, rootIno)
	defer func() { o.end(errno) }()
	out.Mode = syscall.S_IFDIR | 0o755
	out.Nlink = 2
	out.Ino = rootIno
	out.Uid, out.Gid = r.d.uid, r.d.gid
	mtime := time.Unix(0, r.d.mtimeNs.Load())
	out.SetTimes(nil, &mtime, nil)
	return 0
}

func (r *rootNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (_ *fs.Inode, errno syscall.Errno) {
	o := r.d.begin(measure.OpLookup, rootIno)
	defer func() { o.end(errno) }()
	ch := r.GetChild(name)
	if ch == nil {
		return nil, syscall.ENOENT
	}
	r.d.volumeAttr(&out.Attr)
	return ch, 0
}

func (r *rootNode) Readdir(ctx context.Context) (_ fs.DirStream, errno syscall.Errno) {
	o := r.d.begin(measure.OpReaddir, rootIno)
	defer func() { o.end(errno) }()
	return fs.NewListDirStream([]fuse.DirEntry{{Name: VolumeName, Mode: syscall.S_IFREG, Ino: volumeIno}}), 0
}

// volumeNode is the decrypted volume. It has no file handles: every open
// of it reads and writes the one image, and the kernel keeps no state per
// open that the daemon would need.
type volumeNode struct {
	fs.Inode
	d *device
}

var (
	_ = (fs.NodeGetattrer)((*volumeNode)(nil))
	_ = (fs.NodeSetattrer)((*volumeNode)(nil))
	_ = (fs.NodeOpener)((*volumeNode)(nil))
	_ = (fs.NodeReader)((*volumeNode)(nil))
	_ = (fs.NodeWriter)((*volumeNode)(nil))
	_ = (fs.NodeFlusher)((*volumeNode)(nil))
	_ = (fs.NodeFsyncer)((*volumeNode)(nil))
	_ = (fs.NodeAllocater)((*volumeNode)(nil))
)

// volumeAttr fills the attributes of the volume file. Its size is the
// payload size, fixed for the life of the mount.
func (d *device) volumeAttr(a *fuse.Attr) {
	a.Mode = syscall.S_IFREG | 0o600
	a.Nlink = 1
	a.Ino = volumeIno
	a.Size = uint64(d.l.size)
	a.Blocks = a.Size / 512
	a.Blksize = maxSectorSize
	a.Uid, a.Gid = d.uid, d.gid
	mtime := time.Unix(0, d.mtimeNs.Load())
	a.SetTimes(nil, &mtime, &mtime)
}

func (v *volumeNode) Getattr(ctx context.Context, fh fs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	o := v.d.begin(measure.OpGetattr, volumeIno)
	defer func() { o.end(errno) }()
	v.d.volumeAttr(&out.Attr)
	return 0
}

// Setattr refuses what a block device cannot do: change its size, owner
// or mode. Times are accepted and ignored (touch works); a "truncate" to
// the current size is a no-op.
func (v *volumeNode) Setattr(ctx context.Context, fh fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) (errno syscall.Errno) {
	o := v.d.begin(measure.OpSetattr, volumeIno)
	defer func() { o.end(errno) }()
	if size, ok := in.GetSize(); ok && size != uint64(v.d.l.size) {
		return syscall.EPERM
	}
	if in.Valid&(fuse.FATTR_MODE|fuse.FATTR_UID|fuse.FATTR_GID) != 0 {
		return syscall.EPERM
	}
	v.d.volumeAttr(&out.Attr)
	return 0
}

func (v *volumeNode) Open(ctx context.Context, flags uint32) (_ fs.FileHandle, _ uint32, errno syscall.Errno) {
	o := v.d.begin(measure.OpOpen, volumeIno)
	defer func() { o.end(errno) }()
	if v.d.readOnly && flags&syscall.O_ACCMODE != syscall.O_RDONLY {
		return nil, 0, syscall.EROFS
	}
	// No FOPEN_KEEP_CACHE: an open drops the kernel's cached pages of the
	// volume, so a reader never sees pages from before an image was
	// changed behind the mount (tests do that; nobody else should).
	return nil, 0, 0
}

func (v *volumeNode) Read(ctx context.Context, fh fs.FileHandle, dest []byte, off int64) (_ fuse.ReadResult, errno syscall.Errno) {
	o := v.d.begin(measure.OpRead, volumeIno)
	defer func() { o.end(errno) }()
	n, errno := v.d.read(&o, dest, off)
	o.io(off, n)
	if errno != 0 {
		return nil, errno
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (v *volumeNode) Write(ctx context.Context, fh fs.FileHandle, data []byte, off int64) (_ uint32, errno syscall.Errno) {
	o := v.d.begin(measure.OpWrite, volumeIno)
	defer func() { o.end(errno) }()
	n, errno := v.d.write(&o, data, off)
	o.io(off, n)
	return uint32(n), errno
}

// fsyncFdatasync is FUSE_FSYNC_FDATASYNC, bit 0 of fsync_flags.
const fsyncFdatasync = 1

func (v *volumeNode) Fsync(ctx context.Context, fh fs.FileHandle, flags uint32) (errno syscall.Errno) {
	o := v.d.begin(measure.OpFsync, volumeIno)
	defer func() { o.end(errno) }()
	return v.d.fsync(&o, flags&fsyncFdatasync != 0)
}

// Flush (every close(2)) syncs the image, as the last close of a block
// device flushes it: what was written through a descriptor is on disk
// when the descriptor is closed.
func (v *volumeNode) Flush(ctx context.Context, fh fs.FileHandle) (errno syscall.Errno) {
	o := v.d.begin(measure.OpFlush, volumeIno)
	defer func() { o.end(errno) }()
	return v.d.fsync(&o, true)
}

// Allocate accepts plain preallocation inside the volume (passed to the
// image, which may be sparse) and refuses the rest. Punching a hole or
// zeroing a range would have to write encrypted zeros, not a hole; with
// EOPNOTSUPP the loop driver reports discard as unsupported and the block
// layer writes zeros itself.
func (v *volumeNode) Allocate(ctx context.Context, fh fs.FileHandle, off uint64, size uint64, mode uint32) (errno syscall.Errno) {
	o := v.d.begin(measure.OpFallocate, volumeIno)
	defer func() { o.end(errno) }()
	o.io(int64(off), int(size))
	if mode&^unix.FALLOC_FL_KEEP_SIZE != 0 {
		return syscall.EOPNOTSUPP
	}
	if v.d.readOnly {
		return syscall.EROFS
	}
	if off+size > uint64(v.d.l.size) || off+size < off {
		return syscall.ENOSPC
	}
	t0 := o.now()
	defer o.lowerSince(t0)
	return v.d.control(func(fd int) error {
		return unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, v.d.l.cOff+int64(off), int64(size))
	})
}
