package bench

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

// The data workloads write content that can be checked without keeping a
// second copy: a file is a sequence of 4 KiB units, and unit u in
// generation g is a 4 KiB slice of a random base (chosen by u and g) whose
// first 8 bytes are replaced by a stamp derived from u and g. A unit that
// lands at the wrong offset, a stale unit (old generation), a zeroed or
// garbled unit all differ from what is expected. Generations let randrw
// and bonnie rewrite a unit with different content.
const (
	// patternUnit is the unit that carries its own stamp: 4 KiB, the
	// extent size of the encrypted mounts and the page size.
	patternUnit = 4096
	// patternPeriod is the size of the random base: 4 MiB of incompressible
	// bytes, a multiple of every block size the workloads use.
	patternPeriod = 4 << 20
	// patternStampSize is the size of the per-unit stamp: 8 bytes.
	patternStampSize = 8

	unitsPerPeriod = patternPeriod / patternUnit
)

// pattern is the deterministic content of one workload's files.
type pattern struct {
	seed uint64
	// base holds the random bytes. The stamp bytes of each base unit are
	// overwritten in place by unit and span: only bytes after the stamp
	// are compared against base.
	base    []byte
	scratch []byte
}

func newPattern(seed uint64) *pattern {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	copy(key[8:], "twincrypt bench pattern")
	base := make([]byte, patternPeriod)
	rand.NewChaCha8(key).Read(base)
	return &pattern{seed: seed, base: base}
}

// baseUnit is the index, in base, of the unit that unit u of generation
// gen copies.
func (pt *pattern) baseUnit(u int64, gen uint32) int {
	return int((uint64(u) + uint64(gen)*0x9e3779b1) % unitsPerPeriod)
}

// stamp is the first 8 bytes of unit u in generation gen (splitmix64 of
// the seed, the unit number and the generation).
func (pt *pattern) stamp(u int64, gen uint32) uint64 {
	z := pt.seed ^ uint64(u)*0xbf58476d1ce4e5b9 ^ uint64(gen)<<48 ^ 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// unit returns the content of unit u in generation gen. The slice aliases
// the pattern's base: it is valid until the next call of unit or span.
func (pt *pattern) unit(u int64, gen uint32) []byte {
	i := pt.baseUnit(u, gen)
	b := pt.base[i*patternUnit : (i+1)*patternUnit]
	binary.LittleEndian.PutUint64(b, pt.stamp(u, gen))
	return b
}

// span returns the generation-0 content of the n bytes at file offset off
// (both multiples of patternUnit). Where the span does not wrap around the
// base it aliases the base (no copy: the workloads write from it at full
// speed); it is valid until the next call of unit or span.
func (pt *pattern) span(off int64, n int) []byte {
	u0 := off / patternUnit
	units := n / patternUnit
	i0 := pt.baseUnit(u0, 0)
	if i0+units <= unitsPerPeriod {
		b := pt.base[i0*patternUnit : i0*patternUnit+n]
		for k := 0; k < units; k++ {
			binary.LittleEndian.PutUint64(b[k*patternUnit:], pt.stamp(u0+int64(k), 0))
		}
		return b
	}
	if cap(pt.scratch) < n {
		pt.scratch = make([]byte, n)
	}
	b := pt.scratch[:n]
	for k := 0; k < units; k++ {
		copy(b[k*patternUnit:], pt.unit(u0+int64(k), 0))
	}
	return b
}

// unitDiff returns the index of the first byte where got differs from
// unit u of generation gen, or -1.
func (pt *pattern) unitDiff(got []byte, u int64, gen uint32) int {
	if len(got) != patternUnit {
		return min(len(got), patternUnit)
	}
	var want [patternStampSize]byte
	binary.LittleEndian.PutUint64(want[:], pt.stamp(u, gen))
	for k := range want {
		if got[k] != want[k] {
			return k
		}
	}
	i := pt.baseUnit(u, gen)
	rest := pt.base[i*patternUnit+patternStampSize : (i+1)*patternUnit]
	if string(got[patternStampSize:]) == string(rest) {
		return -1
	}
	for k := range rest {
		if got[patternStampSize+k] != rest[k] {
			return patternStampSize + k
		}
	}
	return -1
}

// errContent is wrapped by every content mismatch the workloads find.
var errContent = errors.New("content differs from what was written")

// contentError names the file, unit and byte where data differs.
func contentError(file string, u int64, gen uint32, at int) error {
	return fmt.Errorf("%s: 4 KiB unit %d (offset %d, generation %d) differs at byte %d (file offset %d): %w",
		file, u, u*patternUnit, gen, at, u*patternUnit+int64(at), errContent)
}

// check compares got, the bytes at file offset off (a multiple of
// patternUnit), with what the pattern wrote there; gen gives each unit's
// generation (nil: all generation 0). file names the file in the error.
func (pt *pattern) check(file string, got []byte, off int64, gen func(u int64) uint32) error {
	if len(got)%patternUnit != 0 {
		return fmt.Errorf("%s: read of %d bytes at offset %d is not whole 4 KiB units", file, len(got), off)
	}
	for k := 0; k < len(got); k += patternUnit {
		u := (off + int64(k)) / patternUnit
		var g uint32
		if gen != nil {
			g = gen(u)
		}
		if at := pt.unitDiff(got[k:k+patternUnit], u, g); at >= 0 {
			return contentError(file, u, g, at)
		}
	}
	return nil
}

// dropFileCache asks the kernel to forget the cached pages of the open
// file f, so that the next read goes through the filesystem (for an
// encrypted mount: reads the ciphertext and decrypts it) instead of
// returning what the page cache kept from the write. It works without
// root on any filesystem with a page cache (FUSE included); on tmpfs it
// does nothing, which is harmless since tmpfs pages are the storage.
func dropFileCache(f *os.File) {
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

// verifyPatternFile reads the file at path from the start, after dropping
// its cached pages, and checks that it holds exactly size bytes of the
// pattern (generations from gen, nil for all 0). name is the file's name
// in errors.
func (pt *pattern) verifyFile(path, name string, size int64, gen func(u int64) uint32) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	dropFileCache(f)
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if fi.Size() != size {
		return fmt.Errorf("verify %s: size is %d bytes, wrote %d: %w", name, fi.Size(), size, errContent)
	}
	buf := make([]byte, 1<<20)
	var off int64
	for off < size {
		n, err := io.ReadFull(f, buf[:min(int64(len(buf)), size-off)])
		if err != nil {
			return fmt.Errorf("verify %s: read at offset %d: %w", name, off, err)
		}
		if err := pt.check(name, buf[:n], off, gen); err != nil {
			return fmt.Errorf("verify %w", err)
		}
		off += int64(n)
	}
	if n, _ := f.Read(buf[:1]); n != 0 {
		return fmt.Errorf("verify %s: data past the %d bytes written: %w", name, size, errContent)
	}
	return nil
}
