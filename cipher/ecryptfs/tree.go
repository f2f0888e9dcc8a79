package ecryptfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// Entry is one entry of a lower tree with its plaintext name.
type Entry struct {
	Rel      string      // plaintext path relative to the tree's root, "/"-separated
	LowerRel string      // the lower path relative to the lower root
	Info     fs.FileInfo // lstat of the lower entry (the size is the lower size)
	Target   string      // plaintext symlink target
	Err      error       // this entry cannot be read (name, link target); the walk goes on
}

// Walk lists the lower tree at root in plaintext, parents before children
// and each directory's entries sorted by plaintext name. An entry whose
// name or link target cannot be decrypted comes with Err set and, for a
// directory, without its children; fn's error stops the walk.
func Walk(root string, kr *Keyring, fn func(e Entry) error) error {
	return walkDir(root, "", "", kr, fn)
}

func walkDir(root, rel, lowerRel string, kr *Keyring, fn func(e Entry) error) error {
	des, err := os.ReadDir(filepath.Join(root, lowerRel))
	if err != nil {
		return fmt.Errorf("list %s: %w", filepath.Join(root, lowerRel), err)
	}
	type item struct {
		plain, lower string
		err          error
	}
	items := make([]item, 0, len(des))
	for _, de := range des {
		plain, err := DecryptName(de.Name(), kr)
		if err != nil {
			plain = de.Name()
		}
		items = append(items, item{plain, de.Name(), err})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].plain < items[j].plain })
	for _, it := range items {
		e := Entry{Rel: joinRel(rel, it.plain), LowerRel: joinRel(lowerRel, it.lower), Err: it.err}
		lp := filepath.Join(root, e.LowerRel)
		e.Info, err = os.Lstat(lp)
		if err != nil {
			if e.Err == nil {
				e.Err = err
			}
			if err := fn(e); err != nil {
				return err
			}
			continue
		}
		if e.Err == nil && e.Info.Mode()&fs.ModeSymlink != 0 {
			var t string
			if t, err = os.Readlink(lp); err == nil {
				t, err = DecryptName(t, kr)
			}
			e.Target, e.Err = t, err
		}
		if err := fn(e); err != nil {
			return err
		}
		if e.Err == nil && e.Info.IsDir() {
			if err := walkDir(root, e.Rel, e.LowerRel, kr, fn); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinRel(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// Inode returns the lower inode and link count of an entry (hard links
// share the inode in the lower tree as in the plaintext view).
func Inode(fi fs.FileInfo) (ino uint64, nlink uint64) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino, uint64(st.Nlink)
	}
	return 0, 1
}
