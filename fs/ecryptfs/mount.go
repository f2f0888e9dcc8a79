package ecryptfs

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
	"github.com/twincrypt/twincrypt/measure"
)

// A read-only view of an eCryptfs lower tree. It is a small node tree of
// its own rather than a transform of the fs engine: the engine's
// transforms map one lower file to one plaintext file of the same layout
// and write, and eCryptfs needs neither; reading needs only lookup,
// listing, attributes, read and readlink.

// MountOptions configure Mount.
type MountOptions struct {
	// Recorder times every operation, as on twincrypt's own mounts (nil:
	// instrument off).
	Recorder   *measure.Recorder
	AllowOther bool
	Log        zerolog.Logger
	Debug      bool
}

// Mount shows the plaintext of the eCryptfs lower tree lower at mnt,
// read-only. Entries that cannot be decrypted are left out of listings
// and logged; a damaged file reads as EIO.
func Mount(lower, mnt string, kr *ecryptfs.Keyring, o MountOptions) (*fuse.Server, error) {
	m := &mountState{lower: lower, kr: kr, log: o.Log, rec: o.Recorder}
	root := &node{m: m, lowerRel: ""}
	sec := time.Second
	return gofs.Mount(mnt, root, &gofs.Options{
		EntryTimeout: &sec, AttrTimeout: &sec,
		MountOptions: fuse.MountOptions{
			FsName: lower, Name: "twincrypt-ecryptfs", AllowOther: o.AllowOther, Debug: o.Debug,
			Options: []string{"ro", "default_permissions"},
		},
	})
}

type mountState struct {
	lower string
	kr    *ecryptfs.Keyring
	log   zerolog.Logger
	rec   *measure.Recorder
}

type node struct {
	gofs.Inode
	m        *mountState
	lowerRel string

	mu      sync.Mutex
	size    int64 // plaintext size of a regular file, -1 until read
	sizeErr error
	names   map[string]string // plaintext -> lower, for a directory
}

var (
	_ = (gofs.NodeLookuper)((*node)(nil))
	_ = (gofs.NodeReaddirer)((*node)(nil))
	_ = (gofs.NodeGetattrer)((*node)(nil))
	_ = (gofs.NodeOpener)((*node)(nil))
	_ = (gofs.NodeReader)((*node)(nil))
	_ = (gofs.NodeReadlinker)((*node)(nil))
	_ = (gofs.NodeGetxattrer)((*node)(nil))
	_ = (gofs.NodeListxattrer)((*node)(nil))
)

func (n *node) path() string { return filepath.Join(n.m.lower, n.lowerRel) }

// listing maps a directory's plaintext names to lower names; names that
// cannot be decrypted are logged and left out.
func (n *node) listing(sp *measure.Span) (map[string]string, syscall.Errno) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.names != nil {
		return n.names, 0
	}
	t0 := time.Now()
	des, err := os.ReadDir(n.path())
	sp.AddLower(time.Since(t0))
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	names := make(map[string]string, len(des))
	t0 = time.Now()
	defer func() { sp.AddCrypto(time.Since(t0)) }()
	for _, de := range des {
		plain, err := ecryptfs.DecryptName(de.Name(), n.m.kr)
		if err != nil {
			n.m.log.Warn().Str("lower", filepath.Join(n.lowerRel, de.Name())).Err(err).Msg("name left out")
			continue
		}
		names[plain] = de.Name()
	}
	n.names = names
	return names, 0
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (ino *gofs.Inode, errno syscall.Errno) {
	sp := n.m.rec.Start(measure.OpLookup, n.StableAttr().Ino)
	defer func() { sp.End(errno) }()
	names, errno := n.listing(sp)
	if errno != 0 {
		return nil, errno
	}
	lowerName, ok := names[name]
	if !ok {
		return nil, syscall.ENOENT
	}
	child := &node{m: n.m, lowerRel: filepath.Join(n.lowerRel, lowerName), size: -1}
	var st syscall.Stat_t
	t0 := time.Now()
	err := syscall.Lstat(child.path(), &st)
	sp.AddLower(time.Since(t0))
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	if errno := child.fill(&st, &out.Attr, sp); errno != 0 {
		return nil, errno
	}
	return n.NewInode(ctx, child, gofs.StableAttr{Mode: st.Mode & syscall.S_IFMT, Ino: st.Ino}), 0
}

func (n *node) Readdir(ctx context.Context) (ds gofs.DirStream, errno syscall.Errno) {
	sp := n.m.rec.Start(measure.OpReaddir, n.StableAttr().Ino)
	defer func() { sp.End(errno) }()
	names, errno := n.listing(sp)
	if errno != 0 {
		return nil, errno
	}
	entries := make([]fuse.DirEntry, 0, len(names))
	t0 := time.Now()
	for plain, lower := range names {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(n.path(), lower), &st); err != nil {
			continue
		}
		entries = append(entries, fuse.DirEntry{Name: plain, Mode: st.Mode, Ino: st.Ino})
	}
	sp.AddLower(time.Since(t0))
	return gofs.NewListDirStream(entries), 0
}

// fill sets the plaintext attributes: the lower inode's, with the size
// from the header for files and the decrypted target's length for links.
func (n *node) fill(st *syscall.Stat_t, out *fuse.Attr, sp *measure.Span) syscall.Errno {
	out.FromStat(st)
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFREG:
		size, err := n.plainSize(sp)
		if err != nil {
			n.m.log.Warn().Str("lower", n.lowerRel).Err(err).Msg("unreadable header")
			return syscall.EIO
		}
		out.Size = uint64(size)
	case syscall.S_IFLNK:
		t, errno := n.target(sp)
		if errno != 0 {
			return errno
		}
		out.Size = uint64(len(t))
	}
	out.Blocks = (out.Size + 511) / 512
	return 0
}

func (n *node) plainSize(sp *measure.Span) (int64, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.size >= 0 || n.sizeErr != nil {
		return n.size, n.sizeErr
	}
	// Header read and FEK unwrapped: counted as crypto.
	t0 := time.Now()
	defer func() { sp.AddCrypto(time.Since(t0)) }()
	f, fd, err := ecryptfs.OpenPath(n.path(), n.m.kr)
	if err != nil {
		n.sizeErr = err
		return 0, err
	}
	fd.Close()
	n.size = f.Size()
	return n.size, nil
}

func (n *node) target(sp *measure.Span) ([]byte, syscall.Errno) {
	t0 := time.Now()
	t, err := os.Readlink(n.path())
	sp.AddLower(time.Since(t0))
	if err != nil {
		return nil, gofs.ToErrno(err)
	}
	t0 = time.Now()
	plain, err := ecryptfs.DecryptName(t, n.m.kr)
	sp.AddCrypto(time.Since(t0))
	if err != nil {
		n.m.log.Warn().Str("lower", n.lowerRel).Err(err).Msg("unreadable link target")
		return nil, syscall.EIO
	}
	return []byte(plain), 0
}

func (n *node) Getattr(ctx context.Context, f gofs.FileHandle, out *fuse.AttrOut) (errno syscall.Errno) {
	sp := n.m.rec.Start(measure.OpGetattr, n.StableAttr().Ino)
	defer func() { sp.End(errno) }()
	var st syscall.Stat_t
	t0 := time.Now()
	err := syscall.Lstat(n.path(), &st)
	sp.AddLower(time.Since(t0))
	if err != nil {
		return gofs.ToErrno(err)
	}
	return n.fill(&st, &out.Attr, sp)
}

func (n *node) Readlink(ctx context.Context) (t []byte, errno syscall.Errno) {
	sp := n.m.rec.Start(measure.OpReadlink, n.StableAttr().Ino)
	defer func() { sp.End(errno) }()
	return n.target(sp)
}

type handle struct {
	f  *ecryptfs.File
	fd *os.File
}

var _ = (gofs.FileReleaser)((*handle)(nil))

func (h *handle) Release(ctx context.Context) syscall.Errno {
	h.fd.Close()
	return 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fh gofs.FileHandle, fl uint32, errno syscall.Errno) {
	sp := n.m.rec.Start(measure.OpOpen, n.StableAttr().Ino)
	defer func() { sp.End(errno) }()
	if flags&(syscall.O_WRONLY|syscall.O_RDWR|syscall.O_TRUNC|syscall.O_APPEND) != 0 {
		return nil, 0, syscall.EROFS
	}
	t0 := time.Now()
	f, fd, err := ecryptfs.OpenPath(n.path(), n.m.kr)
	sp.AddCrypto(time.Since(t0))
	if err != nil {
		n.m.log.Warn().Str("lower", n.lowerRel).Err(err).Msg("open")
		return nil, 0, syscall.EIO
	}
	return &handle{f: f, fd: fd}, fuse.FOPEN_KEEP_CACHE, 0
}

func (n *node) Read(ctx context.Context, fh gofs.FileHandle, dest []byte, off int64) (rr fuse.ReadResult, errno syscall.Errno) {
	sp := n.m.rec.Start(measure.OpRead, n.StableAttr().Ino)
	defer func() { sp.End(errno) }()
	h, ok := fh.(*handle)
	if !ok {
		return nil, syscall.EBADF
	}
	t0 := time.Now()
	k, lower, err := h.f.ReadAtTimed(dest, off)
	sp.AddLower(lower)
	sp.AddCrypto(time.Since(t0) - lower)
	sp.SetIO(off, k)
	if err != nil && !errors.Is(err, io.EOF) {
		n.m.log.Warn().Str("lower", n.lowerRel).Err(err).Msg("read")
		return nil, syscall.EIO
	}
	return fuse.ReadResultData(dest[:k]), 0
}

// Getxattr and Listxattr show the lower entry's user.* xattrs but
// eCryptfs's own header.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (sz uint32, errno syscall.Errno) {
	sp := n.m.rec.Start(measure.OpGetxattr, n.StableAttr().Ino)
	defer func() { sp.End(errno) }()
	t0 := time.Now()
	xs, err := lowerXattrs(n.path())
	sp.AddLower(time.Since(t0))
	if err != nil {
		return 0, gofs.ToErrno(err)
	}
	v, ok := xs[attr]
	if !ok {
		return 0, syscall.ENODATA
	}
	if len(dest) < len(v) {
		return uint32(len(v)), syscall.ERANGE
	}
	return uint32(copy(dest, v)), 0
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (sz uint32, errno syscall.Errno) {
	sp := n.m.rec.Start(measure.OpListxattr, n.StableAttr().Ino)
	defer func() { sp.End(errno) }()
	t0 := time.Now()
	xs, err := lowerXattrs(n.path())
	sp.AddLower(time.Since(t0))
	if err != nil {
		return 0, gofs.ToErrno(err)
	}
	var b []byte
	for name := range xs {
		b = append(append(b, name...), 0)
	}
	if len(dest) < len(b) {
		return uint32(len(b)), syscall.ERANGE
	}
	return uint32(copy(dest, b)), 0
}
