package ecryptfs

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrTruncated: the lower file ends before the extents its header's size
// needs.
var ErrTruncated = errors.New("ecryptfs: lower file truncated")

// File reads the plaintext of one eCryptfs lower file.
type File struct {
	hdr     *Header
	lower   io.ReaderAt
	dataOff int64 // lower offset of extent 0
	block   cipher.Block
	root    [md5.Size]byte
	inXattr bool
}

// Open reads the header of a lower file — from its first bytes, or from
// xattr (the user.ecryptfs value, nil when absent) when the file has none,
// as ecryptfs_read_metadata falls back — and unlocks its FEK with kr.
func Open(lower io.ReaderAt, xattr []byte, kr *Keyring) (*File, error) {
	head := make([]byte, minHeaderSize)
	n, err := lower.ReadAt(head, 0)
	if err != nil && err != io.EOF {
		return nil, err
	}
	head = head[:n]
	f := &File{lower: lower}
	var h *Header
	switch {
	case HasMarker(head):
		h, err = ParseHeader(head, false)
		if err == nil {
			f.dataOff = h.HeaderSize
		}
	case xattr != nil:
		h, err = ParseHeader(xattr, true)
		f.inXattr = true
	default:
		if n < 16 {
			return nil, fmt.Errorf("%w: %d bytes, no header in the file and no %s xattr", ErrTruncated, n, XattrName)
		}
		return nil, fmt.Errorf("%w: no eCryptfs marker in the file and no %s xattr (a plaintext passthrough file, or a damaged header)", ErrCorrupt, XattrName)
	}
	if err != nil {
		return nil, err
	}
	fek, err := h.fileKey(kr)
	if err != nil {
		return nil, err
	}
	f.hdr = h
	f.block, _ = aes.NewCipher(fek)
	f.root = rootIV(fek)
	return f, nil
}

// OpenPath opens the lower file at path read-only (O_NOATIME where
// allowed, so reading leaves even the source's atimes alone).
func OpenPath(path string, kr *Keyring) (*File, *os.File, error) {
	fd, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOATIME, 0)
	if err != nil {
		fd, err = os.Open(path)
		if err != nil {
			return nil, nil, err
		}
	}
	xattr, err := ReadXattr(fd)
	if err != nil {
		fd.Close()
		return nil, nil, err
	}
	f, err := Open(fd, xattr, kr)
	if err != nil {
		fd.Close()
		return nil, nil, err
	}
	return f, fd, nil
}

// ReadXattr returns the user.ecryptfs xattr of fd, nil when it has none.
func ReadXattr(fd *os.File) ([]byte, error) {
	buf := make([]byte, minHeaderSize)
	n, err := unix.Fgetxattr(int(fd.Fd()), XattrName, buf)
	switch {
	case err == unix.ENODATA || err == unix.ENOTSUP:
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read %s of %s: %w", XattrName, fd.Name(), err)
	}
	return buf[:n], nil
}

// Size is the plaintext size.
func (f *File) Size() int64 { return f.hdr.PlainSize }

// Header is the parsed header.
func (f *File) Header() *Header { return f.hdr }

// MetadataInXattr reports whether the header came from the xattr.
func (f *File) MetadataInXattr() bool { return f.inXattr }

// ReadAt reads plaintext. Every extent up to the plaintext size must be
// in the lower file: the kernel writes holes as encrypted zeros (a
// truncate or a write past the end fills the gap through
// ecryptfs_write), so a lower file that ends early was damaged and is
// reported as ErrTruncated rather than read as zeros.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	n, _, err := f.ReadAtTimed(p, off)
	return n, err
}

// ReadAtTimed is ReadAt that also returns the time spent reading the
// lower file (the rest is decryption), for the measuring instrument.
func (f *File) ReadAtTimed(p []byte, off int64) (int, time.Duration, error) {
	var lower time.Duration
	if off < 0 {
		return 0, 0, fmt.Errorf("ecryptfs: negative offset %d", off)
	}
	size := f.hdr.PlainSize
	if off >= size {
		return 0, 0, io.EOF
	}
	want := len(p)
	if int64(want) > size-off {
		p = p[:size-off]
	}
	ext := make([]byte, ExtentSize)
	done := 0
	for done < len(p) {
		pos := off + int64(done)
		extentNo := pos / ExtentSize
		if err := f.readExtent(extentNo, ext, &lower); err != nil {
			return done, lower, err
		}
		done += copy(p[done:], ext[pos%ExtentSize:])
	}
	if done < want {
		return done, lower, io.EOF
	}
	return done, lower, nil
}

// readExtent decrypts extent extentNo into dst (ExtentSize bytes).
func (f *File) readExtent(extentNo int64, dst []byte, lower *time.Duration) error {
	cOff := f.dataOff + extentNo*ExtentSize
	t0 := time.Now()
	n, err := f.lower.ReadAt(dst, cOff)
	*lower += time.Since(t0)
	if n < ExtentSize {
		if err == nil || err == io.EOF {
			return fmt.Errorf("%w: extent %d needs bytes %d-%d, the lower file has %d of them (plaintext size %d)",
				ErrTruncated, extentNo, cOff, cOff+ExtentSize, n, f.hdr.PlainSize)
		}
		return err
	}
	iv := extentIV(&f.root, extentNo)
	cipher.NewCBCDecrypter(f.block, iv[:]).CryptBlocks(dst, dst)
	return nil
}

// LowerSize is the size the kernel gives a lower file of plainSize bytes.
func LowerSize(plainSize, headerSize int64) int64 {
	return headerSize + (plainSize+ExtentSize-1)/ExtentSize*ExtentSize
}
