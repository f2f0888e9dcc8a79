package fs

import (
	"encoding/binary"
	"unsafe"

	"golang.org/x/sys/unix"
)

// parseDirent decodes one linux_dirent64 record: inode, d_type, name and
// the record length.
func parseDirent(b []byte) (ino uint64, typ uint8, name string, reclen int) {
	var d unix.Dirent
	const nameOff = int(unsafe.Offsetof(d.Name))
	ino = binary.NativeEndian.Uint64(b[0:8])
	reclen = int(binary.NativeEndian.Uint16(b[16:18]))
	typ = b[18]
	nb := b[nameOff:reclen]
	for i, c := range nb {
		if c == 0 {
			nb = nb[:i]
			break
		}
	}
	return ino, typ, string(nb), reclen
}

// direntOff is the d_off of the linux_dirent64 record at the start of b:
// the lower filesystem's position after that entry, which lseek(2) on the
// directory returns to.
func direntOff(b []byte) uint64 { return binary.NativeEndian.Uint64(b[8:16]) }
