package kvm

import (
	"fmt"
	"io"
)

// File type bits of a cpio mode (those of stat(2)).
const (
	cpioDir     = 0o040000
	cpioFile    = 0o100000
	cpioSymlink = 0o120000
	cpioCharDev = 0o020000
)

// cpioWriter writes the "newc" cpio format the kernel unpacks as its
// initramfs (Documentation/driver-api/early-userspace/buffer-format.rst):
// a 110-byte ASCII header, the NUL-terminated name and the data, each
// padded to 4 bytes, ended by an entry named TRAILER!!!. Written here
// rather than with cpio(1) so the image is built from memory, with
// device nodes, without root and without a staging tree.
type cpioWriter struct {
	w   io.Writer
	ino int
	n   int64 // bytes written, for the padding
	err error
}

func (c *cpioWriter) write(p []byte) {
	if c.err != nil {
		return
	}
	var n int
	n, c.err = c.w.Write(p)
	c.n += int64(n)
}

func (c *cpioWriter) pad() {
	if r := c.n % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor int, data []byte) {
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		c.ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	c.write(data)
	c.pad()
}

func (c *cpioWriter) dir(name string)                         { c.entry(name, cpioDir|0o755, 0, 0, nil) }
func (c *cpioWriter) file(name string, perm uint32, b []byte) { c.entry(name, cpioFile|perm, 0, 0, b) }
func (c *cpioWriter) symlink(name, target string) {
	c.entry(name, cpioSymlink|0o777, 0, 0, []byte(target))
}
func (c *cpioWriter) node(name string, mode uint32, major, minor int) {
	c.entry(name, mode, major, minor, nil)
}
func (c *cpioWriter) trailer() { c.entry("TRAILER!!!", 0, 0, 0, nil) }
