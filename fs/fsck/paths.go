package fsck

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// Paths maps the plaintext paths of a volume to the lower paths that
// store them, and back, offline: what one needs to restore a single file
// from a backup of LOWER, or to name the plaintext of a lower path a tool
// reported (gocryptfs-xray's -encrypt-paths and -decrypt-paths). It reads
// the directory IVs and long-name sidecars on the way, never following a
// symlink, and writes nothing.
type Paths struct {
	root  *os.File
	names *names.Cipher // nil for a volume with plaintext names
}

// ErrNotVolumeName says that a lower name is none of the volume's: it
// does not decrypt under its directory's IV (twincrypt's own files, such
// as the config and the IV files, are among these).
var ErrNotVolumeName = errors.New("not a name of this volume")

// OpenPaths opens LOWER for path mapping with the unlocked master key.
func OpenPaths(lower string, cfg *config.Config, master []byte) (*Paths, error) {
	p := &Paths{}
	if !cfg.PlaintextNames {
		nameKey := keys.Derive(master, "names", nil, names.KeySize)
		var err error
		p.names, err = names.New(nameKey)
		keys.Wipe(nameKey)
		if err != nil {
			return nil, err
		}
	}
	root, err := openRoot(lower)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", lower, err)
	}
	p.root = root
	return p, nil
}

// Close releases LOWER.
func (p *Paths) Close() error { return p.root.Close() }

// components splits a slash-separated path, relative or from the
// volume's root, dropping empty and "." components; ".." is refused.
func components(path string) ([]string, error) {
	var out []string
	for _, c := range strings.Split(path, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("%q: \"..\" is not allowed: give the path from the volume's root", path)
		}
		out = append(out, c)
	}
	return out, nil
}

// ownInRoot reports whether the lower name lower, in LOWER's root, is
// one of twincrypt's own files there (the config, its backup and
// temporary files, the long-link store), which the mount neither shows
// nor lets anyone create, whatever the volume's names.
func ownInRoot(lower string) bool {
	return lower == config.FileName || lower == config.FileName+".bak" ||
		strings.HasPrefix(lower, config.FileName+".tmp") || lower == links.StoreDir
}

// dirIV reads the IV of the lower directory dfd.
func dirIV(dfd int) ([]byte, error) {
	iv, err := readSmall(dfd, names.DirIVFile, names.DirIVSize+1)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", names.DirIVFile, err)
	}
	if len(iv) != names.DirIVSize {
		return nil, fmt.Errorf("%s holds %d bytes, want %d", names.DirIVFile, len(iv), names.DirIVSize)
	}
	return iv, nil
}

// walk calls step for each component of comps with the lower directory
// that holds it, and opens the lower directory step names for the next.
func (p *Paths) walk(comps []string, step func(i, dfd int) (lowerName string, err error)) error {
	fd, err := unix.Openat(int(p.root.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { unix.Close(fd) }()
	for i := range comps {
		name, err := step(i, fd)
		if err != nil || i == len(comps)-1 {
			return err
		}
		next, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			if errors.Is(err, unix.ELOOP) {
				err = unix.ENOTDIR // a symlink: not a directory to go through
			}
			return fmt.Errorf("/%s: %w", strings.Join(comps[:i+1], "/"), err)
		}
		unix.Close(fd)
		fd = next
	}
	return nil
}

// Encrypt returns the lower path, relative to LOWER, of the plaintext
// path plain (from the volume's root), and whether LOWER holds an entry
// there. Every directory on the way must exist. long says the last
// component is a long name, whose full encrypted name is in the sidecar
// of the same name plus names.LongSuffix beside it.
func (p *Paths) Encrypt(plain string) (lowerRel string, exists, long bool, err error) {
	comps, err := components(plain)
	if err != nil || len(comps) == 0 {
		return ".", err == nil, false, err
	}
	out := make([]string, len(comps))
	err = p.walk(comps, func(i, dfd int) (string, error) {
		comp := comps[i]
		if err := names.CheckPlain(comp); err != nil {
			return "", fmt.Errorf("%q: %w", comp, err)
		}
		if i == 0 && p.names == nil && ownInRoot(comp) {
			return "", fmt.Errorf("/%s: twincrypt's own file: %w", comp, ErrNotVolumeName)
		}
		out[i], long = comp, false
		if p.names != nil {
			iv, err := dirIV(dfd)
			if err != nil {
				return "", fmt.Errorf("/%s: %w", strings.Join(comps[:i], "/"), err)
			}
			cName, err := p.names.Encrypt(comp, iv)
			if err != nil {
				return "", err
			}
			out[i], long = names.Lower(cName)
		}
		if i == len(comps)-1 {
			var st unix.Stat_t
			exists = unix.Fstatat(dfd, out[i], &st, unix.AT_SYMLINK_NOFOLLOW) == nil
		}
		return out[i], nil
	})
	if err != nil {
		return "", false, false, err
	}
	return strings.Join(out, "/"), exists, long, nil
}

// Decrypt returns the plaintext path, from the volume's root, of the
// lower path lowerRel (relative to LOWER). A component that is no name of
// the volume gives ErrNotVolumeName.
func (p *Paths) Decrypt(lowerRel string) (string, error) {
	comps, err := components(lowerRel)
	if err != nil || len(comps) == 0 {
		return "/", err
	}
	out := make([]string, len(comps))
	err = p.walk(comps, func(i, dfd int) (string, error) {
		comp := comps[i]
		if err := checkComponent(comp); err != nil {
			return "", err
		}
		out[i] = comp
		at := "/" + strings.Join(comps[:i+1], "/")
		if i == 0 && ownInRoot(comp) {
			return "", fmt.Errorf("%s: twincrypt's own file: %w", at, ErrNotVolumeName)
		}
		if p.names == nil {
			return comp, nil
		}
		if comp == names.DirIVFile || names.IsTmp(comp) || names.IsSidecar(comp) {
			return "", fmt.Errorf("%s: twincrypt's own file: %w", at, ErrNotVolumeName)
		}
		iv, err := dirIV(dfd)
		if err != nil {
			return "", fmt.Errorf("/%s: %w", strings.Join(comps[:i], "/"), err)
		}
		cName := comp
		if names.IsLong(comp) {
			side, err := readSmall(dfd, names.Sidecar(comp), names.MaxSidecarSize)
			if err != nil {
				return "", fmt.Errorf("%s: long-name sidecar: %w", at, err)
			}
			if cName, err = names.LongName(comp, side); err != nil {
				return "", fmt.Errorf("%s: %w", at, err)
			}
		}
		plain, err := p.names.Decrypt(cName, iv)
		if err != nil {
			return "", fmt.Errorf("%s: %w", at, ErrNotVolumeName)
		}
		out[i] = plain
		return comp, nil
	})
	if err != nil {
		return "", err
	}
	return "/" + strings.Join(out, "/"), nil
}
