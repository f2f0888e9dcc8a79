package fsck

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/lowerfd"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// lostFoundTmp starts the name under which lost+found is prepared before
// it is renamed into place. It contains a '.', so it can never be an
// encrypted name; a leftover is reported as an undecryptable name.
const lostFoundTmp = ".twincrypt.lost+found.tmp-"

// lostFound is the open lost+found directory.
type lostFound struct {
	dir   *os.File
	iv    []byte // nil with plaintext names
	lower string // its lower name in LOWER
}

// repair runs the actions backwards: the contents of a directory are moved
// before the directory, while their recorded paths are still valid.
func (c *checker) repair() {
	for i := len(c.actions) - 1; i >= 0; i-- {
		a := c.actions[i]
		var note string
		var err error
		switch a.kind {
		case MoveAside:
			note, err = c.moveAside(a)
		case Delete:
			note, err = c.remove(a)
		case NewDirIV:
			note, err = c.newDirIV(a)
		case ZeroTrailer:
			note, err = c.zeroTrailer(a)
		}
		for _, pi := range a.problems {
			p := &c.rep.Problems[pi]
			if err != nil {
				p.Note = "repair failed: " + err.Error()
				continue
			}
			p.Repaired = true
			p.Note = note
		}
	}
}

// openParent opens a's directory and checks that a.name is still the
// inode the check saw.
func (c *checker) openParent(a *action) (*os.File, error) {
	d, err := c.openDirRel(a.dir)
	if err != nil {
		return nil, err
	}
	if err := checkComponent(a.name); err != nil {
		d.Close()
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(int(d.Fd()), a.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		d.Close()
		return nil, err
	}
	if uint64(st.Dev) != a.dev || uint64(st.Ino) != a.ino {
		d.Close()
		return nil, errChanged
	}
	return d, nil
}

// remove deletes an orphaned sidecar or a config leftover.
func (c *checker) remove(a *action) (string, error) {
	d, err := c.openParent(a)
	if err != nil {
		return "", err
	}
	defer d.Close()
	if err := unix.Unlinkat(int(d.Fd()), a.name, 0); err != nil {
		return "", err
	}
	return "deleted", syncDir(int(d.Fd()))
}

// zeroTrailer stores the tail unit of a file that ends on an extent
// boundary as the 16 zero bytes of the format, if the file is still the
// one the check saw, at the same size.
func (c *checker) zeroTrailer(a *action) (string, error) {
	d, err := c.openParent(a)
	if err != nil {
		return "", err
	}
	defer d.Close()
	// Checked on an O_PATH descriptor before the open: a FIFO or device
	// swapped in since the check is never opened (lowerfd).
	var st unix.Stat_t
	fd, err := lowerfd.OpenRegularAt(int(d.Fd()), a.name, unix.O_WRONLY|unix.O_NONBLOCK, &st, func(st *unix.Stat_t) error {
		if uint64(st.Dev) != a.dev || uint64(st.Ino) != a.ino || st.Size != a.size {
			return errChanged
		}
		return nil
	})
	var nr *lowerfd.NotRegularError
	if errors.As(err, &nr) {
		return "", errChanged
	}
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), a.name)
	defer f.Close()
	var zero [content.TrailerSize]byte
	if n, err := unix.Pwrite(fd, zero[:], a.size-content.TrailerSize); err != nil || n != len(zero) {
		if err == nil {
			err = fmt.Errorf("short write (%d of %d bytes)", n, len(zero))
		}
		return "", err
	}
	return "trailer stored as zeros", unix.Fsync(fd)
}

// newDirIV gives an empty directory a fresh IV, replacing a damaged one.
func (c *checker) newDirIV(a *action) (string, error) {
	d, err := c.openDirRel(a.dir)
	if err != nil {
		return "", err
	}
	defer d.Close()
	dfd := int(d.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(dfd, &st); err != nil {
		return "", err
	}
	if uint64(st.Dev) != a.dev || uint64(st.Ino) != a.ino {
		return "", errChanged
	}
	list, err := d.Readdirnames(-1)
	if err != nil {
		return "", err
	}
	hasIV := false
	for _, n := range list {
		switch {
		case n == names.DirIVFile:
			hasIV = true
		case names.IsTmp(n):
			// An interrupted IV or sidecar write: names nothing.
		default:
			return "", fmt.Errorf("the directory is no longer empty (%q)", n)
		}
	}
	if hasIV {
		var ivst unix.Stat_t
		if err := unix.Fstatat(dfd, names.DirIVFile, &ivst, unix.AT_SYMLINK_NOFOLLOW); err == nil && ivst.Mode&unix.S_IFMT == unix.S_IFDIR {
			return "", fmt.Errorf("%s is a directory", names.DirIVFile)
		}
		if err := unix.Unlinkat(dfd, names.DirIVFile, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return "", err
		}
	}
	iv, err := names.NewDirIV()
	if err != nil {
		return "", err
	}
	if err := writeNew(dfd, names.DirIVFile, iv, 0o400); err != nil {
		return "", err
	}
	return "new directory IV written", syncDir(dfd)
}

// moveAside renames the entry into lost+found under a name the mount can
// show, and drops its old sidecar.
func (c *checker) moveAside(a *action) (string, error) {
	d, err := c.openParent(a)
	if err != nil {
		return "", err
	}
	defer d.Close()
	dfd := int(d.Fd())
	lf, err := c.lostFound()
	if err != nil {
		return "", err
	}
	lfd := int(lf.dir.Fd())
	base := a.plain
	if base == "" {
		base = a.name
	}
	var newPlain string
	for n := 0; ; n++ {
		if n > 1000 {
			return "", errors.New("no free name in " + LostFound)
		}
		newPlain = candidate(base, n)
		lower, long, err := c.lowerIn(lf, newPlain)
		if err != nil {
			return "", err
		}
		if taken, err := exists(lfd, lower); err != nil {
			return "", err
		} else if taken {
			continue
		}
		if long != "" {
			// A leftover sidecar under this name holds exactly this
			// content, the hash says so; replace it.
			side := names.Sidecar(lower)
			unix.Unlinkat(lfd, side, 0)
			if err := writeNew(lfd, side, []byte(long), 0o400); err != nil {
				return "", fmt.Errorf("write sidecar in %s: %w", LostFound, err)
			}
		}
		err = renameNoReplace(dfd, a.name, lfd, lower)
		if errors.Is(err, unix.EEXIST) {
			continue
		}
		if err != nil {
			if long != "" {
				unix.Unlinkat(lfd, names.Sidecar(lower), 0)
			}
			return "", err
		}
		break
	}
	if c.names != nil && names.IsLong(a.name) {
		// The old sidecar belonged to the old name.
		if err := unix.Unlinkat(dfd, names.Sidecar(a.name), 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return "", fmt.Errorf("moved, but removing the old sidecar: %w", err)
		}
	}
	if err := syncDir(lfd); err != nil {
		return "", err
	}
	if err := syncDir(dfd); err != nil {
		return "", err
	}
	return "moved to " + path.Join("/", LostFound, newPlain), nil
}

// candidate is the n-th name tried for base in lost+found: base itself,
// then base.1, base.2, … cut to the longest plaintext name.
func candidate(base string, n int) string {
	suffix := ""
	if n > 0 {
		suffix = fmt.Sprintf(".%d", n)
	}
	if max := names.MaxPlainName - len(suffix); len(base) > max {
		base = base[:max]
	}
	return base + suffix
}

// lowerIn maps a plaintext name in lost+found to its lower name and, for a
// long name, the content of its sidecar.
func (c *checker) lowerIn(lf *lostFound, plain string) (lower, long string, err error) {
	if err := names.CheckPlain(plain); err != nil {
		return "", "", fmt.Errorf("%w: %q", err, plain)
	}
	if c.names == nil {
		return plain, "", nil
	}
	cName, err := c.names.Encrypt(plain, lf.iv)
	if err != nil {
		return "", "", err
	}
	lower, isLong := names.Lower(cName)
	if isLong {
		return lower, cName, nil
	}
	return lower, "", nil
}

// lostFound opens lost+found, creating it on first use.
func (c *checker) lostFound() (*lostFound, error) {
	if c.lf != nil {
		return c.lf, nil
	}
	rfd := int(c.root.Fd())
	lfLower := LostFound
	var rootIV []byte
	if c.names != nil {
		iv, err := readSmall(rfd, names.DirIVFile, names.DirIVSize+1)
		if err != nil || len(iv) != names.DirIVSize {
			return nil, fmt.Errorf("the root directory IV is unusable, so %s cannot be named", LostFound)
		}
		rootIV = iv
		cName, err := c.names.Encrypt(LostFound, rootIV)
		if err != nil {
			return nil, err
		}
		lfLower, _ = names.Lower(cName)
	}
	var st unix.Stat_t
	err := unix.Fstatat(rfd, lfLower, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		if err := c.createLostFound(lfLower); err != nil {
			return nil, fmt.Errorf("create %s: %w", LostFound, err)
		}
	case err != nil:
		return nil, err
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return nil, fmt.Errorf("/%s exists and is not a directory (lower %s)", LostFound, lfLower)
	}
	d, err := openAt(rfd, lfLower, unix.O_DIRECTORY, nil)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", LostFound, err)
	}
	lf := &lostFound{dir: d, lower: lfLower}
	if c.names != nil {
		iv, err := readSmall(int(d.Fd()), names.DirIVFile, names.DirIVSize+1)
		if err != nil || len(iv) != names.DirIVSize {
			d.Close()
			return nil, fmt.Errorf("/%s has no usable directory IV", LostFound)
		}
		lf.iv = iv
	}
	c.lf = lf
	c.rep.LostFound = lfLower
	return lf, nil
}

// createLostFound makes lost+found under a temporary name, gives it its
// IV and renames it into place, so that a crash never leaves a
// lost+found without IV.
func (c *checker) createLostFound(lfLower string) error {
	rfd := int(c.root.Fd())
	var r [6]byte
	if _, err := rand.Read(r[:]); err != nil {
		return err
	}
	tmp := lostFoundTmp + hex.EncodeToString(r[:])
	if err := unix.Mkdirat(rfd, tmp, 0o700); err != nil {
		return err
	}
	d, err := openAt(rfd, tmp, unix.O_DIRECTORY, nil)
	if err != nil {
		unix.Unlinkat(rfd, tmp, unix.AT_REMOVEDIR)
		return err
	}
	defer d.Close()
	if c.names != nil {
		iv, err := names.NewDirIV()
		if err == nil {
			err = writeNew(int(d.Fd()), names.DirIVFile, iv, 0o400)
		}
		if err == nil {
			err = syncDir(int(d.Fd()))
		}
		if err != nil {
			unix.Unlinkat(int(d.Fd()), names.DirIVFile, 0)
			unix.Unlinkat(rfd, tmp, unix.AT_REMOVEDIR)
			return err
		}
	}
	if err := renameNoReplace(rfd, tmp, rfd, lfLower); err != nil {
		unix.Unlinkat(int(d.Fd()), names.DirIVFile, 0)
		unix.Unlinkat(rfd, tmp, unix.AT_REMOVEDIR)
		return err
	}
	return syncDir(rfd)
}

// renameNoReplace renames without ever replacing an existing target.
// Filesystems without RENAME_NOREPLACE get a check, then a rename.
func renameNoReplace(oldDir int, oldName string, newDir int, newName string) error {
	if err := checkComponent(oldName); err != nil {
		return err
	}
	if err := checkComponent(newName); err != nil {
		return err
	}
	err := unix.Renameat2(oldDir, oldName, newDir, newName, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOSYS) {
		return err
	}
	if taken, err := exists(newDir, newName); err != nil {
		return err
	} else if taken {
		return unix.EEXIST
	}
	return unix.Renameat(oldDir, oldName, newDir, newName)
}
