package fs

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/content"
)

const (
	extentSize = content.ExtentSize
	headerSize = content.HeaderSize
	trailer    = content.TrailerSize
)

// ioState is what an inode knows about its lower file while it is open.
// mu is the per-inode content lock: reads share it, every operation that
// changes content or size holds it exclusively, so a partial-extent
// read-modify-write never interleaves with another write to the same file.
type ioState struct {
	mu sync.RWMutex
	// lowerPath names the file in log lines.
	lowerPath string
	// size is the plaintext size, refreshed at every open and kept up to
	// date by our own writes (the lower file changes only through us).
	size int64
	// fc is the file's cipher, nil while the file has no header.
	fc *content.FileCipher
	// bad is set when the header or size is corrupt: the file gives EIO.
	bad error
	// noHeader is set when the header is all zeros: the first page of the
	// lower file never reached the disk before a crash (FORMAT.md §7).
	// The file reads as zeros, as a native file whose pages were lost
	// does, and its first write or truncate starts it afresh.
	noHeader bool
	// tornTail is set once a torn tail unit was logged (decryptUnit).
	tornTail bool
	// The header is read at the first I/O, not at open, so that opening
	// a file (and fstat on it) leaves its atime alone, as natively.
	// hdrMu serialises that first read among concurrent readers.
	hdrMu     sync.Mutex
	hdrLoaded atomic.Bool
	// tail holds the plaintext of the file's partial last extent as our
	// last write left it, so that an appending write need not read that
	// unit back and decrypt it (tar writes 10 KiB records, a logger a line
	// at a time: each such write re-encrypts the old tail with the new
	// bytes). It is valid only while tailSize == size, and size is then
	// not a multiple of extentSize: write sets it, every other
	// change of the content (open, truncate, fallocate, a write of whole
	// extents) drops it (dropTail), and the release of a descriptor of
	// the file gives the buffer back (freeTail), so that only files being
	// written hold one. Off with --shared-storage (cryptIO.noTail).
	tail     *[]byte
	tailSize int64
}

var tailPool = sync.Pool{New: func() any { b := make([]byte, extentSize); return &b }}

// cachedTail returns the plaintext of the last extent of a file of size
// bytes if tail holds it, else nil. It stays valid until the next change
// of h (the caller holds h.mu for writing).
func (h *ioState) cachedTail(size int64) []byte {
	if h.tail == nil || h.tailSize != size || size%extentSize == 0 {
		return nil
	}
	return (*h.tail)[:size%extentSize]
}

// dropTail invalidates the cached tail.
func (h *ioState) dropTail() { h.tailSize = -1 }

// tailBuf returns the buffer of the cached tail, taken from the pool at
// first need; its contents are valid once write has set tailSize.
func (h *ioState) tailBuf() []byte {
	if h.tail == nil {
		h.tail = tailPool.Get().(*[]byte)
	}
	return *h.tail
}

// freeTail drops the cached tail and gives its buffer back.
func (h *ioState) freeTail() {
	h.dropTail()
	if h.tail != nil {
		tailPool.Put(h.tail)
		h.tail = nil
	}
}

// cryptIO maps plaintext I/O onto the extent layout of cipher/content.
type cryptIO struct {
	engine *content.Engine
	log    zerolog.Logger
	// noTail turns ioState's cache of the plaintext tail off: on a LOWER
	// that others may change (--shared-storage), each write reads it.
	noTail bool
}

// Scratch buffers: a 1 MiB request covers 257 units plus a trailer, and
// a file's first write its header.
const bufSize = headerSize + 1<<20 + 2*extentSize + 2*trailer

var bufPool = sync.Pool{New: func() any { b := make([]byte, bufSize); return &b }}

func getBuf(n int) (*[]byte, []byte) {
	if n > bufSize {
		b := make([]byte, n)
		return nil, b
	}
	p := bufPool.Get().(*[]byte)
	return p, (*p)[:n]
}

func putBuf(p *[]byte) {
	if p != nil {
		bufPool.Put(p)
	}
}

func (c *cryptIO) fail(h *ioState, err error) syscall.Errno {
	c.log.Warn().Str("lower", h.lowerPath).Err(err).Msg("unreadable file: EIO")
	return syscall.EIO
}

func (c *cryptIO) open(a *acct, h *ioState, fd int, st *syscall.Stat_t) syscall.Errno {
	h.fc, h.bad, h.size, h.noHeader = nil, nil, 0, false
	h.dropTail()
	h.hdrLoaded.Store(true)
	size, err := content.PlainSize(st.Size)
	if err != nil {
		h.bad = fmt.Errorf("lower size %d: %w", st.Size, err)
		c.fail(h, h.bad)
		return 0
	}
	h.size = size
	h.hdrLoaded.Store(st.Size < headerSize)
	return 0
}

// loadHeader reads and checks the header at the first I/O after open.
func (c *cryptIO) loadHeader(a *acct, h *ioState, fd int) syscall.Errno {
	if h.hdrLoaded.Load() {
		return 0
	}
	h.hdrMu.Lock()
	defer h.hdrMu.Unlock()
	if h.hdrLoaded.Load() {
		return 0
	}
	var b [headerSize]byte
	n, err := a.pread(fd, b[:], 0)
	if err != nil {
		// An error of the lower filesystem (EIO, ETIMEDOUT, EINTR...)
		// says nothing about the header: report it and leave the header
		// unloaded, to be read again at the next I/O. Marking it loaded
		// would make the next write put a fresh header, with a fresh
		// key, over the file's content.
		return toErrno(err)
	}
	defer h.hdrLoaded.Store(true)
	if n != headerSize {
		h.bad = fmt.Errorf("read header: %d of %d bytes", n, headerSize)
		return c.fail(h, h.bad)
	}
	if content.IsZero(b[:]) {
		// Without a file id no unit can be decrypted: the content is
		// lost, and reads as zeros rather than EIO, so that applications
		// recovering after a crash (a hot SQLite journal, a log replay)
		// see what they would see natively, a file of zeros.
		h.noHeader = true
		c.log.Warn().Str("lower", h.lowerPath).Msg("header is all zeros (never reached the disk before a crash?): the file reads as zeros")
		return 0
	}
	hdr, err := content.ParseHeader(b[:])
	if err == nil {
		t0 := a.now()
		h.fc, err = c.engine.FileCipher(&hdr)
		a.cryptoSince(t0)
	}
	if err != nil {
		h.bad = err
		return c.fail(h, err)
	}
	return 0
}

// ensureHeader gives a file that has none (an empty lower file) a header
// with a fresh file id.
func (c *cryptIO) ensureHeader(a *acct, h *ioState, fd int) syscall.Errno {
	var b [headerSize]byte
	_, errno := c.headerTo(a, h, fd, b[:], false)
	return errno
}

// headerTo loads the file's header; if the file has none, it makes one
// with a fresh file id, sets h.fc to its cipher and marshals it into dst.
// With withData the caller writes dst at offset 0 with the data that
// follows it, and sets h.fc back to nil if that fails (fresh reports it
// must); otherwise headerTo writes it itself.
func (c *cryptIO) headerTo(a *acct, h *ioState, fd int, dst []byte, withData bool) (fresh bool, errno syscall.Errno) {
	if errno := c.loadHeader(a, h, fd); errno != 0 {
		return false, errno
	}
	if h.bad != nil {
		return false, c.fail(h, h.bad)
	}
	if h.fc != nil {
		return false, 0
	}
	if h.noHeader {
		// Units stored under the lost file id would decrypt to garbage
		// under the new one: make them holes (zeros), as they read now.
		if err := a.ftruncate(fd, 0); err != nil {
			return false, toErrno(err)
		}
		if err := a.ftruncate(fd, content.LowerSize(h.size)); err != nil {
			return false, toErrno(err)
		}
		h.noHeader = false
	}
	hdr := c.engine.NewHeader()
	hdr.Marshal(dst)
	t0 := a.now()
	fc, err := c.engine.FileCipher(&hdr)
	a.cryptoSince(t0)
	if err != nil {
		return false, c.fail(h, err)
	}
	h.fc = fc
	if withData {
		return true, 0
	}
	if _, err := a.pwrite(fd, dst[:headerSize], 0); err != nil {
		h.fc = nil
		return false, toErrno(err)
	}
	return false, 0
}

// aesBlock is the AES block size: units whose length is not a multiple
// of it are tail units encrypted with ciphertext stealing.
const aesBlock = 16

// decryptUnit decrypts the stored unit u of extent e in place.
//
// A tail unit whose trailer does not decrypt to zeros was torn by a crash
// during an append (FORMAT.md §7): the write that grows a file re-encrypts
// its old tail unit, with the old data, at its new length, and the lower
// filesystem kept that page but not the new size. Ciphertext stealing
// ties the last two AES blocks to the unit's length, so the old data's
// last partial block, fsynced before the append, would read as garbage;
// decrypted as whole blocks without stealing, the new ciphertext gives
// it back (integration/crashsim, append-log).
func (c *cryptIO) decryptUnit(h *ioState, u []byte, e int64) {
	if tornAppend(u) && c.recoverOldTail(h, u, e) {
		return
	}
	if len(u)%aesBlock == 0 {
		h.fc.DecryptUnit(u, u, e)
		return
	}
	p, stored := getBuf(len(u))
	defer putBuf(p)
	copy(stored, u)
	h.fc.DecryptUnit(u, u, e)
	if content.IsZero(u[len(u)-trailer:]) {
		return
	}
	// Only trailer bytes lie past the whole blocks (the data ends 16
	// bytes before the unit does).
	whole := len(u) &^ (aesBlock - 1)
	h.fc.DecryptUnit(u[:whole], stored[:whole], e)
	if !h.tornTail {
		h.tornTail = true
		c.log.Warn().Str("lower", h.lowerPath).Int64("extent", e).Msg("tail unit torn by a crash during an append: decrypted without ciphertext stealing")
	}
}

// unitPage is where, inside a stored unit, the lower file's next 4 KiB
// page starts (units are shifted by the header).
const unitPage = extentSize - headerSize

// tornAppend reports the stored unit u as what a crash during an append
// leaves when the lower filesystem kept the new size but not the page
// with the re-encrypted tail: the old tail unit's ciphertext, then zeros
// up to the end of the page. Ciphertext has 16 zero bytes in a row with
// probability 2^-128; an all-zero unit is a hole.
func tornAppend(u []byte) bool {
	end := min(len(u), unitPage)
	return end > aesBlock && content.IsZero(u[end-aesBlock:end]) && !content.IsZero(u)
}

// recoverOldTail finds, in a unit torn by an append (tornAppend), the old
// tail unit: the length at which the bytes before the zeros decrypt, with
// ciphertext stealing, to data followed by the zero trailer. It returns
// the old data followed by zeros (the append's bytes did not reach the
// disk), or false when no length fits (the unit is left to the caller).
func (c *cryptIO) recoverOldTail(h *ioState, u []byte, e int64) bool {
	z := min(len(u), unitPage)
	for z > 0 && u[z-1] == 0 {
		z--
	}
	p, buf := getBuf(unitPage)
	defer putBuf(p)
	// The old tail ended within 15 bytes after its last nonzero byte;
	// one whose length is a multiple of 16 uses no stealing, and its data
	// blocks are the same in the new unit: nothing to recover.
	for l := z; l < z+aesBlock && l <= unitPage; l++ {
		if l%aesBlock == 0 || l <= aesBlock {
			continue
		}
		s := buf[:l]
		copy(s, u[:l])
		h.fc.DecryptUnit(s, s, e)
		if content.IsZero(s[l-trailer:]) {
			copy(u, s[:l-trailer])
			clear(u[l-trailer:])
			if !h.tornTail {
				h.tornTail = true
				c.log.Warn().Str("lower", h.lowerPath).Int64("extent", e).Int("old_tail", l).Msg("unit torn by a crash during an append: old tail recovered, the appended bytes read as zeros")
			}
			return true
		}
	}
	return false
}

// readUnit decrypts extent e of a file of plainSize bytes into dst and
// returns its plaintext length. scratch must hold a stored unit.
func (c *cryptIO) readUnit(a *acct, h *ioState, fd int, e, plainSize int64, dst, scratch []byte) (int, syscall.Errno) {
	stored := content.UnitSize(e, plainSize)
	if stored == 0 {
		return 0, 0
	}
	s := scratch[:stored]
	n, err := a.pread(fd, s, content.UnitOffset(e))
	if err != nil {
		return 0, toErrno(err)
	}
	if n != stored {
		return 0, c.fail(h, fmt.Errorf("extent %d: lower file is short (%d of %d bytes)", e, n, stored))
	}
	t0 := a.now()
	c.decryptUnit(h, s, e)
	a.cryptoSince(t0)
	plainLen := min(extentSize, plainSize-e*extentSize)
	copy(dst, s[:plainLen])
	return int(plainLen), 0
}

func (c *cryptIO) read(a *acct, h *ioState, fd int, dst []byte, off int64) (int, syscall.Errno) {
	if errno := c.loadHeader(a, h, fd); errno != 0 {
		return 0, errno
	}
	if h.bad != nil {
		return 0, c.fail(h, h.bad)
	}
	size := h.size
	if off >= size || len(dst) == 0 {
		return 0, 0
	}
	end := min(off+int64(len(dst)), size)
	if h.fc == nil && h.noHeader {
		clear(dst[:end-off])
		return int(end - off), 0
	}
	if h.fc == nil {
		return 0, c.fail(h, fmt.Errorf("file of %d bytes without a header", size))
	}
	e0, e1 := off/extentSize, (end-1)/extentSize
	if off%extentSize == 0 {
		return c.readAligned(a, h, fd, dst[:end-off], e0, e1, size)
	}
	total := int(e1-e0)*extentSize + content.UnitSize(e1, size)
	p, buf := getBuf(total)
	defer putBuf(p)
	n, err := a.pread(fd, buf, content.UnitOffset(e0))
	if err != nil {
		return 0, toErrno(err)
	}
	if n != total {
		return 0, c.fail(h, fmt.Errorf("lower file is short at extent %d (%d of %d bytes)", e0, n, total))
	}
	t0 := a.now()
	forUnits(e0, e1, func(e int64) {
		u := buf[int(e-e0)*extentSize:]
		u = u[:min(len(u), extentSize+trailer)]
		u = u[:content.UnitSize(e, size)]
		c.decryptUnit(h, u, e)
	})
	a.cryptoSince(t0)
	return copy(dst, buf[off-e0*extentSize:end-e0*extentSize]), 0
}

// readAligned serves a read that starts on an extent boundary (the
// kernel's page-cache and readahead reads): the full extents are read
// straight into dst and decrypted there, with no bounce buffer and no
// copy; only a last unit that is the file's tail (it carries the trailer)
// or that dst holds only in part goes through a scratch unit.
func (c *cryptIO) readAligned(a *acct, h *ioState, fd int, dst []byte, e0, e1, size int64) (int, syscall.Errno) {
	k := e0 + int64(len(dst)/extentSize) - 1 // last extent dst holds whole
	for k >= e0 && content.UnitSize(k, size) != extentSize {
		k--
	}
	n := 0
	if k >= e0 {
		whole := dst[:int(k-e0+1)*extentSize]
		got, err := a.pread(fd, whole, content.UnitOffset(e0))
		if err != nil {
			return 0, toErrno(err)
		}
		if got != len(whole) {
			return 0, c.fail(h, fmt.Errorf("lower file is short at extent %d (%d of %d bytes)", e0, got, len(whole)))
		}
		t0 := a.now()
		forRuns(e0, k, func(first, last int64) {
			run := whole[int(first-e0)*extentSize : int(last+1-e0)*extentSize]
			for off := 0; off < len(run); off += extentSize {
				if tornAppend(run[off : off+extentSize]) {
					// A unit a crash left torn needs decryptUnit's
					// recovery: this run goes unit by unit.
					for e := first; e <= last; e++ {
						c.decryptUnit(h, run[int(e-first)*extentSize:][:extentSize], e)
					}
					return
				}
			}
			h.fc.DecryptExtents(run, first)
		})
		a.cryptoSince(t0)
		n = len(whole)
	}
	if k < e1 {
		p, scratch := getBuf(extentSize + trailer)
		defer putBuf(p)
		m, errno := c.readUnit(a, h, fd, k+1, size, dst[n:], scratch)
		if errno != 0 {
			return 0, errno
		}
		n += min(m, len(dst)-n)
	}
	return n, 0
}

// writeOwned is write, except that a write of whole extents from an
// extent boundary (a sequential writer's) is encrypted in place in src
// and written from there: no bounce buffer for the ciphertext.
func (c *cryptIO) writeOwned(a *acct, h *ioState, fd int, src []byte, off int64) (int, syscall.Errno) {
	if len(src) < extentSize || len(src)%extentSize != 0 || off%extentSize != 0 || h.size%extentSize != 0 {
		return c.write(a, h, fd, src, off)
	}
	h.dropTail() // none is valid at this size; stays so
	if errno := c.loadHeader(a, h, fd); errno != 0 {
		return 0, errno
	}
	if h.fc == nil || h.bad != nil {
		// A file without a header yet (or a broken one): write makes
		// it (and carries it with extent 0) or reports it.
		return c.write(a, h, fd, src, off)
	}
	// From here the old size and the write both end on extent
	// boundaries: every extent written is a full unit, the old tail is
	// no partial unit to promote, and a write that grows the file ends
	// in the empty tail unit, the zero trailer.
	e0 := off / extentSize
	end := off + int64(len(src))
	t0 := a.now()
	h.fc.EncryptExtents(src, e0)
	a.cryptoSince(t0)
	var err error
	if end > h.size {
		var stored int
		if stored, err = a.pwritev(fd, src, emptyTail[:], content.UnitOffset(e0)); err != nil {
			if n := c.failedGrow(a, h, fd, e0, off, end, h.size, nil, stored, false); n > 0 {
				return n, 0
			}
		}
	} else {
		_, err = a.pwrite(fd, src, content.UnitOffset(e0))
	}
	if err != nil {
		return 0, toErrno(err)
	}
	h.size = max(h.size, end)
	return len(src), 0
}

// emptyTail is the empty tail unit a write that ends on an extent
// boundary leaves after it.
var emptyTail [trailer]byte

// write stores src at off: it reads what the write keeps of the units it
// touches in part, encrypts the units, and stores them (with the file's
// header when it is new) in one pwrite.
func (c *cryptIO) write(a *acct, h *ioState, fd int, src []byte, off int64) (int, syscall.Errno) {
	if len(src) == 0 {
		return 0, 0
	}
	w := c.planWrite(h, src, off)
	defer w.release()
	var errno syscall.Errno
	if w.fresh, errno = c.headerTo(a, h, fd, w.whole[:headerSize], w.e0 == 0); errno != 0 {
		return 0, errno
	}
	if errno := c.keepOldTail(a, h, fd, w); errno != 0 {
		return 0, errno
	}
	if errno := c.readPartialUnits(a, h, fd, w); errno != 0 {
		return 0, errno
	}
	direct := w.copyIn()
	t0 := a.now()
	newTail := c.encryptUnits(h, w, direct)
	a.cryptoSince(t0)
	if stored, err := w.store(a, fd); err != nil {
		return c.failedWrite(a, h, fd, w, stored, err)
	}
	h.size = w.newSize
	if newTail || w.cached != nil && w.e1 < w.eOld {
		// The tail as written now, or as cached before if this write
		// ended in an earlier extent (and so did not grow the file).
		h.tailSize = w.newSize
	}
	return len(src), 0
}

// cryptWrite is one write of src at off, as planned: the units it
// rewrites, what it needs of the file's old state, and the buffer the
// units are made in.
type cryptWrite struct {
	src              []byte
	off, end         int64
	oldSize, newSize int64
	e0, e1           int64 // the first and last unit the write rewrites
	eOld             int64 // the old last unit
	grow             bool  // the write ends past the old size
	// cached is the old tail's plaintext, if cached; oldTail that of the
	// old last unit, read before a write that grows the file past a
	// partial one rewrites it, to be put back should the write fail
	// (undoGrow).
	cached, oldTail []byte
	whole           []byte // room for the header, then buf
	buf             []byte // units e0..e1 (and an empty tail unit): plaintext, then ciphertext
	fresh           bool   // whole begins with the file's new header
	pooled          []*[]byte
}

// planWrite works out the units a write of src at off rewrites and takes
// the buffer for them. From here the tail cache is invalid until the
// write has succeeded (tailSize is set at the end).
func (c *cryptIO) planWrite(h *ioState, src []byte, off int64) *cryptWrite {
	w := &cryptWrite{src: src, off: off, end: off + int64(len(src)), oldSize: h.size}
	w.newSize = max(w.oldSize, w.end)
	w.grow = w.end > w.oldSize
	w.e0, w.e1 = off/extentSize, (w.end-1)/extentSize
	w.eOld = w.oldSize / extentSize
	if !c.noTail {
		w.cached = h.cachedTail(w.oldSize)
	}
	h.dropTail()
	total := int(w.e1-w.e0)*extentSize + content.UnitSize(w.e1, w.newSize)
	// A write that grows the file to an extent boundary ends in an empty
	// last extent: its tail unit is the 16-byte trailer, stored as zeros
	// (an all-zero unit reads as a hole, i.e. as the zero trailer).
	if w.grow && w.newSize%extentSize == 0 {
		total += trailer
	}
	// buf follows room for the header, which precedes extent 0: a
	// file's first write from offset 0 (a new file's, mostly) carries
	// its new header, one pwrite, not two.
	w.whole = w.getBuf(headerSize + total)
	w.buf = w.whole[headerSize:]
	return w
}

func (w *cryptWrite) getBuf(n int) []byte {
	p, b := getBuf(n)
	w.pooled = append(w.pooled, p)
	return b
}

func (w *cryptWrite) release() {
	for _, p := range w.pooled {
		putBuf(p)
	}
}

// keepOldTail reads the old last unit before a write that grows the file
// rewrites it (as part of the written range, or as a full extent): once,
// to be put back should the write fail. If that unit lies before the
// written range, it stops being the last: it is stored now as a full
// extent (promoteTail).
func (c *cryptIO) keepOldTail(a *acct, h *ioState, fd int, w *cryptWrite) syscall.Errno {
	if !w.grow || w.oldSize%extentSize == 0 {
		return 0
	}
	t := w.getBuf(2 * (extentSize + trailer))
	n := copy(t, w.cached)
	if w.cached == nil {
		var errno syscall.Errno
		if n, errno = c.readUnit(a, h, fd, w.eOld, w.oldSize, t, t[extentSize+trailer:]); errno != 0 {
			return errno
		}
	}
	w.oldTail = t[:n]
	if w.eOld < w.e0 {
		if errno := c.storeFull(a, h, fd, w.oldSize, w.oldTail); errno != 0 {
			c.failedGrow(a, h, fd, w.e0, w.off, w.end, w.oldSize, w.oldTail, 0, false)
			return errno
		}
	}
	return 0
}

// readPartialUnits puts into buf the old plaintext of the first and last
// units, where the write does not cover them whole: they keep their old
// bytes.
func (c *cryptIO) readPartialUnits(a *acct, h *ioState, fd int, w *cryptWrite) syscall.Errno {
	partial := [2]int64{w.e0, w.e1}
	nPartial := 2
	if w.e1 == w.e0 {
		nPartial = 1
	}
	var scratch []byte
	for _, e := range partial[:nPartial] {
		uStart := e * extentSize
		uEnd := min(uStart+extentSize, w.newSize)
		if w.off <= uStart && w.end >= uEnd {
			continue
		}
		u := w.buf[int(e-w.e0)*extentSize:]
		clear(u[:min(len(u), extentSize)])
		if uStart >= w.oldSize {
			continue
		}
		if e == w.eOld && w.oldTail != nil {
			copy(u, w.oldTail)
			continue
		}
		if e == w.eOld && w.cached != nil {
			copy(u, w.cached)
			continue
		}
		if scratch == nil {
			scratch = w.getBuf(extentSize + trailer)
		}
		if _, errno := c.readUnit(a, h, fd, e, w.oldSize, u, scratch); errno != 0 {
			return errno
		}
	}
	return 0
}

// copyIn copies into buf the part of src that is not encrypted straight
// from src, and zeroes the trailer of the last unit (and the empty tail
// unit). It returns the count of extents, from e0 on, that the write
// covers whole from an extent boundary: those are encrypted straight
// from src into buf.
func (w *cryptWrite) copyIn() (direct int) {
	if w.off%extentSize == 0 {
		direct = len(w.src) / extentSize
		for direct > 0 && content.UnitSize(w.e0+int64(direct)-1, w.newSize) != extentSize {
			direct--
		}
	}
	copy(w.buf[w.off-w.e0*extentSize+int64(direct)*extentSize:], w.src[direct*extentSize:])
	if z := w.newSize - w.e0*extentSize; z < int64(len(w.buf)) {
		clear(w.buf[z:])
	}
	return direct
}

// encryptUnits encrypts units e0..e1 in buf, the first direct of them from
// src. It reports whether the tail's new plaintext went into h's tail
// cache.
//
// One goroutine encrypts the whole request, unlike reads (forRuns): a
// caller's writes come one at a time (no writeback cache), and the
// wake-up of another core for half of a 1 MiB write cost more than
// the half's AES: 512 MiB dd over the ring, AMD EPYC, 768-1062 MB/s
// and 280-430 ms of daemon CPU split, 1018-1311 MB/s and 270-350 ms
// whole (VAES; 814-991 and 984-1187 MB/s on the AES-NI path). Reads
// keep the split: without it the bench's seqread lost 7-12 %.
func (c *cryptIO) encryptUnits(h *ioState, w *cryptWrite, direct int) (newTail bool) {
	e0, buf := w.e0, w.buf
	lastDirect := e0 + int64(direct) - 1
	// Full extents go side by side; a tail unit (the file's last extent)
	// alone.
	first, last := e0, w.e1
	if last == w.newSize/extentSize {
		u := buf[int(last-e0)*extentSize:]
		if r := int(w.newSize % extentSize); r != 0 && !c.noTail {
			copy(h.tailBuf(), u[:r])
			newTail = true
		}
		u = u[:content.UnitSize(last, w.newSize)]
		h.fc.EncryptUnit(u, u, last)
		last--
	}
	if d := min(last, lastDirect); d >= first {
		lo, hi := int(first-e0)*extentSize, int(d+1-e0)*extentSize
		h.fc.EncryptExtentsTo(buf[lo:hi], w.src[lo:hi], first)
		first = d + 1
	}
	if last >= first {
		h.fc.EncryptExtents(buf[int(first-e0)*extentSize:int(last+1-e0)*extentSize], first)
	}
	return newTail
}

// store writes the encrypted units, after the header when the file is
// new, in one pwrite. stored counts the units' bytes stored, the
// header's not.
func (w *cryptWrite) store(a *acct, fd int) (stored int, err error) {
	out, at := w.buf, content.UnitOffset(w.e0)
	if w.fresh {
		out, at = w.whole, 0 // the header, then extent 0
	}
	stored, err = a.pwrite(fd, out, at)
	if w.fresh {
		stored -= headerSize
	}
	return stored, err
}

// failedWrite settles a write whose pwrite failed after storing the
// first `stored` bytes of its units: a growing write keeps what it stored
// whole (failedGrow); a new file's header is not taken as written.
func (c *cryptIO) failedWrite(a *acct, h *ioState, fd int, w *cryptWrite, stored int, err error) (int, syscall.Errno) {
	if w.grow {
		if n := c.failedGrow(a, h, fd, w.e0, w.off, w.end, w.oldSize, w.oldTail, stored, w.fresh); n > 0 {
			return n, 0
		}
	}
	if w.fresh {
		h.fc = nil
	}
	return 0, toErrno(err)
}

// failedGrow settles the lower file after a write that was to grow the
// file from oldSize to end failed part way (the lower filesystem full,
// mostly), after storing the first `stored` bytes of its units (from extent
// e0 on; the header not counted). As natively, where the write that fills
// the disk stores what fits and returns that count, the extents it stored
// whole stay: the file grows to the last of them, ending on an extent
// boundary (whose tail unit, the zero trailer, is a hole), and failedGrow
// returns the count of the write's bytes now in the file. If none past the
// old end were stored whole, the growth is undone (undoGrow), and the count
// is that of the write's bytes in the extents it rewrote whole before the
// old last one, or 0: the file then reads as before the write, as the error
// the application gets says. Without it a failed append left the lower
// file longer than its size says, its last unit torn: garbage at the end
// of a file the application was told nothing had been added to. (A write
// inside the file fails part way only over a hole or on a copy-on-write
// filesystem: its torn unit is not mended.)
func (c *cryptIO) failedGrow(a *acct, h *ioState, fd int, e0, off, end, oldSize int64, oldTail []byte, stored int, fresh bool) int {
	k := e0 + int64(max(stored, 0)/extentSize) // extents [e0, k) are stored whole
	if s := min(end, k*extentSize) &^ (extentSize - 1); s > oldSize && s > off {
		at := content.UnitOffset(s / extentSize)
		err := a.ftruncate(fd, at) // the torn unit after them goes
		if err == nil {
			err = a.ftruncate(fd, at+trailer) // the zero trailer, as a hole
		}
		if err == nil {
			h.size = s
			h.noHeader = false
			return int(s - off)
		}
	}
	c.undoGrow(a, h, fd, oldSize, oldTail, fresh)
	if fresh {
		return 0
	}
	return max(0, int(min(k, oldSize/extentSize)*extentSize-off))
}

// undoGrow puts the lower file back as it was before a write that was to
// grow the file from oldSize: what the write stored past the old end is
// cut off, and the old tail unit, which the write (or storeFull) had
// rewritten, is stored again from its data oldTail (in place: no new
// space). fresh: the write carried the file's first header.
func (c *cryptIO) undoGrow(a *acct, h *ioState, fd int, oldSize int64, oldTail []byte, fresh bool) {
	var err error
	switch {
	case fresh:
		// The file had no header: it was empty, or its header was lost
		// in a crash and it read as zeros (noHeader), as it does again.
		err = a.ftruncate(fd, 0)
		if err == nil && oldSize > 0 {
			err = a.ftruncate(fd, content.LowerSize(oldSize))
			h.noHeader = true
		}
	case oldSize == 0:
		err = a.ftruncate(fd, headerSize)
	default:
		if err = a.ftruncate(fd, content.LowerSize(oldSize)); err != nil {
			break
		}
		// A file ending on an extent boundary ends in the zero trailer.
		e := oldSize / extentSize
		u := make([]byte, len(oldTail)+trailer)
		copy(u, oldTail)
		if len(oldTail) > 0 {
			t0 := a.now()
			h.fc.EncryptUnit(u, u, e)
			a.cryptoSince(t0)
		}
		_, err = a.pwrite(fd, u, content.UnitOffset(e))
	}
	if err != nil {
		c.log.Warn().Str("lower", h.lowerPath).Err(err).Int64("size", oldSize).Msg("a failed write could not be undone: the end of the file may read wrong")
	}
}

// promoteTail re-encrypts the last extent of a file of oldSize bytes (whose
// size is not a multiple of the extent size) as a full extent, zero-filled,
// and zeroes the bytes its tail unit had spilled into the next extent.
func (c *cryptIO) promoteTail(a *acct, h *ioState, fd int, oldSize int64) syscall.Errno {
	e := oldSize / extentSize
	p, buf := getBuf(2*extentSize + trailer)
	defer putBuf(p)
	unit, scratch := buf[:extentSize+trailer], buf[extentSize+trailer:]
	n, errno := c.readUnit(a, h, fd, e, oldSize, unit, scratch)
	if errno != 0 {
		return errno
	}
	return c.storeFull(a, h, fd, oldSize, unit[:n])
}

// storeFull is promoteTail with the old last extent's data at hand.
func (c *cryptIO) storeFull(a *acct, h *ioState, fd int, oldSize int64, data []byte) syscall.Errno {
	e := oldSize / extentSize
	p, buf := getBuf(extentSize + trailer)
	defer putBuf(p)
	unit := buf[:extentSize+trailer]
	copy(unit, data)
	clear(unit[len(data):])
	t0 := a.now()
	h.fc.EncryptUnit(unit[:extentSize], unit[:extentSize], e)
	a.cryptoSince(t0)
	n := max(extentSize, content.UnitSize(e, oldSize))
	_, err := a.pwrite(fd, unit[:n], content.UnitOffset(e))
	return toErrno(err)
}

// retail re-encrypts extent e (holding plaintext bytes of a file of
// oldSize bytes) as the last extent of a file of newSize bytes.
func (c *cryptIO) retail(a *acct, h *ioState, fd int, oldSize, newSize int64) syscall.Errno {
	e := newSize / extentSize
	r := int(newSize % extentSize)
	p, buf := getBuf(2*extentSize + 2*trailer)
	defer putBuf(p)
	unit, scratch := buf[:extentSize+trailer], buf[extentSize+trailer:]
	clear(unit)
	if _, errno := c.readUnit(a, h, fd, e, oldSize, unit, scratch); errno != 0 {
		return errno
	}
	clear(unit[r:])
	u := unit[:r+trailer]
	t0 := a.now()
	h.fc.EncryptUnit(u, u, e)
	a.cryptoSince(t0)
	_, err := a.pwrite(fd, u, content.UnitOffset(e))
	return toErrno(err)
}

func (c *cryptIO) truncate(a *acct, h *ioState, fd int, size int64) syscall.Errno {
	h.dropTail()
	oldSize := h.size
	switch {
	case size == 0:
		// An empty file is an empty lower file; the next write starts a
		// new header with a new file id.
		if err := a.ftruncate(fd, 0); err != nil {
			return toErrno(err)
		}
		h.fc, h.bad, h.size, h.noHeader = nil, nil, 0, false
		h.hdrLoaded.Store(true)
		return 0
	case size == oldSize:
		return 0
	}
	if errno := c.ensureHeader(a, h, fd); errno != 0 {
		return errno
	}
	switch {
	case size < oldSize:
		if size%extentSize != 0 {
			if errno := c.retail(a, h, fd, oldSize, size); errno != 0 {
				return errno
			}
		} else {
			// The new last extent is empty: its 16-byte unit must read
			// as zeros, and the old extent's first bytes are still there.
			var z [trailer]byte
			if _, err := a.pwrite(fd, z[:], content.UnitOffset(size/extentSize)); err != nil {
				return toErrno(err)
			}
		}
	case oldSize%extentSize != 0:
		// Growing: the old last extent gets zeros after its data, either
		// as a full extent or as a longer last extent.
		var errno syscall.Errno
		if oldSize/extentSize < size/extentSize {
			errno = c.promoteTail(a, h, fd, oldSize)
		} else {
			errno = c.retail(a, h, fd, oldSize, size)
		}
		if errno != 0 {
			return errno
		}
	}
	// Everything past the old data becomes a hole in the lower file, and
	// all-zero units read as zeros.
	if err := a.ftruncate(fd, content.LowerSize(size)); err != nil {
		return toErrno(err)
	}
	h.size = size
	return 0
}

func (c *cryptIO) allocate(a *acct, h *ioState, fd int, off, size int64, mode uint32) syscall.Errno {
	h.dropTail()
	if errno := c.loadHeader(a, h, fd); errno != 0 {
		return errno
	}
	if h.bad != nil {
		return c.fail(h, h.bad)
	}
	switch mode {
	case 0, unix.FALLOC_FL_KEEP_SIZE:
		// Reserve the lower blocks; reserved blocks read as zeros, which
		// is a hole in our format.
		if err := a.fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, content.UnitOffset(0)+off, size+trailer); err != nil {
			return toErrno(err)
		}
		if mode == 0 && off+size > h.size {
			return c.truncate(a, h, fd, off+size)
		}
		return 0
	case unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE, unix.FALLOC_FL_ZERO_RANGE, unix.FALLOC_FL_ZERO_RANGE | unix.FALLOC_FL_KEEP_SIZE:
		end := off + size
		if mode&unix.FALLOC_FL_KEEP_SIZE == 0 && end > h.size {
			if errno := c.truncate(a, h, fd, end); errno != 0 {
				return errno
			}
		}
		end = min(end, h.size)
		if off >= end {
			return 0
		}
		return c.zeroRange(a, h, fd, off, end)
	}
	return syscall.EOPNOTSUPP
}

// zeroRange makes [off,end) (inside the file) read as zeros: whole full
// extents are punched out of the lower file, partial ones rewritten.
func (c *cryptIO) zeroRange(a *acct, h *ioState, fd int, off, end int64) syscall.Errno {
	first := (off + extentSize - 1) / extentSize // first whole extent
	last := end / extentSize                     // one past the last whole extent
	if last >= h.size/extentSize {
		last = h.size / extentSize // the last extent is a tail unit: rewrite it
	}
	var z [extentSize]byte
	writeZeros := func(from, to int64) syscall.Errno {
		for from < to {
			n := min(to-from, extentSize-from%extentSize)
			if _, errno := c.write(a, h, fd, z[:n], from); errno != 0 {
				return errno
			}
			from += n
		}
		return 0
	}
	if first >= last {
		return writeZeros(off, end)
	}
	if errno := writeZeros(off, first*extentSize); errno != 0 {
		return errno
	}
	err := a.fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE,
		content.UnitOffset(first), (last-first)*extentSize)
	if err != nil {
		// No hole punching below: write the zeros instead.
		if errno := writeZeros(first*extentSize, last*extentSize); errno != 0 {
			return errno
		}
	}
	return writeZeros(last*extentSize, end)
}

// lseek answers SEEK_DATA and SEEK_HOLE in whole extents, each extent
// classified once by unitHole, so that both whences agree and a walk of
// the file always advances. The lower file's own holes cannot be passed
// through: every extent straddles two lower blocks (the 32-byte header
// shifts them), so a plaintext hole next to data sits in lower blocks that
// are partly data.
func (c *cryptIO) lseek(a *acct, h *ioState, fd int, off int64, whence int) (int64, syscall.Errno) {
	if whence != unix.SEEK_DATA && whence != unix.SEEK_HOLE {
		return 0, syscall.EINVAL
	}
	size := h.size
	if off < 0 || off >= size {
		// As ext4 and tmpfs: both whences refuse offsets at or past EOF.
		return 0, syscall.ENXIO
	}
	p, scratch := getBuf(extentSize + trailer)
	defer putBuf(p)
	lastExtent := (size - 1) / extentSize
	for e := off / extentSize; e <= lastExtent; {
		hole, next, errno := c.unitHole(a, fd, e, size, scratch)
		if errno != 0 {
			return 0, errno
		}
		if hole == (whence == unix.SEEK_HOLE) {
			return max(off, e*extentSize), 0
		}
		if next < 0 {
			break
		}
		e = max(e+1, next)
	}
	if whence == unix.SEEK_HOLE {
		return size, 0 // the virtual hole at the end of the file
	}
	return 0, syscall.ENXIO
}

// unitHole reports whether extent e of a file of plainSize bytes is a hole
// for lseek: its stored unit is all zero (so it reads as zeros, FORMAT.md
// "Holes") and overlaps a hole of the lower file. A unit wholly inside
// lower data is data without a read, even if it holds zeros (a lower file
// copied without holes), so that a seek over such a file costs no scan.
// next is the first extent after e that can differ from it (the extent
// holding the next lower data byte after a hole, or the next lower hole
// byte after data), or -1 if none can.
func (c *cryptIO) unitHole(a *acct, fd int, e, plainSize int64, scratch []byte) (hole bool, next int64, errno syscall.Errno) {
	lo := content.UnitOffset(e)
	hi := lo + int64(content.UnitSize(e, plainSize))
	unitOf := func(cOff int64) int64 { return max(0, cOff-headerSize) / extentSize }
	d, err := a.seek(fd, lo, unix.SEEK_DATA)
	if err == syscall.ENXIO {
		return true, -1, 0 // nothing but holes from here to the end
	} else if err != nil {
		return false, 0, toErrno(err)
	}
	if d >= hi {
		return true, unitOf(d), 0
	}
	cHole, err := a.seek(fd, lo, unix.SEEK_HOLE)
	if err != nil {
		return false, 0, toErrno(err)
	}
	if cHole >= hi {
		return false, unitOf(cHole), 0
	}
	s := scratch[:hi-lo]
	n, err := a.pread(fd, s, lo)
	if err != nil {
		return false, 0, toErrno(err)
	}
	// A short unit is a damaged file: data, so that reading it gives EIO.
	return n == len(s) && content.IsZero(s), e + 1, 0
}

// unitsPerWorker is the least work worth another goroutine (reads; writes
// are encrypted whole, see write): 64 extents
// (256 KiB), so that a request is split from 512 KiB on. The goroutine
// itself starts in about a microsecond, but it runs on another core, whose
// idle thread must be woken (several microseconds on a virtual machine)
// and whose cache then holds half the buffer: 64 KiB of AES-XTS take 5-15
// microseconds, not enough to pay for that. With 16 (64 KiB), cp's 128 KiB
// writes were split in two: copytree over the ring 0.79-0.80 s against
// 0.65 with 64; on /dev/fuse 0.69-0.80 against 0.68-0.72; seqread and
// seqwrite (1 MiB, still split) level (2026-12-02, AMD EPYC, VAES and the
// AES-NI path alike).
const unitsPerWorker = 64

// forUnits calls fn for every extent from e0 to e1, spreading a large run
// (a 1 MiB request is 256 extents) over the CPUs: extents are independent
// units of encryption, so a single request need not be limited to one
// core's AES speed.
func forUnits(e0, e1 int64, fn func(e int64)) {
	forRuns(e0, e1, func(first, last int64) {
		for e := first; e <= last; e++ {
			fn(e)
		}
	})
}

// forRuns splits the extents e0..e1 into one contiguous run per worker
// and calls fn(first, last) for each, concurrently.
func forRuns(e0, e1 int64, fn func(first, last int64)) {
	n := e1 - e0 + 1
	workers := min(int64(runtime.GOMAXPROCS(0)), n/unitsPerWorker)
	if workers <= 1 {
		fn(e0, e1)
		return
	}
	chunk := (n + workers - 1) / workers
	var wg sync.WaitGroup
	for start := e0 + chunk; start <= e1; start += chunk {
		wg.Add(1)
		go func(first, last int64) {
			defer wg.Done()
			fn(first, last)
		}(start, min(e1, start+chunk-1))
	}
	fn(e0, e0+chunk-1)
	wg.Wait()
}
