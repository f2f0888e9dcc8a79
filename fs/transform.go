package fs

import (
	"syscall"
)

// transform is what differs between the encrypted mount and its
// passthrough twin. The node engine calls it at every point where a name,
// a link target, an xattr value or file content crosses between the
// mounted view and the lower directory; everything else — lookups, locks,
// attributes, directory handling, FUSE plumbing — is the engine's and is
// the same code for both.
type transform interface {
	// name returns "crypt" or "null".
	name() string

	// hidden reports whether a lower entry of the directory at lowerDir
	// (isRoot for the mount's root) is metadata that the mounted view
	// never shows.
	hidden(isRoot bool, lowerName string) bool

	// lowerName maps the plaintext name of an entry in the directory dir
	// (lower path dirPath) to the name stored in the lower directory. For a
	// name whose encrypted form is too long, long holds the full encrypted
	// name to be kept in a sidecar next to it.
	lowerName(dir *node, dirPath, name string) (lower, long string, errno syscall.Errno)
	// plainName reverses lowerName for a directory listing; ok is false
	// for entries that cannot be shown (metadata, undecryptable names).
	plainName(dir *node, dirPath, lower string) (name string, ok bool)
	// writeLong stores the sidecar of a long name before the entry is
	// created; dropLong removes the sidecar after the entry is gone.
	writeLong(dirPath, lower, long string) syscall.Errno
	dropLong(dirPath, lower string)

	// newDir prepares a freshly made lower directory (the directory IV);
	// readDirIV returns a directory's IV (nil when names are plain).
	newDir(path string) syscall.Errno
	readDirIV(path string) ([]byte, syscall.Errno)
	// dirMeta lists the metadata entries that rmdir removes from an
	// otherwise empty lower directory.
	dirMeta() []string

	// encodeLink and decodeLink transform symlink targets.
	encodeLink(target string) (string, syscall.Errno)
	decodeLink(lower []byte) ([]byte, syscall.Errno)

	// xattrs: which names pass, how values are stored.
	xattrAllowed(attr string) bool
	encodeXattr(attr string, value []byte) ([]byte, syscall.Errno)
	decodeXattr(attr string, lower []byte) ([]byte, syscall.Errno)
	xattrOverhead() int

	// content: the plaintext size of a lower file and the I/O on it.
	plainSize(lowerSize int64) int64
	content() contentIO
}

// contentIO does file I/O for one transform. All calls for one inode are
// serialised by the engine's per-inode lock: read under the read lock,
// everything else under the write lock.
type contentIO interface {
	// open is called with the write lock held when a file is opened or
	// created; it resets what the inode caches about the lower file.
	open(h *ioState, fd int) syscall.Errno
	read(h *ioState, fd int, dst []byte, off int64) (int, syscall.Errno)
	write(h *ioState, fd int, src []byte, off int64) (int, syscall.Errno)
	truncate(h *ioState, fd int, size int64) syscall.Errno
	allocate(h *ioState, fd int, off, size int64, mode uint32) syscall.Errno
	lseek(h *ioState, fd int, off int64, whence int) (int64, syscall.Errno)
}
