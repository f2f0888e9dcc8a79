package fs

import (
	"context"
	"io"
	"math"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/names"
)

// dirHandle is an open directory. It keeps a descriptor of the lower
// directory so that fstat and fsync keep working after the directory was
// removed or renamed, as they do natively. A listing streams: the entries
// are read from the lower directory a batch at a time (readdirBatch) as
// the kernel asks for them, so that an open directory holds one batch,
// not its whole listing, however big the directory. An entry's offset is
// the lower filesystem's own (its d_off), so a seekdir(3) to a
// telldir(3) position lands where it does on the lower filesystem,
// across changes made meanwhile, as on a native directory.
type dirHandle struct {
	n  *node
	fd int

	mu sync.Mutex
	// The current pass over the entries (inPass is false before the
	// first read and after a rewind): the batch read last, in plaintext,
	// and the entries' lower names, the index of the next entry to hand
	// out, whether the lower directory has no more and whether a batch
	// was read in this pass. lastName and
	// lastLower are the entry handed out last, which go-fuse looks up
	// next in a READDIRPLUS (Lookup); loc is the lower directory.
	inPass, eof, filled bool
	batch               []fuse.DirEntry
	lower               []string
	next                int
	lastName, lastLower string
	loc                 dirLoc
	// known is set for a listing made while the kernel still holds
	// fresh entries of the directory's children (see Lookup); started
	// is when the listing began, skipped whether it sent an entry
	// without a lookup. listed counts the entries handed to go-fuse
	// ("." and ".." aside), looked those it looked up: a READDIRPLUS
	// looks up each entry it sends, a plain READDIR (which the kernel
	// asks instead with READDIRPLUS_AUTO) none.
	// partial is set once a seek skipped entries of this pass.
	known, skipped, partial bool
	listed, looked          int
	started                 int64
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
	return d, n.dirOpenFlags(fd), 0
}

// dirOpenFlags are the OPENDIR reply's flags for n. Unless LOWER is
// shared, the kernel keeps a full listing of a directory in its page
// cache (FOPEN_CACHE_DIR, and FOPEN_KEEP_CACHE so that the next opendir
// keeps it too) and serves later listings from there, without a
// READDIR(PLUS) round trip or the daemon's work per entry. The kernel
// itself drops the cached listing when the directory changes through the
// mount (every create, mkdir, mknod, symlink, link, unlink, rmdir and
// rename in it bumps the directory's i_version, which the cache is
// checked against at the start of each listing) and when the directory's
// mtime changes in the attributes it caches (a change behind the mount
// shows once they are refreshed, within the attribute timeout, as entries
// do). One case is the daemon's: after a READ of a child the kernel holds
// the child's atime stale, and a listing from the cache would leave
// find, du or ls -l to ask a GETATTR per such child; such a listing is
// made by the daemon again (no flags: the kernel drops its cached listing
// at the open, and does not cache this one; go-fuse sets both flags where
// either is), whose READDIRPLUS refreshes those attributes in bulk. And a
// listing from the cache must not leave the lower directory's atime where
// a native listing would change it (atimeWantsListing). With shared
// storage every listing reaches the daemon, which is how changes made
// behind the mount show at once. fd is the lower directory.
func (n *node) dirOpenFlags(fd int) uint32 {
	if n.r().sharedStorage {
		return 0
	}
	d := n.dir()
	if d.childAtimeStale.Load() && d.childAtimeStale.Swap(false) {
		return 0
	}
	if n.r().main.atimeWantsListing(fd, d.listedMtime.Load()) {
		return 0
	}
	return fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE
}

// dirAtime is how a filesystem's mount updates a directory's atime when
// it is listed.
type dirAtime uint8

const (
	dirAtimeStrict dirAtime = iota // every listing (strictatime)
	dirAtimeRel                    // relatime's rule (relatimeNeedsUpdate)
	dirAtimeNever                  // noatime, nodiratime
)

// dirAtimeOf reads the atime mode of the mount of fd from its statfs
// flags; strict when they cannot be read.
func dirAtimeOf(fd int) dirAtime {
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) != nil {
		return dirAtimeStrict
	}
	switch {
	case st.Flags&(unix.ST_NOATIME|unix.ST_NODIRATIME) != 0:
		return dirAtimeNever
	case st.Flags&unix.ST_RELATIME != 0:
		return dirAtimeRel
	}
	return dirAtimeStrict
}

// atimeWantsListing reports whether the next listing of the lower
// directory open as fd must be the daemon's although the kernel may hold
// it: when a native listing would update the directory's atime (always on
// a strictatime mount, never on a noatime or nodiratime one, and on a
// relatime one, the default, when the atime is not after both the mtime
// and the ctime, or is a day old: the kernel's relatime rule) and the
// directory's mtime is still listedMtime, that of the daemon's last
// listing, so that the kernel's cached listing may still be valid. (Once
// the mtime moved, the directory changed through the mount since and the
// kernel dropped its listing itself: the daemon makes the next one anyway,
// and the kernel may keep that one.) Where fd cannot be read, it says yes.
func (s *side) atimeWantsListing(fd int, listedMtime int64) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return true
	}
	if st.Mtim.Nano() != listedMtime {
		return false
	}
	mode := s.rootDirAtime
	if st.Dev != s.rootDev {
		mode = dirAtimeOf(fd) // a filesystem mounted inside LOWER
	}
	switch mode {
	case dirAtimeNever:
		return false
	case dirAtimeRel:
		return relatimeNeedsUpdate(st.Atim, st.Mtim, st.Ctim, time.Now())
	}
	return true
}

// relatimeNeedsUpdate is the kernel's relatime rule (relatime_need_update
// in fs/inode.c): an access updates the atime if it is not after the
// mtime, not after the ctime, or older than a day.
func relatimeNeedsUpdate(atime, mtime, ctime unix.Timespec, now time.Time) bool {
	after := func(a, b unix.Timespec) bool { return a.Sec > b.Sec || a.Sec == b.Sec && a.Nsec > b.Nsec }
	if !after(atime, mtime) || !after(atime, ctime) {
		return true
	}
	return now.Unix()-atime.Sec >= 24*60*60
}

func (d *dirHandle) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.inPass {
		if errno := d.start(0); errno != 0 {
			return nil, errno
		}
	}
	for d.next >= len(d.batch) {
		if d.eof {
			d.end()
			return nil, 0
		}
		if errno := d.fill(); errno != 0 {
			return nil, errno
		}
	}
	e := d.batch[d.next]
	d.lastName, d.lastLower = e.Name, d.lower[d.next]
	d.next++
	if e.Name != "." && e.Name != ".." {
		d.listed++
	}
	return &e, 0
}

// start begins a pass over the entries from the lower directory's
// position off (0: a new listing).
func (d *dirHandle) start(off uint64) syscall.Errno {
	m := d.n.r().main
	rel, errno := m.rel(untimed, d.n)
	if errno != 0 {
		return errno
	}
	if _, err := unix.Seek(d.fd, int64(off), io.SeekStart); err != nil {
		return toErrno(err)
	}
	d.inPass, d.eof, d.filled, d.loc = true, false, false, m.loc(d.fd, rel, "")
	d.batch, d.lower, d.next = d.batch[:0], d.lower[:0], 0
	d.lastName, d.lastLower = "", ""
	d.n.readServed()
	d.started = time.Now().UnixNano()
	d.known = d.n.listing(d.started)
	d.skipped, d.partial, d.listed, d.looked = false, off != 0, 0, 0
	if off != 0 {
		return 0
	}
	errno = d.fill()
	if errno != 0 {
		d.inPass = false
	}
	return errno
}

// fill reads the next batch of the pass. A batch that holds no entry
// (the end of the listing, or only the transform's own files) leaves
// next at the end of batch.
func (d *dirHandle) fill() syscall.Errno {
	first := !d.filled
	d.filled = true
	d.batch, d.lower, d.next = d.batch[:0], d.lower[:0], 0
	var errno syscall.Errno
	d.batch, d.lower, d.eof, errno = d.n.readdirBatch(d.fd, d.loc, first, first && !d.partial, d.batch, d.lower)
	return errno
}

// end ends a pass that reached the end of the lower directory.
func (d *dirHandle) end() {
	if !d.n.r().sharedStorage {
		// For dirOpenFlags: the mtime this listing saw.
		var st unix.Stat_t
		if unix.Fstat(d.fd, &st) == nil {
			d.n.dir().listedMtime.Store(st.Mtim.Nano())
		}
	}
	if !d.skipped && !d.partial && d.looked >= d.listed {
		// Every entry was looked up (READDIRPLUS throughout,
		// nothing the kernel still held fresh): the kernel now
		// holds each child's entry and attributes, from no
		// earlier than the start of this listing.
		d.n.listedAt(d.started)
	}
	// The batch buffers are not kept: an idle open directory holds
	// nothing of its listing.
	d.batch, d.lower, d.next = nil, nil, 0
}

// Seekdir moves to off, a position an entry of this directory was sent
// with (the lower filesystem's d_off), or 0 for the start.
func (d *dirHandle) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == 0 {
		// rewinddir(3): list again, so that changes since are seen.
		d.inPass = false
		return 0
	}
	if off > math.MaxInt64 {
		return syscall.EINVAL
	}
	// Entries before off are not sent again: this pass is no full
	// listing.
	return d.start(off)
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
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.known {
		if ch := d.n.GetChild(name); ch != nil {
			if cn, ok := ch.Operations().(*node); !ok || !cn.kernelAtimeStale() {
				d.skipped = true
				return nil, syscall.EEXIST
			}
		}
	}
	d.looked++
	if d.lastName == name && d.lastLower != "" && !names.IsLong(d.lastLower) {
		// The entry just read: looked up through the handle's own
		// descriptor, under the lower name the listing read. (A long
		// name goes the usual way, which checks it against its
		// sidecar.)
		return d.n.lookupIn(ctx, name, d.fd, d.lastLower, out)
	}
	return d.n.Lookup(ctx, name, out)
}

// listing starts a listing of directory n at now and reports whether the kernel
// still holds fresh entries (and attributes) of every child that go-fuse
// knows: those of the last full listing, for the first three quarters of
// their lifetime (the quarter left is for the listing itself and the
// stats that follow it; a big directory's first ls -l can take most of
// the half that was used before), and those looked up or made since,
// which are newer. An entry that expires before it is used after all
// costs a LOOKUP round trip, about what sending it would have cost (an
// ls -l asks again for the ACL of each entry sent). When not, the
// listing looks every entry it sends in a READDIRPLUS up, and is the
// new last full listing if all went that way (Readdirent). Never with
// shared storage, where a READDIRPLUS is how changes made behind the
// mount reach the kernel.
func (n *node) listing(now int64) bool {
	if n.r().sharedStorage {
		return false
	}
	last := n.dir().listed.Load()
	return last != 0 && now-last < int64(n.r().attrTTL*3/4)
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
