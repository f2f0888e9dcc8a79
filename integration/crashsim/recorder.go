package crashsim

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Recorder is a go-fuse loopback of a backing directory that logs every
// mutating call made through it, once Start has been called: writes (one
// OpWrite per page, with the bytes, plus OpSetSize when the file grows),
// truncates, creates, links, renames, unlinks, xattrs, mode and owner
// changes, and the barriers (FSYNC, FSYNCDIR). twincrypt's LOWER is the
// Recorder's mount point; the backing directory stays a plain directory.
type Recorder struct {
	Backing string
	Mnt     string

	srv *fuse.Server

	mu    sync.Mutex
	on    bool
	ops   []Op
	ids   map[uint64]ID
	next  ID
	start *Tree
}

// NewRecorder serves backing at mnt (an empty directory). Close unmounts.
func NewRecorder(backing, mnt string) (*Recorder, error) {
	r := &Recorder{Backing: backing, Mnt: mnt}
	root, err := gofs.NewLoopbackRoot(backing)
	if err != nil {
		return nil, err
	}
	srv, err := gofs.Mount(mnt, &recNode{LoopbackNode: root.(*gofs.LoopbackNode), r: r}, &gofs.Options{
		MountOptions: fuse.MountOptions{FsName: "crashsim", Name: "crashsim", DirectMount: os.Geteuid() == 0,
			DisableSplice: true},
	})
	if err != nil {
		return nil, fmt.Errorf("mount the recorder at %s: %w", mnt, err)
	}
	if err := srv.WaitMount(); err != nil {
		srv.Unmount()
		return nil, err
	}
	r.srv = srv
	return r, nil
}

// Close unmounts the recorder.
func (r *Recorder) Close() error {
	if r.srv == nil {
		return nil
	}
	// Retried for a minute: the last RELEASEs of a workload's files
	// reach the recorder late on a loaded machine.
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = r.srv.Unmount(); err == nil {
			r.srv = nil
			return nil
		}
	}
	// Still busy: something of this process holds a file on it. Abort
	// the connection before detaching it, or the exit of this process
	// (which serves the mount) would wait for ever on the FLUSH of that
	// file's close.
	var st syscall.Stat_t
	if serr := syscall.Stat(r.Mnt, &st); serr == nil {
		minor := (st.Dev & 0xff) | ((st.Dev >> 12) & 0xfff00)
		os.WriteFile(fmt.Sprintf("/sys/fs/fuse/connections/%d/abort", minor), []byte("1"), 0)
	}
	syscall.Unmount(r.Mnt, syscall.MNT_DETACH)
	r.srv = nil
	return fmt.Errorf("unmount the recorder at %s: %w (aborted and detached)", r.Mnt, err)
}

// Start snapshots the backing directory (the state before the workload,
// durable by definition) and starts logging.
func (r *Recorder) Start() (*Tree, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var st syscall.Stat_t
	if err := syscall.Lstat(r.Backing, &st); err != nil {
		return nil, err
	}
	r.ids = map[uint64]ID{}
	r.next = 1
	t, err := LoadTree(r.Backing, func(ino uint64) ID {
		if id, ok := r.ids[ino]; ok {
			return id
		}
		r.ids[ino] = r.next
		r.next++
		return r.next - 1
	})
	if err != nil {
		return nil, err
	}
	r.ops, r.on, r.start = nil, true, t
	return t.Clone(), nil
}

// Stop stops logging and returns the log.
func (r *Recorder) Stop() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.on = false
	return r.ops
}

// Len is the number of operations logged so far: a position in the log.
func (r *Recorder) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ops)
}

// Sync logs a sync(2): the backing filesystem of a real LOWER gets it from
// the kernel, a FUSE filesystem (this one, twincrypt) does not.
func (r *Recorder) Sync() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.on {
		r.ops = append(r.ops, Op{Kind: OpSync})
	}
}

// idOf is the ID of the inode behind ino; a new one for an inode created
// by the op being logged (fresh), also when its number is reused.
func (r *Recorder) idOf(in *gofs.Inode, fresh bool) ID {
	if in.IsRoot() {
		return 0
	}
	ino := in.StableAttr().Ino
	if id, ok := r.ids[ino]; ok && !fresh {
		return id
	}
	r.ids[ino] = r.next
	r.next++
	return r.next - 1
}

func (r *Recorder) log(ops ...Op) {
	r.ops = append(r.ops, ops...)
}

// recNode is the loopback node that logs.
type recNode struct {
	*gofs.LoopbackNode
	r *Recorder
}

var (
	_ = (gofs.NodeWrapChilder)((*recNode)(nil))
	_ = (gofs.NodeOpener)((*recNode)(nil))
	_ = (gofs.NodeCreater)((*recNode)(nil))
	_ = (gofs.NodeMknoder)((*recNode)(nil))
	_ = (gofs.NodeMkdirer)((*recNode)(nil))
	_ = (gofs.NodeSymlinker)((*recNode)(nil))
	_ = (gofs.NodeLinker)((*recNode)(nil))
	_ = (gofs.NodeUnlinker)((*recNode)(nil))
	_ = (gofs.NodeRmdirer)((*recNode)(nil))
	_ = (gofs.NodeRenamer)((*recNode)(nil))
	_ = (gofs.NodeSetattrer)((*recNode)(nil))
	_ = (gofs.NodeSetxattrer)((*recNode)(nil))
	_ = (gofs.NodeRemovexattrer)((*recNode)(nil))
	_ = (gofs.NodeOpendirHandler)((*recNode)(nil))
	_ = (gofs.NodeStatxer)((*recNode)(nil))
	_ = (gofs.NodeCopyFileRanger)((*recNode)(nil))
)

func (n *recNode) WrapChild(ctx context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	return &recNode{LoopbackNode: ops.(*gofs.LoopbackNode), r: n.r}
}

func (n *recNode) self() *gofs.Inode { return n.EmbeddedInode() }

func (n *recNode) created(ch *gofs.Inode, name string, typ, mode uint32, op Op) {
	if !n.r.on {
		return
	}
	op.Kind, op.Dir, op.Name, op.Type, op.Mode = OpCreate, n.r.idOf(n.self(), false), name, typ, mode&07777
	op.Ino = n.r.idOf(ch, true)
	var st syscall.Stat_t
	if syscall.Lstat(filepath.Join(n.r.Backing, n.self().Path(nil), name), &st) == nil {
		op.Mode, op.UID, op.GID = st.Mode&07777, int(st.Uid), int(st.Gid)
	}
	n.r.log(op)
}

func (n *recNode) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	ch, errno := n.LoopbackNode.Mknod(ctx, name, mode, rdev, out)
	if errno == 0 {
		n.created(ch, name, mode&syscall.S_IFMT, mode, Op{Rdev: rdev})
	}
	return ch, errno
}

func (n *recNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno == 0 {
		n.created(ch, name, syscall.S_IFDIR, mode, Op{})
	}
	return ch, errno
}

func (n *recNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	ch, errno := n.LoopbackNode.Symlink(ctx, target, name, out)
	if errno == 0 {
		n.created(ch, name, syscall.S_IFLNK, 0777, Op{Target: target})
	}
	return ch, errno
}

func (n *recNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	var st syscall.Stat_t
	existed := syscall.Lstat(filepath.Join(n.r.Backing, n.self().Path(nil), name), &st) == nil
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	if !existed {
		n.created(ch, name, syscall.S_IFREG, mode, Op{})
	} else if flags&syscall.O_TRUNC != 0 && n.r.on && st.Size > 0 {
		n.r.log(Op{Kind: OpTruncate, Ino: n.r.idOf(ch, false), Size: 0})
	}
	return ch, &recFile{LoopbackFile: fh.(*gofs.LoopbackFile), n: ch, r: n.r}, fl, 0
}

func (n *recNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	var st syscall.Stat_t
	trunc := flags&syscall.O_TRUNC != 0 && flags&syscall.O_ACCMODE != syscall.O_RDONLY &&
		syscall.Lstat(filepath.Join(n.r.Backing, n.self().Path(nil)), &st) == nil && st.Size > 0
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	if trunc && n.r.on {
		n.r.log(Op{Kind: OpTruncate, Ino: n.r.idOf(n.self(), false), Size: 0})
	}
	return &recFile{LoopbackFile: fh.(*gofs.LoopbackFile), n: n.self(), r: n.r}, fl, 0
}

func (n *recNode) Link(ctx context.Context, target gofs.InodeEmbedder, name string, out *fuse.EntryOut) (*gofs.Inode, syscall.Errno) {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	ch, errno := n.LoopbackNode.Link(ctx, target, name, out)
	if errno == 0 && n.r.on {
		n.r.log(Op{Kind: OpLink, Dir: n.r.idOf(n.self(), false), Name: name, Ino: n.r.idOf(target.EmbeddedInode(), false)})
	}
	return ch, errno
}

func (n *recNode) Unlink(ctx context.Context, name string) syscall.Errno {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	errno := n.LoopbackNode.Unlink(ctx, name)
	if errno == 0 && n.r.on {
		n.r.log(Op{Kind: OpUnlink, Dir: n.r.idOf(n.self(), false), Name: name})
	}
	return errno
}

func (n *recNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	errno := n.LoopbackNode.Rmdir(ctx, name)
	if errno == 0 && n.r.on {
		n.r.log(Op{Kind: OpUnlink, Dir: n.r.idOf(n.self(), false), Name: name})
	}
	return errno
}

func (n *recNode) Rename(ctx context.Context, name string, newParent gofs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	np := newParent
	if rn, ok := newParent.(*recNode); ok {
		np = rn.LoopbackNode
	}
	errno := n.LoopbackNode.Rename(ctx, name, np, newName, flags)
	if errno == 0 && n.r.on {
		n.r.log(Op{Kind: OpRename, Dir: n.r.idOf(n.self(), false), Name: name,
			Dir2: n.r.idOf(newParent.EmbeddedInode(), false), Name2: newName, Flags: flags})
	}
	return errno
}

func (n *recNode) Setattr(ctx context.Context, f gofs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	if rf, ok := f.(*recFile); ok {
		f = rf.LoopbackFile
	}
	var before syscall.Stat_t
	p := filepath.Join(n.r.Backing, n.self().Path(nil))
	syscall.Lstat(p, &before)
	errno := n.LoopbackNode.Setattr(ctx, f, in, out)
	if errno != 0 || !n.r.on {
		return errno
	}
	id := n.r.idOf(n.self(), false)
	if m, ok := in.GetMode(); ok {
		n.r.log(Op{Kind: OpChmod, Ino: id, Mode: m & 07777})
	}
	uid, uok := in.GetUID()
	gid, gok := in.GetGID()
	if uok || gok {
		var st syscall.Stat_t
		syscall.Lstat(p, &st)
		_, _ = uid, gid
		n.r.log(Op{Kind: OpChown, Ino: id, UID: int(st.Uid), GID: int(st.Gid)})
	}
	if sz, ok := in.GetSize(); ok {
		n.r.log(Op{Kind: OpTruncate, Ino: id, Size: int64(sz)})
	}
	_, mok := in.GetMTime()
	_, aok := in.GetATime()
	if mok || aok {
		n.r.log(Op{Kind: OpUtimes, Ino: id})
	}
	return 0
}

func (n *recNode) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	errno := n.LoopbackNode.Setxattr(ctx, attr, data, flags)
	if errno == 0 && n.r.on {
		n.r.log(Op{Kind: OpSetxattr, Ino: n.r.idOf(n.self(), false), Xattr: attr, Data: append([]byte(nil), data...)})
	}
	return errno
}

func (n *recNode) Removexattr(ctx context.Context, attr string) syscall.Errno {
	n.r.mu.Lock()
	defer n.r.mu.Unlock()
	errno := n.LoopbackNode.Removexattr(ctx, attr)
	if errno == 0 && n.r.on {
		n.r.log(Op{Kind: OpRemovexattr, Ino: n.r.idOf(n.self(), false), Xattr: attr})
	}
	return errno
}

// CopyFileRange is refused: the kernel falls back to reads and writes,
// which are logged.
func (n *recNode) CopyFileRange(ctx context.Context, fhIn gofs.FileHandle, offIn uint64, out *gofs.Inode, fhOut gofs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP
}

// Statx is refused, so that the kernel falls back to GETATTR: go-fuse's
// loopback Statx follows symlinks (see fs/faults_test.go).
func (n *recNode) Statx(ctx context.Context, f gofs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return syscall.ENOSYS
}

func (n *recNode) OpendirHandle(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return &recDir{ds: fh.(loopbackDir), n: n.self(), r: n.r}, fl, 0
}

type loopbackDir interface {
	gofs.FileReaddirenter
	gofs.FileReleasedirer
	gofs.FileSeekdirer
	gofs.FileFsyncdirer
}

// recDir is an open directory; it logs FSYNCDIR.
type recDir struct {
	ds loopbackDir
	n  *gofs.Inode
	r  *Recorder
}

var _ = (loopbackDir)((*recDir)(nil))

func (d *recDir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	return d.ds.Readdirent(ctx)
}
func (d *recDir) Releasedir(ctx context.Context, flags uint32) { d.ds.Releasedir(ctx, flags) }
func (d *recDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	return d.ds.Seekdir(ctx, off)
}
func (d *recDir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.r.mu.Lock()
	defer d.r.mu.Unlock()
	errno := d.ds.Fsyncdir(ctx, flags)
	if errno == 0 && d.r.on {
		d.r.log(Op{Kind: OpFsyncDir, Ino: d.r.idOf(d.n, false)})
	}
	return errno
}

// recFile is an open file; it logs writes, fsync and fallocate.
type recFile struct {
	*gofs.LoopbackFile
	n *gofs.Inode
	r *Recorder
}

var (
	_ = (gofs.FileWriter)((*recFile)(nil))
	_ = (gofs.FileWritever)((*recFile)(nil))
	_ = (gofs.FileFsyncer)((*recFile)(nil))
	_ = (gofs.FileAllocater)((*recFile)(nil))
)

func (f *recFile) size() int64 {
	var out fuse.AttrOut
	if f.LoopbackFile.Getattr(context.Background(), &out) != 0 {
		return -1
	}
	return int64(out.Size)
}

func (f *recFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	size0 := f.size()
	n, errno := f.LoopbackFile.Write(ctx, data, off)
	if n > 0 && f.r.on {
		id := f.r.idOf(f.n, false)
		f.r.log(splitPages(id, off, data[:n])...)
		if end := off + int64(n); end > size0 {
			f.r.log(Op{Kind: OpSetSize, Ino: id, Size: end})
		}
	}
	return n, errno
}

func (f *recFile) Writev(ctx context.Context, iov [][]byte, off int64) (uint32, syscall.Errno) {
	var data []byte
	for _, b := range iov {
		data = append(data, b...)
	}
	return f.Write(ctx, data, off)
}

func (f *recFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	errno := f.LoopbackFile.Fsync(ctx, flags)
	if errno == 0 && f.r.on {
		f.r.log(Op{Kind: OpFsync, Ino: f.r.idOf(f.n, false), Datasync: flags&1 != 0})
	}
	return errno
}

// Allocate: new blocks read as zeros, so only a size change (no
// FALLOC_FL_KEEP_SIZE) and zeroed ranges (punch hole, zero range) are
// logged.
func (f *recFile) Allocate(ctx context.Context, off uint64, sz uint64, mode uint32) syscall.Errno {
	f.r.mu.Lock()
	defer f.r.mu.Unlock()
	size0 := f.size()
	errno := f.LoopbackFile.Allocate(ctx, off, sz, mode)
	if errno != 0 || !f.r.on {
		return errno
	}
	id := f.r.idOf(f.n, false)
	const punchHole, zeroRange = 0x02, 0x10
	if mode&(punchHole|zeroRange) != 0 {
		end := int64(off + sz)
		if mode&punchHole != 0 && end > size0 {
			end = size0
		}
		if end > int64(off) {
			f.r.log(splitPages(id, int64(off), make([]byte, end-int64(off)))...)
		}
	}
	if size1 := f.size(); size1 != size0 {
		f.r.log(Op{Kind: OpTruncate, Ino: id, Size: size1})
	}
	return 0
}

// PassthroughFd is refused: kernel passthrough would bypass the log.
func (f *recFile) PassthroughFd() (int, bool) { return 0, false }
