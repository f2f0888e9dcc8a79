package crashsim

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Inode is one file, directory, symlink or special file of the model.
type Inode struct {
	Type     uint32 // S_IFMT bits
	Mode     uint32 // permission bits (07777)
	UID, GID int
	Rdev     uint32
	// Data holds the persisted bytes; it may be longer than Size (a page
	// written past a size that did not persist) or shorter (a hole).
	Data    []byte
	Size    int64
	Target  string
	Xattrs  map[string][]byte
	Entries map[string]ID // directories
}

// Tree is a filesystem as the model sees it: inodes by ID, the root 0.
type Tree struct {
	Inodes map[ID]*Inode
}

// Clone returns a deep copy of t (file data is copied when written).
func (t *Tree) Clone() *Tree {
	c := &Tree{Inodes: make(map[ID]*Inode, len(t.Inodes))}
	for id, n := range t.Inodes {
		m := *n
		if n.Entries != nil {
			m.Entries = make(map[string]ID, len(n.Entries))
			for k, v := range n.Entries {
				m.Entries[k] = v
			}
		}
		if n.Xattrs != nil {
			m.Xattrs = make(map[string][]byte, len(n.Xattrs))
			for k, v := range n.Xattrs {
				m.Xattrs[k] = v
			}
		}
		// Data is replaced, never written in place, by apply.
		c.Inodes[id] = &m
	}
	return c
}

// LoadTree reads dir into a model tree. idOf gives the ID of each inode
// number (hard links share one); the root gets ID 0 from the caller.
func LoadTree(dir string, idOf func(ino uint64) ID) (*Tree, error) {
	t := &Tree{Inodes: map[ID]*Inode{}}
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return nil, err
	}
	root, err := loadInode(dir, &st)
	if err != nil {
		return nil, err
	}
	t.Inodes[0] = root
	var walk func(p string, n *Inode) error
	walk = func(p string, n *Inode) error {
		ents, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		for _, e := range ents {
			cp := filepath.Join(p, e.Name())
			var st syscall.Stat_t
			if err := syscall.Lstat(cp, &st); err != nil {
				return err
			}
			id := idOf(st.Ino)
			n.Entries[e.Name()] = id
			if _, seen := t.Inodes[id]; seen {
				continue
			}
			c, err := loadInode(cp, &st)
			if err != nil {
				return err
			}
			t.Inodes[id] = c
			if c.Type == syscall.S_IFDIR {
				if err := walk(cp, c); err != nil {
					return err
				}
			}
		}
		return nil
	}
	return t, walk(dir, root)
}

func loadInode(p string, st *syscall.Stat_t) (*Inode, error) {
	n := &Inode{Type: st.Mode & syscall.S_IFMT, Mode: st.Mode & 07777, UID: int(st.Uid), GID: int(st.Gid), Rdev: uint32(st.Rdev), Size: st.Size}
	switch n.Type {
	case syscall.S_IFREG:
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		n.Data = b
	case syscall.S_IFDIR:
		n.Entries = map[string]ID{}
		n.Size = 0
	case syscall.S_IFLNK:
		t, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		n.Target = t
	default:
		n.Size = 0
	}
	if n.Type != syscall.S_IFLNK {
		x, err := readXattrs(p)
		if err != nil {
			return nil, err
		}
		n.Xattrs = x
	}
	return n, nil
}

func readXattrs(p string) (map[string][]byte, error) {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil || sz == 0 {
		return nil, nil
	}
	buf := make([]byte, sz)
	sz, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, fmt.Errorf("listxattr %s: %w", p, err)
	}
	var m map[string][]byte
	for _, name := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		if name == "" || strings.HasPrefix(name, "security.") || strings.HasPrefix(name, "system.") {
			continue
		}
		vs, err := unix.Lgetxattr(p, name, nil)
		if err != nil {
			return nil, fmt.Errorf("getxattr %s %s: %w", p, name, err)
		}
		v := make([]byte, vs)
		vs, err = unix.Lgetxattr(p, name, v)
		if err != nil {
			return nil, fmt.Errorf("getxattr %s %s: %w", p, name, err)
		}
		if m == nil {
			m = map[string][]byte{}
		}
		m[name] = v[:vs]
	}
	return m, nil
}

// Apply applies op to t. An operation whose inode or directory is not in
// t (its creation did not persist) does nothing.
func (t *Tree) Apply(op Op) {
	n := t.Inodes[op.Ino]
	switch op.Kind {
	case OpCreate:
		d := t.Inodes[op.Dir]
		if d == nil || d.Entries == nil {
			return
		}
		c := &Inode{Type: op.Type, Mode: op.Mode, UID: op.UID, GID: op.GID, Rdev: op.Rdev, Target: op.Target}
		if op.Type == syscall.S_IFDIR {
			c.Entries = map[string]ID{}
		}
		t.Inodes[op.Ino] = c
		d.Entries[op.Name] = op.Ino
	case OpLink:
		if d := t.Inodes[op.Dir]; d != nil && d.Entries != nil && n != nil {
			d.Entries[op.Name] = op.Ino
		}
	case OpUnlink:
		if d := t.Inodes[op.Dir]; d != nil && d.Entries != nil {
			delete(d.Entries, op.Name)
		}
	case OpRename:
		d, d2 := t.Inodes[op.Dir], t.Inodes[op.Dir2]
		if d == nil || d2 == nil || d.Entries == nil || d2.Entries == nil {
			return
		}
		src, ok := d.Entries[op.Name]
		if !ok {
			return
		}
		if op.Flags&renameExchange != 0 {
			dst, ok := d2.Entries[op.Name2]
			if !ok {
				return
			}
			d.Entries[op.Name], d2.Entries[op.Name2] = dst, src
			return
		}
		delete(d.Entries, op.Name)
		d2.Entries[op.Name2] = src
	case OpTruncate, OpSetSize:
		if n == nil {
			return
		}
		if op.Kind == OpTruncate || op.Size < n.Size {
			// Bytes past the new end are gone; a truncate that grows the
			// file reads as zeros there.
			cut := op.Size
			if op.Kind == OpTruncate && n.Size < cut {
				cut = n.Size
			}
			if int64(len(n.Data)) > cut {
				n.Data = append([]byte(nil), n.Data[:cut]...)
			}
		}
		n.Size = op.Size
	case OpChmod:
		if n != nil {
			n.Mode = op.Mode
		}
	case OpChown:
		if n != nil {
			n.UID, n.GID = op.UID, op.GID
		}
	case OpSetxattr:
		if n != nil {
			x := map[string][]byte{}
			for k, v := range n.Xattrs {
				x[k] = v
			}
			x[op.Xattr] = op.Data
			n.Xattrs = x
		}
	case OpRemovexattr:
		if n != nil && n.Xattrs != nil {
			x := map[string][]byte{}
			for k, v := range n.Xattrs {
				if k != op.Xattr {
					x[k] = v
				}
			}
			n.Xattrs = x
		}
	case OpWrite:
		if n == nil || n.Type != syscall.S_IFREG {
			return
		}
		end := op.Off + int64(len(op.Data))
		d := n.Data
		if int64(len(d)) < end {
			d = append(append(make([]byte, 0, end), d...), make([]byte, end-int64(len(d)))...)
		} else {
			d = append([]byte(nil), d...)
		}
		copy(d[op.Off:], op.Data)
		n.Data = d
	}
}

// Content is what reading the regular file n returns.
func (n *Inode) Content() []byte {
	b := make([]byte, n.Size)
	copy(b, n.Data)
	return b
}

// Materialise writes t into the empty directory dir and returns the path
// (relative to dir, "." for the root) of every reachable inode's entries.
func (t *Tree) Materialise(dir string) (map[string]ID, error) {
	paths := map[string]ID{".": 0}
	first := map[ID]string{0: "."}
	var dirs []string
	var modes []func() error
	var walk func(rel string, n *Inode) error
	walk = func(rel string, d *Inode) error {
		names := make([]string, 0, len(d.Entries))
		for name := range d.Entries {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			id := d.Entries[name]
			n := t.Inodes[id]
			if n == nil {
				continue
			}
			crel := filepath.Join(rel, name)
			p := filepath.Join(dir, crel)
			if prev, ok := first[id]; ok && n.Type != syscall.S_IFDIR {
				paths[crel] = id
				if err := os.Link(filepath.Join(dir, prev), p); err != nil {
					return err
				}
				continue
			} else if ok {
				// A directory reachable twice (a rename loop the model
				// cannot rule out): keep the first.
				continue
			}
			paths[crel], first[id] = id, crel
			switch n.Type {
			case syscall.S_IFDIR:
				if err := os.Mkdir(p, 0700); err != nil {
					return err
				}
				if err := walk(crel, n); err != nil {
					return err
				}
				dirs = append(dirs, crel)
			case syscall.S_IFREG:
				if err := os.WriteFile(p, n.Content(), 0600); err != nil {
					return err
				}
			case syscall.S_IFLNK:
				if err := os.Symlink(n.Target, p); err != nil {
					return err
				}
			default:
				if err := unix.Mknod(p, n.Type|0600, int(n.Rdev)); err != nil {
					return err
				}
			}
			if n.Type != syscall.S_IFLNK {
				for k, v := range n.Xattrs {
					if err := unix.Lsetxattr(p, k, v, 0); err != nil {
						return fmt.Errorf("setxattr %s %s: %w", crel, k, err)
					}
				}
				mode := n.Mode
				modes = append(modes, func() error { return os.Chmod(p, os.FileMode(mode&0777)|modeBits(mode)) })
			}
		}
		return nil
	}
	if err := walk(".", t.Inodes[0]); err != nil {
		return nil, err
	}
	_ = dirs
	// Modes last, deepest first (the list is in pre-order): a read-only
	// directory is filled before it becomes read-only.
	for i := len(modes) - 1; i >= 0; i-- {
		if err := modes[i](); err != nil {
			return nil, err
		}
	}
	if root := t.Inodes[0]; root != nil {
		if err := os.Chmod(dir, os.FileMode(root.Mode&0777)|modeBits(root.Mode)); err != nil {
			return nil, err
		}
	}
	return paths, nil
}

func modeBits(m uint32) os.FileMode {
	var f os.FileMode
	if m&syscall.S_ISUID != 0 {
		f |= os.ModeSetuid
	}
	if m&syscall.S_ISGID != 0 {
		f |= os.ModeSetgid
	}
	if m&syscall.S_ISVTX != 0 {
		f |= os.ModeSticky
	}
	return f
}

// Diff compares the model t with the directory dir (both read as trees)
// and describes the first differences; "" when they agree. It checks the
// recorder and the model against the real filesystem: replaying the whole
// log must give what the workload left.
func Diff(t *Tree, dir string) string {
	var out []string
	real, err := LoadTree(dir, func(uint64) ID { return 1 })
	if err != nil {
		return err.Error()
	}
	var cmp func(rel string, a *Inode, aTree *Tree, b *Inode)
	cmp = func(rel string, a *Inode, aTree *Tree, b *Inode) {
		if a.Type != b.Type {
			out = append(out, fmt.Sprintf("%s: type %o, want %o", rel, a.Type, b.Type))
			return
		}
		if a.Mode != b.Mode {
			out = append(out, fmt.Sprintf("%s: mode %o, want %o", rel, a.Mode, b.Mode))
		}
		switch a.Type {
		case syscall.S_IFREG:
			if !bytes.Equal(a.Content(), b.Content()) {
				out = append(out, fmt.Sprintf("%s: content differs (model %d bytes, real %d)", rel, a.Size, b.Size))
			}
		case syscall.S_IFLNK:
			if a.Target != b.Target {
				out = append(out, fmt.Sprintf("%s: target %q, want %q", rel, a.Target, b.Target))
			}
		}
		if a.Type != syscall.S_IFLNK && fmt.Sprint(a.Xattrs) != fmt.Sprint(b.Xattrs) && !(len(a.Xattrs) == 0 && len(b.Xattrs) == 0) {
			out = append(out, fmt.Sprintf("%s: xattrs differ", rel))
		}
		if a.Type != syscall.S_IFDIR {
			return
		}
		// b's children are in real: LoadTree with a constant ID maps every
		// child to 1, so walk real by reading dir again.
		ents, err := os.ReadDir(filepath.Join(dir, rel))
		if err != nil {
			out = append(out, err.Error())
			return
		}
		seen := map[string]bool{}
		for _, e := range ents {
			seen[e.Name()] = true
			cid, ok := a.Entries[e.Name()]
			if !ok {
				out = append(out, fmt.Sprintf("%s: in the directory, not in the model", filepath.Join(rel, e.Name())))
				continue
			}
			var st syscall.Stat_t
			cp := filepath.Join(dir, rel, e.Name())
			if err := syscall.Lstat(cp, &st); err != nil {
				out = append(out, err.Error())
				continue
			}
			bn, err := loadInode(cp, &st)
			if err != nil {
				out = append(out, err.Error())
				continue
			}
			cmp(filepath.Join(rel, e.Name()), aTree.Inodes[cid], aTree, bn)
		}
		for name := range a.Entries {
			if !seen[name] {
				out = append(out, fmt.Sprintf("%s: in the model, not in the directory", filepath.Join(rel, name)))
			}
		}
	}
	cmp(".", t.Inodes[0], t, real.Inodes[0])
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... %d more", len(out)-10))
	}
	return strings.Join(out, "; ")
}
