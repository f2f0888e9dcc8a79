package fs

import (
	"context"
	"sync"
	"syscall"

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
}

var (
	_ = (fs.NodeOpendirHandler)((*node)(nil))
	_ = (fs.FileReaddirenter)((*dirHandle)(nil))
	_ = (fs.FileSeekdirer)((*dirHandle)(nil))
	_ = (fs.FileReleasedirer)((*dirHandle)(nil))
	_ = (fs.FileFsyncdirer)((*dirHandle)(nil))
)

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fd, _, errno := n.r.main.openNode(untimed, n, syscall.O_RDONLY|syscall.O_DIRECTORY)
	if errno != 0 {
		return nil, 0, errno
	}
	d := &dirHandle{n: n, fd: fd}
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
	}
	if !d.ds.HasNext() {
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
	syscall.Close(d.fd)
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.Fsync(ctx, d, flags)
}
