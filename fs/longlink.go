package fs

import (
	"encoding/hex"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// Long links. A symlink target too long to be sealed into the lower
// symlink is kept in a sidecar below the lower root, and the lower symlink
// holds a marker naming it (cipher/links; the transform writes, reads and
// drops the sidecars). The engine's part is here: lstat must show the
// plaintext length, which only the marker holds, and the sidecar must go
// when the last name of the symlink does.
//
// Reading the marker for lstat would change the lower symlink's atime
// (readlink touches it, lstat on the native filesystem does not), so the
// marker is read once per inode and mount, when the kernel first looks the
// symlink up (or taken from Symlink itself), and kept in linkSizeCache.
// Only a long link looked up for the first time after a mount can get its
// atime touched, as a readlink would.

// linkKey is a lower inode.
type linkKey struct{ dev, ino uint64 }

func linkKeyOf(st *syscall.Stat_t) linkKey { return linkKey{uint64(st.Dev), uint64(st.Ino)} }

// linkSizeCache maps the lower inode of a long link to its marker.
type linkSizeCache struct{ m sync.Map }

func (c *linkSizeCache) marker(k linkKey) (string, bool) {
	v, ok := c.m.Load(k)
	if !ok {
		return "", false
	}
	return v.(string), true
}

// rootLoc is the side's lower root, where long links keep their sidecars.
func (s *side) rootLoc() dirLoc { return s.loc(s.rootFd, "", "") }

// linkSize is the plaintext target length of the lower symlink st.
func (s *side) linkSize(st *syscall.Stat_t) int64 {
	if n := s.t.linkSize(st.Size); n >= 0 {
		return n
	}
	if m, ok := s.linkSizes.marker(linkKeyOf(st)); ok {
		return max(0, s.t.markerSize(m))
	}
	// A symlink of a marker's length that holds no marker: readlink
	// gives EIO.
	return 0
}

// learnLink reads the marker of the lower symlink e (stat st) when it may
// be a long link whose marker is not known yet, so that linkSize can tell
// its length. Called where a lower entry becomes a node (lookup, create).
func (s *side) learnLink(a *acct, e entry, st *syscall.Stat_t) {
	if st.Mode&syscall.S_IFMT != syscall.S_IFLNK || s.t.linkSize(st.Size) >= 0 {
		return
	}
	k := linkKeyOf(st)
	if _, ok := s.linkSizes.marker(k); ok {
		return
	}
	buf := make([]byte, 4096)
	t0 := a.now()
	n, err := unix.Readlinkat(e.dir, e.name, buf)
	a.lowerSince(t0)
	if err == nil && s.t.markerSize(string(buf[:n])) >= 0 {
		s.linkSizes.m.Store(k, string(buf[:n]))
	}
}

// madeLink records the marker of a long link just made at e.
func (s *side) madeLink(a *acct, e entry, lower string) {
	if s.t.markerSize(lower) < 0 {
		return
	}
	var st syscall.Stat_t
	if a.lstat(e, &st) == nil && st.Mode&syscall.S_IFMT == syscall.S_IFLNK {
		s.linkSizes.m.Store(linkKeyOf(&st), lower)
	}
}

// linkHold is a long link that an unlink or a rename over it may remove
// the last name of, held open (O_PATH) so that its link count can be read
// once the name is gone: a hard link elsewhere keeps the sidecar in use.
// Counting after the removal, on the inode itself, is what makes two
// concurrent unlinks of the last two names drop the sidecar once (or, at
// worst, twice), never zero times.
type linkHold struct {
	fd     int
	marker string
	key    linkKey
}

// holdLink holds e if it is a long link; the zero hold has fd -1.
func (s *side) holdLink(a *acct, e entry) linkHold {
	none := linkHold{fd: -1}
	if s.t.linkSize(int64(links.MarkerLen)) >= 0 {
		return none // a transform without long links (the twin)
	}
	var st syscall.Stat_t
	if a.lstat(e, &st) != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK || s.t.linkSize(st.Size) >= 0 {
		return none
	}
	t0 := a.now()
	defer a.lowerSince(t0)
	fd, err := unix.Openat(e.dir, e.name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return none
	}
	h := linkHold{fd: fd}
	if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
		syscall.Close(fd)
		return none
	}
	h.key = linkKeyOf(&st)
	m, ok := s.linkSizes.marker(h.key)
	if !ok {
		// Not looked up in this mount (the kernel looks a name up before
		// removing it, so rarely): read it.
		buf := make([]byte, 4096)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			syscall.Close(fd)
			return none
		}
		m = string(buf[:n])
	}
	if s.t.markerSize(m) < 0 {
		syscall.Close(fd)
		return none
	}
	h.marker = m
	return h
}

// releaseLink ends a hold; removed says whether the operation removed the
// held name. The sidecar goes when no name of the inode is left.
func (s *side) releaseLink(a *acct, h linkHold, removed bool) {
	if h.fd < 0 {
		return
	}
	defer syscall.Close(h.fd)
	var st syscall.Stat_t
	if !removed || syscall.Fstat(h.fd, &st) != nil || st.Nlink != 0 {
		return
	}
	s.linkSizes.m.Delete(h.key)
	s.t.dropLink(a, s.rootLoc(), h.marker)
}

// linkLimit bounds the longest symlink target the lower filesystem takes:
// every length up to ok is taken, none from tooLong on (0: none known).
type linkLimit struct {
	mu          sync.Mutex
	ok, tooLong int
}

// linkFits reports whether the lower filesystem would take a symlink
// target of n bytes natively, so that a long link (whose lower symlink is
// a short marker) is made only for a target a native directory there
// would hold: XFS takes at most 1023 bytes, ext4, btrfs and tmpfs 4095.
// The first time a length is in doubt a symlink of n bytes is made and
// removed again in the long-link store, under a temporary name (fsck
// deletes one a crash leaves). When the probe cannot tell (a read-only or
// full filesystem), the answer is yes, and the symlink itself fails.
func (s *side) linkFits(a *acct, n int) bool {
	l := &s.linkLimit
	l.mu.Lock()
	defer l.mu.Unlock()
	if n <= l.ok {
		return true
	}
	if l.tooLong > 0 && n >= l.tooLong {
		return false
	}
	t0 := a.now()
	defer a.lowerSince(t0)
	root := s.rootLoc()
	if err := unix.Mkdirat(root.fd, root.file(links.StoreDir), 0700); err != nil && err != unix.EEXIST {
		return true
	}
	store, err := openBeneath(root.fd, root.file(links.StoreDir), unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return true
	}
	defer syscall.Close(store)
	var rnd [8]byte
	randRead(rnd[:])
	name := names.TmpPrefix + hex.EncodeToString(rnd[:])
	err = unix.Symlinkat(strings.Repeat("x", n), store, name)
	switch {
	case err == nil:
		unix.Unlinkat(store, name, 0)
		l.ok = n
		return true
	case err == unix.ENAMETOOLONG:
		l.tooLong = n
		return false
	}
	return true
}
