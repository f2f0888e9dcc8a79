package fs

import (
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/lowerfd"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// cryptTransform encrypts content (cipher/content), names (cipher/names,
// unless the volume has plaintext names), symlink targets and xattr values
// (sealed with AES-256-GCM: they are small and written whole, so they get
// integrity too).
type cryptTransform struct {
	names  *names.Cipher // nil with plaintext names
	seal   *keys.Sealer
	engine *content.Engine
	io     *cryptIO
	log    zerolog.Logger
	// pending: IVs and sidecars not yet durable (pending_names.go).
	pending pendingNames
	// lowerXattrs are the names under which the lower filesystem keeps
	// its own data in a namespace we seal (lowerOwnedXattrs): passed
	// through as they are.
	lowerXattrs map[string]bool
	// nameWarn limits the warnings of entries a listing hides, which a
	// LOWER writer can plant by the thousand (warn_limit.go).
	nameWarn *warnLimiter
}

var _ transform = (*cryptTransform)(nil)

func newCryptTransform(cfg *config.Config, master []byte, log zerolog.Logger) (*cryptTransform, error) {
	engine, err := content.NewEngine(cfg.ContentSpec(), cfg.KeyBytes, master)
	if err != nil {
		return nil, err
	}
	t := &cryptTransform{
		seal:     keys.NewSealer(master),
		engine:   engine,
		log:      log,
		nameWarn: newWarnLimiter(log, "warnings of lower names that cannot be shown"),
	}
	if !cfg.PlaintextNames {
		nameKey := keys.Derive(master, "names", nil, 32)
		t.names, err = names.New(nameKey)
		keys.Wipe(nameKey)
		if err != nil {
			return nil, err
		}
	}
	t.io = &cryptIO{engine: engine, log: log}
	return t, nil
}

func (t *cryptTransform) name() string { return "crypt" }

func (t *cryptTransform) hidden(isRoot bool, lower string) bool {
	if isRoot && (lower == config.FileName || lower == config.FileName+".bak" || strings.HasPrefix(lower, config.FileName+".tmp") ||
		lower == links.StoreDir) {
		return true
	}
	if t.names == nil {
		return false
	}
	return lower == names.DirIVFile || names.IsSidecar(lower) || names.IsTmp(lower)
}

func (t *cryptTransform) lowerName(a *acct, dir *node, d dirLoc, name string) (string, string, syscall.Errno) {
	if t.names == nil {
		if dir.isRoot() && t.hidden(true, name) {
			// The config and the long-link store are not part of the
			// mounted view and cannot be created or replaced through it.
			return "", "", syscall.EPERM
		}
		return name, "", 0
	}
	iv, errno := dir.dirIV(a, t, d)
	if errno != 0 {
		return "", "", errno
	}
	t0 := a.now()
	cName, err := t.names.Encrypt(name, iv)
	a.cryptoSince(t0)
	if err != nil {
		return "", "", syscall.ENAMETOOLONG
	}
	lower, long := names.Lower(cName)
	if long {
		return lower, cName, 0
	}
	return lower, "", 0
}

func (t *cryptTransform) plainName(a *acct, dir *node, d dirLoc, lower string) (string, bool) {
	if t.hidden(dir.isRoot(), lower) {
		return "", false
	}
	if t.names == nil {
		return lower, true
	}
	iv, errno := dir.dirIV(a, t, d)
	if errno != 0 {
		return "", false
	}
	cName := lower
	if names.IsLong(lower) {
		t0 := a.now()
		b, err := readSmallFile(d.fd, d.file(lower+names.LongSuffix), names.MaxSidecarSize)
		a.lowerSince(t0)
		if err != nil {
			if t.nameWarn.allow(d.show("")) {
				t.log.Warn().Str("lower", d.show(lower)).Err(err).Msg("long name without a readable sidecar; entry hidden")
			}
			return "", false
		}
		if cName, err = names.LongName(lower, b); err != nil {
			if t.nameWarn.allow(d.show("")) {
				t.log.Warn().Str("lower", d.show(lower)).Err(err).Msg("long-name sidecar does not match its entry; entry hidden")
			}
			return "", false
		}
	}
	t0 := a.now()
	name, err := t.names.Decrypt(cName, iv)
	a.cryptoSince(t0)
	if err != nil {
		if t.nameWarn.allow(d.show("")) {
			t.log.Warn().Str("lower", d.show(lower)).Msg("name does not decrypt; entry hidden")
		}
		return "", false
	}
	return name, true
}

func (t *cryptTransform) writeLong(a *acct, d dirLoc, lower, long string) syscall.Errno {
	if long == "" {
		return 0
	}
	defer a.lowerSince(a.now())
	rel := d.file(lower + names.LongSuffix)
	// The content is a function of the name: a sidecar that already holds
	// it (rename over an existing long name, an earlier crash) is left
	// alone (no write at all). Anything else under the name is replaced
	// (writeSmallFile: a new file renamed over it).
	if b, err := readSmallFile(d.fd, rel, names.MaxSidecarSize); err == nil && string(b) == long {
		return 0
	}
	return t.writePending(d.fd, rel, []byte(long))
}

// writePending writes a directory IV or a sidecar and keeps it for the
// next fsync (pendingNames).
func (t *cryptTransform) writePending(dirFd int, rel string, data []byte) syscall.Errno {
	fd, errno := writeSmallFileFd(dirFd, rel, data, 0400)
	if fd >= 0 {
		t.pending.add(fd)
	}
	return errno
}

func (t *cryptTransform) syncPending() syscall.Errno { return t.pending.sync() }

func (t *cryptTransform) dropLong(a *acct, d dirLoc, lower string) {
	if t.names != nil && names.IsLong(lower) {
		defer a.lowerSince(a.now())
		unlinkBeneath(d.fd, d.file(lower+names.LongSuffix), 0)
	}
}

func (t *cryptTransform) newDir(a *acct, d dirLoc) ([]byte, syscall.Errno) {
	if t.names == nil {
		return nil, 0
	}
	defer a.lowerSince(a.now())
	iv := make([]byte, names.DirIVSize)
	randRead(iv)
	if errno := t.writePending(d.fd, d.file(names.DirIVFile), iv); errno != 0 {
		return nil, errno
	}
	return iv, 0
}

func (t *cryptTransform) readDirIV(a *acct, d dirLoc) ([]byte, syscall.Errno) {
	if t.names == nil {
		return nil, 0
	}
	t0 := a.now()
	iv, err := readSmallFile(d.fd, d.file(names.DirIVFile), names.DirIVSize+1)
	a.lowerSince(t0)
	missing := isNotExist(err) || err == nil && len(iv) != names.DirIVSize
	if missing && lowerDirEmpty(d.fd, d.rel, []string{names.DirIVFile}) == 0 {
		// An empty directory without IV, or with a torn one, is what a
		// crash between mkdir and the IV write (or rmdir's two steps)
		// leaves; nothing in it depends on the IV, so give it a new one.
		if _, errno := t.newDir(a, d); errno == 0 {
			t.log.Warn().Str("lower", d.show("")).Msg("empty directory had no IV (interrupted mkdir or rmdir?): new IV written")
			return t.readDirIV(a, d)
		}
	}
	var errno syscall.Errno
	if errors.As(err, &errno) && errno != syscall.ENOENT && errno != syscall.ELOOP {
		// Out of descriptors or memory, an I/O error of the lower
		// filesystem: nothing says the IV is damaged; pass it on.
		return nil, errno
	}
	if err != nil || len(iv) != names.DirIVSize {
		t.log.Warn().Str("lower", d.show("")).Err(err).Msg("directory IV missing or damaged; directory unreadable")
		return nil, syscall.EIO
	}
	return iv, 0
}

func (t *cryptTransform) openDir(a *acct, dir *node, d dirLoc) syscall.Errno {
	if t.names == nil {
		return 0
	}
	_, errno := dir.dirIV(a, t, d)
	return errno
}

func (t *cryptTransform) dirMeta() []string {
	if t.names == nil {
		return nil
	}
	return []string{names.DirIVFile}
}

// syncMeta fsyncs the directory IV and the long-name sidecars of the open
// lower directory dirFd. They are written without fsync (as gocryptfs
// does: a sync per mkdir would cost a journal commit each); an fsync of
// the directory, which is what a careful application does to make its
// entries durable, makes the names durable too.
func (t *cryptTransform) syncMeta(dirFd int) syscall.Errno {
	if t.names == nil {
		return 0
	}
	sync := func(name string) syscall.Errno {
		fd, err := openRegularBeneath(dirFd, name, syscall.O_RDONLY|syscall.O_NONBLOCK)
		if err != nil {
			if err == syscall.ENOENT {
				return 0
			}
			var nr *lowerfd.NotRegularError
			if errors.As(err, &nr) {
				return 0 // planted in LOWER: nothing of ours to make durable
			}
			return toErrno(err)
		}
		defer syscall.Close(fd)
		return toErrno(syscall.Fsync(fd))
	}
	if errno := sync(names.DirIVFile); errno != 0 {
		return errno
	}
	// A descriptor of its own: dirFd may be an open directory handle
	// whose offset a listing must not move.
	fd, err := openBeneath(dirFd, ".", syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err == syscall.ENOENT {
		return 0 // removed while open: nothing left to make durable
	}
	if err != nil {
		return toErrno(err)
	}
	defer syscall.Close(fd)
	buf := make([]byte, 8192)
	for {
		nb, err := syscall.ReadDirent(fd, buf)
		if err == syscall.ENOENT {
			return 0 // removed meanwhile (a dead directory lists ENOENT)
		}
		if err != nil {
			return toErrno(err)
		}
		if nb == 0 {
			return 0
		}
		for off := 0; off < nb; {
			_, _, name, reclen := parseDirent(buf[off:nb])
			off += reclen
			if names.IsSidecar(name) {
				if errno := sync(name); errno != 0 {
					return errno
				}
			}
		}
	}
}

// Symlink targets are sealed (random nonce, GCM tag) and base64url-encoded
// into the lower symlink; a target too long for that is a long link: the
// lower symlink holds a marker and the sealed target is kept in a sidecar
// below the lower root (cipher/links).
func (t *cryptTransform) encodeLink(a *acct, root dirLoc, target string, long bool, fits func(n int) bool) (string, syscall.Errno) {
	if !long {
		t0 := a.now()
		lower, ok := links.Seal(t.seal, []byte(target))
		a.cryptoSince(t0)
		if ok {
			return lower, 0
		}
	}
	if len(target) > links.MaxTarget || fits != nil && !fits(len(target)) {
		return "", syscall.ENAMETOOLONG
	}
	marker := links.NewMarker(len(target))
	t0 := a.now()
	sealed := links.SealLong(t.seal, marker, []byte(target))
	a.cryptoSince(t0)
	defer a.lowerSince(a.now())
	if errno := writeLinkSidecar(root, marker, sealed); errno != 0 {
		return "", errno
	}
	return marker, 0
}

// writeLinkSidecar stores the sidecar of the long link marker, creating
// the store on first use. Unlike the directory IV and long-name sidecars,
// it is made durable at once (the sidecar and the store): an fsync of the
// symlink's directory, which makes the link durable, does not reach the
// store, and long links are rare enough for the two fsyncs.
func writeLinkSidecar(root dirLoc, marker string, sealed []byte) syscall.Errno {
	_, id, _ := links.ParseMarker(marker)
	store := root.file(links.StoreDir)
	if err := unix.Mkdirat(root.fd, store, 0700); err != nil && err != unix.EEXIST {
		return toErrno(err)
	}
	rel := root.file(links.Sidecar(id))
	if errno := writeSmallFile(root.fd, rel, sealed, 0400); errno != 0 {
		return errno
	}
	// The sidecar was just written, but whoever can write LOWER may have
	// swapped it since; the store is opened O_DIRECTORY, which refuses
	// any other type before its open (package lowerfd).
	for _, p := range []string{rel, store} {
		var fd int
		var err error
		if p == rel {
			fd, err = openRegularBeneath(root.fd, p, syscall.O_RDONLY|syscall.O_NONBLOCK)
		} else {
			fd, err = openBeneath(root.fd, p, syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_DIRECTORY, 0)
		}
		if err == nil {
			err = syscall.Fsync(fd)
			syscall.Close(fd)
		}
		if err != nil {
			unlinkBeneath(root.fd, rel, 0)
			return toErrno(err)
		}
	}
	return 0
}

func (t *cryptTransform) decodeLink(a *acct, root dirLoc, lower []byte) ([]byte, syscall.Errno) {
	if _, id, ok := links.ParseMarker(string(lower)); ok {
		// LOWER may be hostile: the id is hex only, the read stays
		// beneath the root and is capped, and the content must open
		// under the key with this very marker as additional data.
		t0 := a.now()
		b, err := readSmallFile(root.fd, root.file(links.Sidecar(id)), links.MaxSidecar+1)
		a.lowerSince(t0)
		if err != nil {
			t.log.Warn().Str("lower", root.show(links.Sidecar(id))).Err(err).Msg("long symlink without a readable sidecar")
			return nil, syscall.EIO
		}
		defer a.cryptoSince(a.now())
		plain, err := links.OpenLong(t.seal, string(lower), b)
		if err != nil {
			t.log.Warn().Str("lower", root.show(links.Sidecar(id))).Err(err).Msg("long symlink sidecar does not open")
			return nil, syscall.EIO
		}
		return plain, 0
	}
	defer a.cryptoSince(a.now())
	plain, err := links.Open(t.seal, lower)
	if err != nil {
		return nil, syscall.EIO
	}
	return plain, 0
}

func (t *cryptTransform) dropLink(a *acct, root dirLoc, lower string) {
	if _, id, ok := links.ParseMarker(lower); ok {
		defer a.lowerSince(a.now())
		unlinkBeneath(root.fd, root.file(links.Sidecar(id)), 0)
	}
}

// xattrSealed says which values are sealed: user.* and trusted.* values
// are data (trusted.* only root's), sealed with the name as associated
// data so that a value cannot be moved to another attribute. Values of
// system.* (POSIX ACLs) and security.* (file capabilities, security
// labels) are permissions, which LOWER shows anyway (modes, owners): they
// stay in the clear, where the lower kernel filesystem interprets them
// (ACL inheritance, chmod's ACL mask, dropping capabilities on write).
func xattrSealed(attr string) bool {
	return strings.HasPrefix(attr, "user.") || strings.HasPrefix(attr, "trusted.")
}

// sealed says whether the value of attr is sealed on this mount.
func (t *cryptTransform) sealed(attr string) bool {
	return xattrSealed(attr) && !t.lowerXattrs[attr]
}

// lowerOwnedXattrs returns the xattr names in a namespace we seal that the
// filesystem of the open directory fd uses for its own data. XFS keeps
// POSIX ACLs as trusted.SGI_ACL_FILE and trusted.SGI_ACL_DEFAULT, which
// root sees in listxattr next to system.posix_acl_*: sealing them would
// make them unreadable (EIO) through the mount and let a write through
// them garble the ACL, where a native directory shows the ACL's bytes.
// Like system.* and security.*, they are permissions, in the clear in
// LOWER anyway.
func lowerOwnedXattrs(fd int) map[string]bool {
	var st unix.Statfs_t
	if unix.Fstatfs(fd, &st) == nil && st.Type == unix.XFS_SUPER_MAGIC {
		return map[string]bool{"trusted.SGI_ACL_FILE": true, "trusted.SGI_ACL_DEFAULT": true}
	}
	return nil
}

func (t *cryptTransform) encodeXattr(a *acct, attr string, value []byte) ([]byte, syscall.Errno) {
	if !t.sealed(attr) {
		return value, 0
	}
	defer a.cryptoSince(a.now())
	return t.seal.Seal(value, []byte("xattr "+attr)), 0
}

func (t *cryptTransform) decodeXattr(a *acct, attr string, lower []byte) ([]byte, syscall.Errno) {
	if !t.sealed(attr) {
		return lower, 0
	}
	defer a.cryptoSince(a.now())
	v, err := t.seal.Open(lower, []byte("xattr "+attr))
	if err != nil {
		return nil, syscall.EIO
	}
	return v, 0
}

func (t *cryptTransform) xattrOverhead() int { return keys.Overhead }

func (t *cryptTransform) plainSize(lowerSize int64) int64 {
	n, err := content.PlainSize(lowerSize)
	if err != nil {
		// A torn file shows its lower size: reading it then gives EIO
		// (instead of a silent empty file), and it can still be removed.
		return lowerSize
	}
	return n
}

func (t *cryptTransform) content() contentIO { return t.io }

// linkSize: a sealed target is base64url(nonce ‖ target ‖ tag); a long
// link's marker has a length no base64 string has, and holds the length.
func (t *cryptTransform) linkSize(lowerSize int64) int64 { return links.PlainLen(lowerSize) }

func (t *cryptTransform) markerSize(lower string) int64 {
	n, _, ok := links.ParseMarker(lower)
	if !ok {
		return -1
	}
	return int64(n)
}

func (t *cryptTransform) readWriteOpens() bool { return true }
func (t *cryptTransform) namesCost() bool      { return t.names != nil }

// readSmallFile reads at most max bytes of a metadata file (directory IV,
// long-name sidecar) at rel below the directory dirFd. It never follows a
// symlink, never leaves dirFd's tree, and never opens anything but a
// regular file (openRegularBeneath: no FIFO's open waits, no device's
// driver runs): LOWER may have been crafted by an attacker. O_NONBLOCK:
// a lease on the file makes the open fail, not wait.
func readSmallFile(dirFd int, rel string, max int) ([]byte, error) {
	fd, err := openRegularBeneath(dirFd, rel, syscall.O_RDONLY|syscall.O_NONBLOCK)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: rel, Err: err}
	}
	defer syscall.Close(fd)
	buf := make([]byte, max)
	n, err := preadFull(fd, buf, 0)
	return buf[:n], err
}

// writeSmallFile replaces the metadata file at rel below dirFd (its
// directory reached as readSmallFile does) with data: written to a new
// temporary file (O_EXCL) in the same directory, then renamed over rel.
// Whatever was under the name is replaced, never opened: an existing file
// there may be a hard link, planted by whoever can write LOWER, to a file
// of the daemon's user outside LOWER (with fs.protected_hardlinks=0 one
// can link any file), which an open with O_TRUNC would truncate and
// overwrite. Readers see the old content or the new, never a truncated
// file.
func writeSmallFile(dirFd int, rel string, data []byte, mode uint32) syscall.Errno {
	fd, errno := writeSmallFileFd(dirFd, rel, data, mode)
	if fd >= 0 {
		syscall.Close(fd)
	}
	return errno
}

// writeSmallFileFd is writeSmallFile that returns the new file open
// read-only, for an fsync later (-1 when it is durable already).
func writeSmallFileFd(dirFd int, rel string, data []byte, mode uint32) (int, syscall.Errno) {
	dir, name := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, name = rel[:i], rel[i+1:]
	}
	if dir != "" {
		fd, err := openBeneath(dirFd, dir, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err != nil {
			return -1, toErrno(err)
		}
		defer syscall.Close(fd)
		dirFd = fd
	}
	var rnd [8]byte
	randRead(rnd[:])
	tmp := names.TmpPrefix + hex.EncodeToString(rnd[:])
	fd, err := unix.Openat(dirFd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, mode)
	if err != nil {
		return -1, toErrno(err)
	}
	_, err = pwriteFull(fd, data, 0)
	// The descriptor kept is read-only: a file open for writing would
	// make a read-only remount of LOWER's filesystem fail (EBUSY).
	rfd := -1
	if err == nil {
		// Through our descriptor, not the name: whoever can write
		// LOWER may have put something else under the name already.
		if rfd, err = lowerfd.Reopen(fd, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC); err != nil {
			// Not kept for later: durable now.
			rfd, err = -1, syscall.Fsync(fd)
		}
	}
	if cerr := syscall.Close(fd); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dirFd, tmp, dirFd, name)
	}
	if err != nil {
		if rfd >= 0 {
			syscall.Close(rfd)
		}
		unix.Unlinkat(dirFd, tmp, 0)
		return -1, toErrno(err)
	}
	return rfd, 0
}

// isNotExist reports a missing file in any of the error forms we meet.
func isNotExist(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ENOENT)
}
