package blockdev

import (
	"errors"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/sector"
	"github.com/twincrypt/twincrypt/measure"
)

// maxRequest is the largest READ or WRITE the kernel sends (the mount's
// max_write and max_pages).
const maxRequest = fuse.MAX_KERNEL_WRITE

// bufSize holds the largest request plus a partial sector at each end.
const bufSize = maxRequest + 2*maxSectorSize

// bufPool recycles the ciphertext buffers of READ and WRITE: one request
// is up to 1 MiB, and allocating it per request would make the garbage
// collector part of what the benchmarks measure.
var bufPool = sync.Pool{New: func() any {
	b := make([]byte, bufSize)
	return &b
}}

// getBuf returns a buffer of n bytes and the pool entry to put back (nil
// for a buffer too large for the pool, which no kernel request needs).
func getBuf(n int) (*[]byte, []byte) {
	if n > bufSize {
		return nil, make([]byte, n)
	}
	p := bufPool.Get().(*[]byte)
	return p, (*p)[:n]
}

func putBuf(p *[]byte) {
	if p != nil {
		bufPool.Put(p)
	}
}

// device is the decrypted view of the image.
type device struct {
	image    string
	f        *os.File
	c        sector.Cipher
	l        layout
	readOnly bool
	rec      *measure.Recorder
	log      zerolog.Logger
	uid, gid uint32
	mtimeNs  atomic.Int64

	// rmw orders read-modify-write against everything else. A request that
	// covers whole sectors reads or writes them without reading anything
	// back, so it only needs the shared side: concurrent whole-sector
	// requests behave like concurrent I/O on a disk (each sector is old or
	// new). A write of part of a sector reads the sector, merges and writes
	// it back; it takes the exclusive side so that no other write to that
	// sector can slip in between and be lost.
	rmw sync.RWMutex
}

func (d *device) close() {
	d.f.Close()
}

// read fills dst with the plaintext at off and returns the number of
// bytes read: short at the end of the volume, 0 past it.
func (d *device) read(o *opRun, dst []byte, off int64) (int, syscall.Errno) {
	n := d.l.clamp(off, len(dst))
	if n == 0 {
		return 0, 0
	}
	start, end := d.l.sectors(off, n)
	var p *[]byte
	buf := dst[:n]
	aligned := start == off && end == off+int64(n)
	if !aligned {
		p, buf = getBuf(int(end - start))
		defer putBuf(p)
	}
	d.rmw.RLock()
	errno := d.pread(o, buf, start)
	d.rmw.RUnlock()
	if errno != 0 {
		return 0, errno
	}
	t0 := o.now()
	d.l.decrypt(d.c, buf, start)
	o.cryptoSince(t0)
	if !aligned {
		copy(dst, buf[off-start:])
	}
	return n, 0
}

// write encrypts data into the image at off and returns the number of
// bytes written: short at the end of the volume, ENOSPC past it.
func (d *device) write(o *opRun, data []byte, off int64) (int, syscall.Errno) {
	if d.readOnly {
		return 0, syscall.EROFS
	}
	if len(data) == 0 {
		return 0, 0
	}
	n := d.l.clamp(off, len(data))
	if n == 0 {
		return 0, syscall.ENOSPC
	}
	data = data[:n]
	start, end := d.l.sectors(off, n)
	p, buf := getBuf(int(end - start))
	defer putBuf(p)
	var errno syscall.Errno
	if start == off && end == off+int64(n) {
		t0 := o.now()
		d.l.encrypt(d.c, buf, data, start)
		o.cryptoSince(t0)
		d.rmw.RLock()
		errno = d.pwrite(o, buf, start)
		d.rmw.RUnlock()
	} else {
		d.rmw.Lock()
		errno = d.mergeWrite(o, buf, data, off, start, end)
		d.rmw.Unlock()
	}
	if errno != 0 {
		return 0, errno
	}
	d.mtimeNs.Store(time.Now().UnixNano())
	return n, 0
}

// mergeWrite is the read-modify-write of a write that covers part of its
// first or last sector: those sectors are read and decrypted, data is laid
// over them, and the whole range is encrypted and written. buf spans
// [start, end). The caller holds rmw exclusively.
func (d *device) mergeWrite(o *opRun, buf, data []byte, off, start, end int64) syscall.Errno {
	ss := d.l.sectorSize
	head := buf[:ss]
	if off != start {
		if errno := d.pread(o, head, start); errno != 0 {
			return errno
		}
	}
	tailOff := end - ss
	tail := buf[tailOff-start:]
	// A one-sector write that is partial at both ends reads its sector once.
	if off+int64(len(data)) != end && (tailOff != start || off == start) {
		if errno := d.pread(o, tail, tailOff); errno != 0 {
			return errno
		}
	}
	t0 := o.now()
	if off != start {
		d.l.decrypt(d.c, head, start)
	}
	if off+int64(len(data)) != end && (tailOff != start || off == start) {
		d.l.decrypt(d.c, tail, tailOff)
	}
	copy(buf[off-start:], data)
	d.l.encrypt(d.c, buf, buf, start)
	o.cryptoSince(t0)
	return d.pwrite(o, buf, start)
}

// pread reads the ciphertext of the sectors at plaintext offset off. The
// layout guarantees the image holds them; a short read means the image
// was truncated behind our back.
func (d *device) pread(o *opRun, buf []byte, off int64) syscall.Errno {
	t0 := o.now()
	_, err := d.f.ReadAt(buf, d.l.cOff+off)
	o.lowerSince(t0)
	if err != nil {
		if errors.Is(err, io.EOF) {
			d.log.Warn().Str("image", d.image).Int64("offset", d.l.cOff+off).Int("len", len(buf)).
				Msg("image ends before the volume does: was it truncated?")
			return syscall.EIO
		}
		return toErrno(err)
	}
	return 0
}

func (d *device) pwrite(o *opRun, buf []byte, off int64) syscall.Errno {
	t0 := o.now()
	_, err := d.f.WriteAt(buf, d.l.cOff+off)
	o.lowerSince(t0)
	return toErrno(err)
}

// fsync flushes the image; datasync skips its metadata (FUSE_FSYNC_FDATASYNC).
func (d *device) fsync(o *opRun, datasync bool) syscall.Errno {
	if d.readOnly {
		return 0
	}
	t0 := o.now()
	defer o.lowerSince(t0)
	if !datasync {
		return toErrno(d.f.Sync())
	}
	return d.control(func(fd int) error { return unix.Fdatasync(fd) })
}

// control runs fn on the image's descriptor, which stays valid (is not
// closed and reused) while fn runs.
func (d *device) control(fn func(fd int) error) syscall.Errno {
	rc, err := d.f.SyscallConn()
	if err != nil {
		return toErrno(err)
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return toErrno(err)
	}
	return toErrno(ferr)
}

// toErrno maps an error from the image to the errno the kernel gets.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	if errors.Is(err, os.ErrClosed) {
		return syscall.EBADF
	}
	return syscall.EIO
}

// opRun is one FUSE operation being served: its span in the recorder and
// the time it spent in crypto and in image system calls. With the recorder
// off it does not even read the clock.
type opRun struct {
	sp            *measure.Span
	on            bool
	crypto, lower time.Duration
}

func (d *device) begin(op measure.Op, ino uint64) opRun {
	sp := d.rec.Start(op, ino)
	if sp != nil && d.rec.WantsPaths() {
		if ino == volumeIno {
			sp.SetPath("/" + VolumeName)
		} else {
			sp.SetPath("/")
		}
	}
	return opRun{sp: sp, on: sp != nil}
}

func (o *opRun) now() time.Time {
	if !o.on {
		return time.Time{}
	}
	return time.Now()
}

func (o *opRun) lowerSince(t0 time.Time) {
	if o.on {
		o.lower += time.Since(t0)
	}
}

func (o *opRun) cryptoSince(t0 time.Time) {
	if o.on {
		o.crypto += time.Since(t0)
	}
}

func (o *opRun) io(off int64, n int) { o.sp.SetIO(off, n) }

func (o *opRun) end(errno syscall.Errno) {
	if o.sp == nil {
		return
	}
	o.sp.AddCrypto(o.crypto)
	o.sp.AddLower(o.lower)
	o.sp.End(errno)
}
