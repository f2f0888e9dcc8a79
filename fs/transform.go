package fs

import (
	"syscall"
)

// transform is what differs between the encrypted mount and its
// passthrough twin. The node engine calls it at every point where a name,
// a link target, an xattr value or file content crosses between the
// mounted view and a lower directory; everything else — lookups, locks,
// attributes, directory handling, FUSE plumbing, timing — is the engine's
// and is the same code for both. Every method reports where its time went
// to the acct it is given.
type transform interface {
	// name returns "crypt" or "null".
	name() string

	// hidden reports whether a lower entry of a directory (isRoot for
	// the mount's root) is metadata that the mounted view never shows.
	hidden(isRoot bool, lowerName string) bool

	// lowerName maps the plaintext name of an entry in the directory dir
	// (found at d) to the name stored in the lower directory. For a name
	// whose encrypted form is too long, long holds the full encrypted name
	// to be kept in a sidecar next to it.
	lowerName(a *acct, dir *node, d dirLoc, name string) (lower, long string, errno syscall.Errno)
	// plainName reverses lowerName for a directory listing; ok is false
	// for entries that cannot be shown (metadata, undecryptable names).
	plainName(a *acct, dir *node, d dirLoc, lower string) (name string, ok bool)
	// writeLong stores the sidecar of a long name in directory d before
	// the entry is created; dropLong removes the sidecar after the entry
	// is gone. d is an open directory (d.rel == "").
	writeLong(a *acct, d dirLoc, lower, long string) syscall.Errno
	dropLong(a *acct, d dirLoc, lower string)

	// newDir prepares a freshly made lower directory d and returns the
	// IV it wrote there (nil when names are plain); readDirIV returns a
	// directory's IV.
	newDir(a *acct, d dirLoc) ([]byte, syscall.Errno)
	readDirIV(a *acct, d dirLoc) ([]byte, syscall.Errno)
	// openDir checks that directory dir (found at d) can be listed: with
	// encrypted names its IV must be readable.
	openDir(a *acct, dir *node, d dirLoc) syscall.Errno
	// dirMeta lists the metadata entries that rmdir removes from an
	// otherwise empty lower directory.
	dirMeta() []string
	// syncMeta makes the transform's metadata files in the open lower
	// directory dirFd durable (fsync of the directory, FSYNCDIR).
	syncMeta(dirFd int) syscall.Errno
	// syncPending makes every directory IV and sidecar written since the
	// last call durable (pending_names.go): called at every fsync.
	syncPending() syscall.Errno

	// encodeLink and decodeLink transform symlink targets. root is the
	// side's lower root, where a target too long for the lower symlink
	// is kept (a long link, cipher/links): encodeLink stores it there
	// before the symlink is made, dropLink removes it once the last
	// name of the symlink with the lower target lower is gone (or its
	// creation failed). long asks for the long form even where the
	// target would fit inline (the lower filesystem refused the inline
	// one); fits(n) says whether the lower filesystem takes a target of
	// n bytes natively, and is asked before a long link is made: a
	// target it would refuse gets ENAMETOOLONG, as natively.
	encodeLink(a *acct, root dirLoc, target string, long bool, fits func(n int) bool) (string, syscall.Errno)
	decodeLink(a *acct, root dirLoc, lower []byte) ([]byte, syscall.Errno)
	dropLink(a *acct, root dirLoc, lower string)

	// xattrs: how values are stored (every name passes, see node_xattr.go).
	encodeXattr(a *acct, attr string, value []byte) ([]byte, syscall.Errno)
	decodeXattr(a *acct, attr string, lower []byte) ([]byte, syscall.Errno)
	xattrOverhead() int

	// content: the plaintext size of a lower file and the I/O on it.
	plainSize(lowerSize int64) int64
	content() contentIO
	// linkSize is the length of a symlink's plaintext target, from the
	// length of its lower target (no readlink: that would touch atime);
	// -1 when the lower target may be a long link's marker, whose
	// plaintext length markerSize reads from the marker (-1: not one).
	linkSize(lowerSize int64) int64
	markerSize(lower string) int64
	// namesCost is true when mapping names costs crypto (encrypted
	// names), so that path walks are timed.
	namesCost() bool
	// readWriteOpens is true when writes read partial extents back, so a
	// write-only open must open the lower file read-write.
	readWriteOpens() bool
}

// contentIO does file I/O for one transform. All calls for one inode are
// serialised by the engine's per-inode lock: read and lseek under the read
// lock, everything else under the write lock.
type contentIO interface {
	// open is called with the write lock held when a file is opened or
	// created; it resets what the inode caches about the lower file, whose
	// fstat is st.
	open(a *acct, h *ioState, fd int, st *syscall.Stat_t) syscall.Errno
	read(a *acct, h *ioState, fd int, dst []byte, off int64) (int, syscall.Errno)
	write(a *acct, h *ioState, fd int, src []byte, off int64) (int, syscall.Errno)
	// writeOwned is write of a src nobody reads afterwards (a WRITE
	// request's buffer outside mirror mode): it may be overwritten, so
	// whole extents are encrypted in place, without a bounce buffer.
	writeOwned(a *acct, h *ioState, fd int, src []byte, off int64) (int, syscall.Errno)
	truncate(a *acct, h *ioState, fd int, size int64) syscall.Errno
	allocate(a *acct, h *ioState, fd int, off, size int64, mode uint32) syscall.Errno
	lseek(a *acct, h *ioState, fd int, off int64, whence int) (int64, syscall.Errno)
}
