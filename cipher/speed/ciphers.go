package speed

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	//lint:ignore SA1019 twofish-xts-plain64 is a cipher cryptsetup offers for LUKS volumes; we measure and open it
	"golang.org/x/crypto/twofish"
	"golang.org/x/crypto/xts"

	"github.com/twincrypt/twincrypt/cipher/sector"
)

// Row names one line of cryptsetup benchmark's cipher table.
type Row struct {
	Cipher  string `json:"cipher"`   // "aes", "serpent" or "twofish"
	Mode    string `json:"mode"`     // "cbc" or "xts"
	KeyBits int    `json:"key_bits"` // as cryptsetup counts it: an XTS key is two cipher keys
}

// Algorithm returns the name cryptsetup prints, e.g. "aes-xts".
func (r Row) Algorithm() string { return r.Cipher + "-" + r.Mode }

// Rows returns the twelve rows of cryptsetup benchmark's cipher table in its
// order: cbc 128, cbc 256, xts 256, xts 512, each for aes, serpent, twofish.
func Rows() []Row {
	var rows []Row
	for _, g := range []struct {
		mode string
		bits int
	}{{"cbc", 128}, {"cbc", 256}, {"xts", 256}, {"xts", 512}} {
		for _, c := range []string{"aes", "serpent", "twofish"} {
			rows = append(rows, Row{Cipher: c, Mode: g.mode, KeyBits: g.bits})
		}
	}
	return rows
}

// SerpentUnavailable is the reason given for the serpent rows. The Go
// standard library and golang.org/x/crypto have no Serpent; the third-party
// Go packages found (e.g. github.com/aead/serpent) have been unmaintained
// for years, and a disk-encryption benchmark is no reason to pull one in.
const SerpentUnavailable = "not available: no maintained Go implementation"

// Implementation returns how a row is measured: a description, and a
// constructor for one unit cipher (one per goroutine), or reason != "" when
// the row cannot be measured.
func Implementation(r Row) (desc, reason string) {
	im := implFor(r)
	return im.desc, im.reason
}

// UnitCipher is a dm-crypt style sector cipher: each data unit (sector) is
// encrypted on its own, with the unit number as IV or tweak.
// sector.Cipher and *xts.Cipher satisfy it.
type UnitCipher interface {
	Encrypt(dst, src []byte, unit uint64)
	Decrypt(dst, src []byte, unit uint64)
}

type impl struct {
	desc   string
	reason string
	new    func(key []byte) (UnitCipher, error)
}

func implFor(r Row) impl {
	switch r.Algorithm() {
	case "aes-cbc":
		return impl{
			desc: "twincrypt cipher/sector aes-cbc-plain64, " + sector.Implementation(),
			new:  func(k []byte) (UnitCipher, error) { return sector.New("aes-cbc-plain64", k) },
		}
	case "aes-xts":
		return impl{
			desc: "twincrypt cipher/sector aes-xts-plain64, " + sector.Implementation(),
			new:  func(k []byte) (UnitCipher, error) { return sector.New("aes-xts-plain64", k) },
		}
	case "twofish-cbc":
		return impl{
			desc: "golang.org/x/crypto/twofish in crypto/cipher CBC, plain64 IV per sector",
			new:  func(k []byte) (UnitCipher, error) { return newTwofishCBC(k) },
		}
	case "twofish-xts":
		return impl{
			desc: "golang.org/x/crypto/twofish in golang.org/x/crypto/xts, plain64 tweak",
			new:  func(k []byte) (UnitCipher, error) { return newTwofishXTS(k) },
		}
	case "serpent-cbc", "serpent-xts":
		return impl{desc: "serpent", reason: SerpentUnavailable}
	}
	return impl{desc: r.Algorithm(), reason: "not available: unknown algorithm"}
}

// twofishBlock adapts twofish.NewCipher to the cipher.Block constructor
// that golang.org/x/crypto/xts takes.
func twofishBlock(key []byte) (cipher.Block, error) { return twofish.NewCipher(key) }

// newTwofishXTS returns twofish-xts-plain64: XTS (IEEE 1619 with Twofish in
// place of AES) from golang.org/x/crypto/xts, whose sector number is the
// little-endian 64-bit tweak, i.e. dm-crypt's plain64. The key holds two
// Twofish keys (data key first), 32 or 64 bytes.
func newTwofishXTS(key []byte) (*xts.Cipher, error) {
	if len(key) != 32 && len(key) != 64 {
		return nil, fmt.Errorf("speed: twofish-xts takes a 32 or 64 byte key, got %d", len(key))
	}
	return xts.NewCipher(twofishBlock, key)
}

// newTwofishCBC returns twofish-cbc-plain64 for a 16, 24 or 32 byte key.
func newTwofishCBC(key []byte) (*cbcPlain64, error) {
	b, err := twofish.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return newCBCPlain64(b)
}

// cbcPlain64 is CBC over any 16-byte block cipher with dm-crypt's plain64
// IV: IV = LE64(unit) || 0^64, one chain per data unit. It uses
// crypto/cipher's CBC and re-keys its IV with SetIV, so the hot loop does not
// allocate. Data units must be a multiple of 16 bytes. Not safe for
// concurrent use: make one per goroutine.
type cbcPlain64 struct {
	b        cipher.Block
	enc, dec cipher.BlockMode
	iv       [16]byte
}

// ivSetter is implemented by crypto/cipher's CBC modes.
type ivSetter interface{ SetIV([]byte) }

func newCBCPlain64(b cipher.Block) (*cbcPlain64, error) {
	if b.BlockSize() != 16 {
		return nil, fmt.Errorf("speed: CBC plain64 needs a 16-byte block cipher, got %d", b.BlockSize())
	}
	c := &cbcPlain64{b: b}
	c.enc = cipher.NewCBCEncrypter(b, c.iv[:])
	c.dec = cipher.NewCBCDecrypter(b, c.iv[:])
	return c, nil
}

func (c *cbcPlain64) setIV(unit uint64) {
	binary.LittleEndian.PutUint64(c.iv[:8], unit)
	clear(c.iv[8:])
}

// Encrypt encrypts one data unit; len(src) must be a multiple of 16.
func (c *cbcPlain64) Encrypt(dst, src []byte, unit uint64) {
	c.setIV(unit)
	if s, ok := c.enc.(ivSetter); ok {
		s.SetIV(c.iv[:])
		c.enc.CryptBlocks(dst, src)
		return
	}
	cipher.NewCBCEncrypter(c.b, c.iv[:]).CryptBlocks(dst, src)
}

// Decrypt decrypts one data unit; len(src) must be a multiple of 16.
func (c *cbcPlain64) Decrypt(dst, src []byte, unit uint64) {
	c.setIV(unit)
	if s, ok := c.dec.(ivSetter); ok {
		s.SetIV(c.iv[:])
		c.dec.CryptBlocks(dst, src)
		return
	}
	cipher.NewCBCDecrypter(c.b, c.iv[:]).CryptBlocks(dst, src)
}

// Throughput is one timed direction of one cipher row.
type Throughput struct {
	Bytes      int64   `json:"bytes"`
	Seconds    float64 `json:"seconds"`     // wall clock, from the common start to the last worker's end
	MiBPerSec  float64 `json:"mib_per_s"`   // sum over workers of bytes/wall time, in MiB (2^20 bytes) per second
	CPUSeconds float64 `json:"cpu_seconds"` // CPU time of the worker threads, summed; 0 if unknown
	// CPUMiBPerSec is the sum over workers of bytes per second of their
	// thread's CPU time: what the workers would do with the CPUs to
	// themselves. On a busy machine it stays near the quiet figure while
	// MiBPerSec drops (it does not remove cache or SMT contention). 0 if
	// CPU time is unknown.
	CPUMiBPerSec float64 `json:"cpu_mib_per_s"`
}

// CPUSecondsPerGiB returns the CPU time spent per GiB processed, or 0.
func (t Throughput) CPUSecondsPerGiB() float64 {
	if t.Bytes == 0 {
		return 0
	}
	return t.CPUSeconds / (float64(t.Bytes) / (1 << 30))
}

// CipherResult is one row of the cipher table for one number of workers.
type CipherResult struct {
	Algorithm      string      `json:"algorithm"` // "aes-xts"
	KeyBits        int         `json:"key_bits"`
	Workers        int         `json:"workers"`
	Available      bool        `json:"available"`
	Implementation string      `json:"implementation,omitempty"`
	Reason         string      `json:"reason,omitempty"`
	SectorSize     int         `json:"sector_size"`
	BufferSize     int         `json:"buffer_size"`
	Encryption     *Throughput `json:"encryption,omitempty"`
	Decryption     *Throughput `json:"decryption,omitempty"`
}

// CipherOptions controls one cipher measurement.
type CipherOptions struct {
	Time       time.Duration // per direction; at least one buffer pass per worker is always made
	BufferSize int           // bytes per worker buffer, a multiple of SectorSize
	SectorSize int           // data unit size, a multiple of 16
	Workers    int           // goroutines, each with its own cipher instance and buffer
}

func (o *CipherOptions) defaults() error {
	if o.Time <= 0 {
		o.Time = DefaultCipherTime
	}
	if o.SectorSize == 0 {
		o.SectorSize = DefaultSectorSize
	}
	if o.BufferSize == 0 {
		o.BufferSize = DefaultBufferSize
	}
	if o.Workers <= 0 {
		o.Workers = 1
	}
	if o.SectorSize < 16 || o.SectorSize%16 != 0 {
		return fmt.Errorf("speed: sector size %d is not a positive multiple of 16", o.SectorSize)
	}
	if o.BufferSize < o.SectorSize || o.BufferSize%o.SectorSize != 0 {
		return fmt.Errorf("speed: buffer size %d is not a multiple of the sector size %d", o.BufferSize, o.SectorSize)
	}
	return nil
}

// MeasureCipher times encryption, then decryption, of one row: each of
// o.Workers goroutines owns a buffer of o.BufferSize bytes and a cipher
// instance with the same random key, and processes its buffer in place,
// o.SectorSize bytes (one data unit, its own IV or tweak) at a time, for
// o.Time. Unit numbers count 512-byte sectors, as dm-crypt's plain64 does
// without iv_large_sectors. Rows with no implementation come back with
// Available false and a Reason, and no error.
func MeasureCipher(ctx context.Context, r Row, o CipherOptions) (CipherResult, error) {
	if err := o.defaults(); err != nil {
		return CipherResult{}, err
	}
	im := implFor(r)
	res := CipherResult{
		Algorithm:      r.Algorithm(),
		KeyBits:        r.KeyBits,
		Workers:        o.Workers,
		Implementation: im.desc,
		Reason:         im.reason,
		SectorSize:     o.SectorSize,
		BufferSize:     o.BufferSize,
	}
	if im.reason != "" {
		return res, nil
	}
	key := make([]byte, r.KeyBits/8)
	if _, err := rand.Read(key); err != nil {
		return res, err
	}
	ciphers := make([]UnitCipher, o.Workers)
	for i := range ciphers {
		c, err := im.new(key)
		if err != nil {
			return res, fmt.Errorf("speed: %s %db: %w", r.Algorithm(), r.KeyBits, err)
		}
		ciphers[i] = c
	}
	clear(key)
	enc, err := timeUnits(ctx, ciphers, o, true)
	if err != nil {
		return res, err
	}
	dec, err := timeUnits(ctx, ciphers, o, false)
	if err != nil {
		return res, err
	}
	res.Available = true
	res.Encryption, res.Decryption = &enc, &dec
	return res, nil
}

// timeUnits runs one direction on every worker for o.Time.
func timeUnits(ctx context.Context, ciphers []UnitCipher, o CipherOptions, encrypt bool) (Throughput, error) {
	n := len(ciphers)
	type result struct {
		bytes int64
		wall  time.Duration
		cpu   time.Duration
		cpuOK bool
	}
	results := make([]result, n)
	var (
		ready, done sync.WaitGroup
		stop        atomic.Bool
	)
	start := make(chan struct{})
	ready.Add(n)
	for w := range n {
		done.Go(func() {
			// One OS thread per worker, so that its CPU time can be read.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			c := ciphers[w]
			op := c.Decrypt
			if encrypt {
				op = c.Encrypt
			}
			buf := make([]byte, o.BufferSize)
			var seed [32]byte
			seed[0] = byte(w)
			_, _ = mrand.NewChaCha8(seed).Read(buf)
			step := uint64(o.SectorSize / 512)
			if step == 0 {
				step = 1
			}
			unit := uint64(w) << 40 // workers use disjoint sector ranges
			pass := func() {
				for off := 0; off < len(buf); off += o.SectorSize {
					s := buf[off : off+o.SectorSize]
					op(s, s, unit)
					unit += step
				}
			}
			pass() // warm up: page in the buffer, fill caches
			ready.Done()
			<-start
			t0 := time.Now()
			c0, ok0 := threadCPUTime()
			var bytes int64
			for {
				pass()
				bytes += int64(len(buf))
				if stop.Load() {
					break
				}
			}
			c1, ok1 := threadCPUTime()
			results[w] = result{bytes: bytes, wall: time.Since(t0), cpu: c1 - c0, cpuOK: ok0 && ok1}
		})
	}
	ready.Wait()
	t0 := time.Now()
	close(start)
	timer := time.NewTimer(o.Time)
	select {
	case <-timer.C:
	case <-ctx.Done():
		timer.Stop()
	}
	stop.Store(true)
	done.Wait()
	elapsed := time.Since(t0)
	if err := ctx.Err(); err != nil {
		return Throughput{}, err
	}
	var t Throughput
	cpuOK := true
	for _, r := range results {
		t.Bytes += r.bytes
		if r.wall > 0 {
			t.MiBPerSec += float64(r.bytes) / (1 << 20) / r.wall.Seconds()
		}
		t.CPUSeconds += r.cpu.Seconds()
		if r.cpu > 0 {
			t.CPUMiBPerSec += float64(r.bytes) / (1 << 20) / r.cpu.Seconds()
		}
		cpuOK = cpuOK && r.cpuOK && r.cpu > 0
	}
	if !cpuOK {
		t.CPUSeconds, t.CPUMiBPerSec = 0, 0
	}
	t.Seconds = elapsed.Seconds()
	if t.Bytes == 0 {
		return t, errors.New("speed: no data processed")
	}
	return t, nil
}
