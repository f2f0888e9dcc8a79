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
