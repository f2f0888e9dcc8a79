package fs

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// dirHandle is an open directory. It keeps a descriptor of the lower
// directory so that fstat and fsync keep working after the directory was
// removed or renamed, as they do natively; the listing itself is made on
// the first read (and again after a rewind to the start).
type dirHandle struct {
	n  *node
	fd int

	mu sync.Mutex
	ds fs.DirStream
	// known is set for a listing made while the kernel still holds
	// fresh entries of the directory's children (see Lookup); started
	// is when the listing began, skipped whether it sent an entry
	// without a lookup, looked whether it looked any up (READDIRPLUS).
	known, skipped, looked bool
	started                int64
}

var (
	_ = (fs.NodeOpendirHandler)((*node)(nil))
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileReleasedirer)((*dirHandle)(nil))
	_ = (fs.FileFsyncdirer)((*dirHandle)(nil))
	_ = (fs.FileLookuper)((*dirHandle)(nil))
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fd, _, errno := n.r().main.openNode(untimed, n, syscall.O_RDONLY|syscall.O_DIRECTORY)
	if errno != 0 {
		return nil, 0, errno
	}
	d := &dirHandle{n: n, fd: fd}
	n.r().open.Store(d, nil)
	x := n.extra()
	x.filesMu.Lock()
	x.dirs = append(x.dirs, d)
	x.filesMu.Unlock()
	return d, 0, 0
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.ds == nil {
		ds, errno := d.n.Readdir(ctx)
		if errno != 0 {
			return nil, errno
		}
		d.ds = ds
		d.n.readServed()
		d.started = time.Now().UnixNano()
		d.known, d.skipped, d.looked = d.n.listing(d.started), false, false
	}
	if !d.ds.HasNext() {
		if d.known && d.looked && !d.skipped {
			// Every entry was looked up after all (the kernel had
			// forgotten them): as good as a full listing.
			d.n.listedAt(d.started)
		}
		return nil, 0
	}
	e, errno := d.ds.Next()
	return &e, errno
}

func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == 0 {
		// rewinddir(3): list again, so that changes since are seen.
		d.ds = nil
		return 0
	}
	if d.ds == nil {
		ds, errno := d.n.Readdir(ctx)
		if errno != 0 {
			return errno
		}
		d.ds = ds
	}
	if sd, ok := d.ds.(fs.FileSeekdirer); ok {
		return sd.Seekdir(ctx, off)
	}
	return syscall.ENOTSUP
}

func (d *dirHandle) Releasedir(ctx context.Context, flags uint32) {
	x := d.n.extra()
	x.filesMu.Lock()
	for i, e := range x.dirs {
		if e == d {
			last := len(x.dirs) - 1
			x.dirs[i] = x.dirs[last]
			x.dirs[last] = nil
			x.dirs = x.dirs[:last]
			break
		}
	}
	x.filesMu.Unlock()
	d.n.r().open.Delete(d)
	syscall.Close(d.fd)
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, d, flags)
}

// Lookup answers for each entry of a READDIRPLUS. An entry the kernel
// already holds, fresh, is sent without a lookup (unless its atime is
// stale in the kernel: see nodeExtra.atimeStale) (node ID 0: the kernel
// keeps what it has, fuse_direntplus_link), as a plain READDIR would:
// a warm ls -l then costs no lstat and no new node per file in the
// daemon, and the kernel keeps the entry's cached ACLs, which a
// READDIRPLUS entry would make it drop (and ask GETXATTR again). The
// other entries are looked up, so that a first listing (ls -l, du, find
// of a tree not seen yet) still gets every entry's attributes in one
// round trip.
func (d *dirHandle) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if d.known {
		if ch := d.n.GetChild(name); ch != nil {
			if cn, ok := ch.Operations().(*node); !ok || !cn.kernelAtimeStale() {
				d.skipped = true
				return nil, syscall.EEXIST
			}
		}
	}
	d.looked = true
	return d.n.Lookup(ctx, name, out)
}

// listing starts a listing of directory n at now and reports whether the kernel
// still holds fresh entries (and attributes) of every child that go-fuse
// knows: those of the last full listing, for the first half of their
// lifetime, and those looked up or made since, which are newer. When not,
// the listing looks every entry up, and is the new last full listing.
// Never with shared storage, where a READDIRPLUS is how changes made
// behind the mount reach the kernel.
func (n *node) listing(now int64) bool {
	if n.r().sharedStorage {
		return false
	}
	if last := n.dir().listed.Load(); last != 0 && now-last < int64(n.r().attrTTL/2) {
		return true
	}
	n.listedAt(now)
	return false
}

// listedAt records a full listing of n begun at t.
func (n *node) listedAt(t int64) {
	d := n.dir()
	for {
		last := d.listed.Load()
		if last >= t || d.listed.CompareAndSwap(last, t) {
			return
		}
	}
}
