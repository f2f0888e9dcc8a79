package fs

import (
	"bytes"
	"context"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"golang.org/x/sys/unix"
)

var (
	_ = (fs.NodeGetxattrer)((*node)(nil))
	_ = (fs.NodeSetxattrer)((*node)(nil))
	_ = (fs.NodeListxattrer)((*node)(nil))
	_ = (fs.NodeRemovexattrer)((*node)(nil))
)

// xattrMax is the largest value the kernel passes (XATTR_SIZE_MAX).
const xattrMax = 64 << 10

func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if !n.r.t.xattrAllowed(attr) {
		return 0, syscall.ENODATA
	}
	p, errno := n.lowerPath()
	if errno != 0 {
		return 0, errno
	}
	buf := make([]byte, xattrMax+n.r.t.xattrOverhead())
	sz, err := unix.Lgetxattr(p, attr, buf)
	if err != nil {
		return 0, toErrno(err)
	}
	value, errno := n.r.t.decodeXattr(attr, buf[:sz])
	if errno != 0 {
		n.r.log.Warn().Str("lower", p).Str("xattr", attr).Msg("xattr value does not decrypt: EIO")
		return 0, errno
	}
	if len(dest) == 0 {
		return uint32(len(value)), 0
	}
	if len(dest) < len(value) {
		return uint32(len(value)), syscall.ERANGE
	}
	return uint32(copy(dest, value)), 0
}

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	if !n.r.t.xattrAllowed(attr) {
		return syscall.EOPNOTSUPP
	}
	p, errno := n.lowerPath()
	if errno != 0 {
		return errno
	}
	value, errno := n.r.t.encodeXattr(attr, data)
	if errno != 0 {
		return errno
	}
	if len(value) > xattrMax {
		return syscall.E2BIG
	}
	return toErrno(unix.Lsetxattr(p, attr, value, int(flags)))
}

func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	p, errno := n.lowerPath()
	if errno != 0 {
		return 0, errno
	}
	buf := make([]byte, xattrMax)
	sz, err := unix.Llistxattr(p, buf)
	if err != nil {
		return 0, toErrno(err)
	}
	var list []byte
	for _, name := range bytes.Split(buf[:sz], []byte{0}) {
		if len(name) > 0 && n.r.t.xattrAllowed(string(name)) {
			list = append(append(list, name...), 0)
		}
	}
	if len(dest) == 0 {
		return uint32(len(list)), 0
	}
	if len(dest) < len(list) {
		return uint32(len(list)), syscall.ERANGE
	}
	return uint32(copy(dest, list)), 0
}

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	if !n.r.t.xattrAllowed(attr) {
		return syscall.ENODATA
	}
	p, errno := n.lowerPath()
	if errno != 0 {
		return errno
	}
	return toErrno(unix.Lremovexattr(p, attr))
}
