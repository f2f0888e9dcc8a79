package sector

import (
	"encoding/binary"
	"fmt"
)

// RunCipher is implemented by the ciphers New returns: it encrypts or
// decrypts one run of bytes cut into data units of one size, whose last unit
// takes what is left. That is how a file format with small units stores a
// piece of data that is not a whole number of them (twincrypt's aes-cbc
// over 512-byte sectors, cipher/FORMAT.md §3.2).
//
// The run src is cut into units of sectorSize bytes numbered from firstUnit
// on; the last unit holds the rest. A rest shorter than 16 bytes, which
// ciphertext stealing cannot encrypt alone, stays with the unit before it
// (which is then sectorSize+1 to sectorSize+15 bytes), and a run of at most
// sectorSize bytes is one unit. EncryptRun is equivalent to Encrypt on each
// unit, DecryptRun to Decrypt. len(src) must be at least 16, sectorSize at
// least 16, len(dst) >= len(src); dst and src may be the same slice but must
// not otherwise overlap. Violations panic.
//
// CBC encryption, serial within a unit, runs up to eight units of at most
// 512 bytes side by side in one assembly call, the last unit included.
type RunCipher interface {
	Cipher
	EncryptRun(dst, src []byte, sectorSize int, firstUnit uint64)
	DecryptRun(dst, src []byte, sectorSize int, firstUnit uint64)
}

var (
	_ RunCipher = (*xtsCipher)(nil)
	_ RunCipher = (*cbcCipher)(nil)
)

// RunUnits returns how RunCipher cuts a run of n bytes: full units of
// sectorSize bytes, then a last unit of last bytes (0: none; the run is
// then exactly full units).
func RunUnits(n, sectorSize int) (full, last int) {
	if n <= sectorSize {
		return 0, n
	}
	full, last = n/sectorSize, n%sectorSize
	if last > 0 && last < blockSize {
		full--
		last += sectorSize
	}
	return full, last
}

// checkRun enforces the RunCipher contract and returns len(src).
func checkRun(op string, dst, src []byte, sectorSize int) int {
	n := len(src)
	if sectorSize < blockSize {
		panic(fmt.Sprintf("sector: %s: sector size %d is shorter than one 16-byte block", op, sectorSize))
	}
	if n < blockSize {
		panic(fmt.Sprintf("sector: %s: run of %d bytes is shorter than one 16-byte block", op, n))
	}
	if len(dst) < n {
		panic(fmt.Sprintf("sector: %s: dst (%d bytes) is shorter than src (%d bytes)", op, len(dst), n))
	}
	if inexactOverlap(dst[:n], src) {
		panic("sector: " + op + ": dst and src overlap but are not the same slice")
	}
	return n
}

// EncryptRun implements RunCipher: XTS is parallel within a unit already.
func (x *xtsCipher) EncryptRun(dst, src []byte, sectorSize int, firstUnit uint64) {
	n := checkRun("xts encrypt run", dst, src, sectorSize)
	full, _ := RunUnits(n, sectorSize)
	s := full * sectorSize
	x.EncryptSectors(dst[:s], src[:s], sectorSize, firstUnit)
	if s < n {
		x.Encrypt(dst[s:n], src[s:], firstUnit+uint64(full))
	}
}

// DecryptRun implements RunCipher.
func (x *xtsCipher) DecryptRun(dst, src []byte, sectorSize int, firstUnit uint64) {
	n := checkRun("xts decrypt run", dst, src, sectorSize)
	full, _ := RunUnits(n, sectorSize)
	s := full * sectorSize
	x.DecryptSectors(dst[:s], src[:s], sectorSize, firstUnit)
	if s < n {
		x.Decrypt(dst[s:n], src[s:], firstUnit+uint64(full))
	}
}

// DecryptRun implements RunCipher: CBC decryption is parallel within a unit.
func (c *cbcCipher) DecryptRun(dst, src []byte, sectorSize int, firstUnit uint64) {
	n := checkRun("cbc decrypt run", dst, src, sectorSize)
	full, _ := RunUnits(n, sectorSize)
	s := full * sectorSize
	c.DecryptSectors(dst[:s], src[:s], sectorSize, firstUnit)
	if s < n {
		c.Decrypt(dst[s:n], src[s:], firstUnit+uint64(full))
	}
}

// maxRunSector is the largest sector size EncryptRun runs side by side
// (its scratch holds eight of them on the stack).
const maxRunSector = 512

// runLanes is how many units EncryptRun's one assembly call runs.
const runLanes = 8

// EncryptRun implements RunCipher. With the assembly, a sectorSize of at
// most 512 that is a multiple of 16, and two to eight units, every unit
// goes through one 8-lane CBC call: the full units as they are, the last
// one's whole blocks zero-padded to a sector (CBC is prefix-consistent, so
// the padding does not change them), idle lanes on zeros; the last unit's
// ciphertext stealing then needs one more block cipher call. Eight lanes
// cost about what one serial chain of a sector does, so a run of 4096
// bytes takes about an eighth of the time of one chain.
func (c *cbcCipher) EncryptRun(dst, src []byte, sectorSize int, firstUnit uint64) {
	n := checkRun("cbc encrypt run", dst, src, sectorSize)
	full, last := RunUnits(n, sectorSize)
	units := full
	if last > 0 {
		units++
	}
	ab, ok := c.b.(*asmBlock)
	// Eight whole units (a full extent) are EncryptSectors' own case, with
	// no copy through the scratch.
	if !ok || units < 2 || units > runLanes || (last == 0 && units == runLanes) ||
		sectorSize > maxRunSector || sectorSize%blockSize != 0 {
		s := full * sectorSize
		c.EncryptSectors(dst[:s], src[:s], sectorSize, firstUnit)
		if s < n {
			c.Encrypt(dst[s:n], src[s:], firstUnit+uint64(full))
		}
		return
	}
	var buf [runLanes * maxRunSector]byte
	var ivs, zero [maxLanes * blockSize]byte
	s := full * sectorSize
	lastWhole := last / blockSize * blockSize // <= sectorSize: last < sectorSize+16
	tail := last - lastWhole
	copy(buf[:s], src[:s])
	copy(buf[s:s+lastWhole], src[s:s+lastWhole])
	var pTail [blockSize]byte // P_n*, read before dst (maybe src) is written
	copy(pTail[:tail], src[s+lastWhole:n])
	for l := range units {
		lo, hi := ivWords(c.mode, firstUnit+uint64(l))
		binary.LittleEndian.PutUint64(ivs[16*l:], lo)
		binary.LittleEndian.PutUint64(ivs[16*l+8:], hi)
	}
	if c.essiv != nil {
		cbcEncLanes(c.essiv.(*asmBlock), runLanes, ivs[:], ivs[:], blockSize, &zero)
	}
	cbcEncLanes(ab, runLanes, buf[:], buf[:], sectorSize, &ivs)
	copy(dst[:s+lastWhole], buf[:s+lastWhole])
	if tail == 0 {
		return
	}
	// CS2 as in cbcEncrypt: C_{n-1} is the last whole block; the input of
	// the final block cipher call is (P_n* xor C_{n-1}*) || the rest of
	// C_{n-1}; C_n goes where C_{n-1} was and C_{n-1}* to the tail.
	out := dst[s : s+last]
	prev := out[lastWhole-blockSize : lastWhole]
	for j := range tail {
		cj := prev[j]
		out[lastWhole+j] = cj
		prev[j] = pTail[j] ^ cj
	}
	c.b.Encrypt(prev, prev)
}
