// Package speed measures, from userspace and in memory only, what
// `cryptsetup benchmark` measures in the kernel: PBKDF2 iterations per
// second, the argon2i/argon2id parameters that take a requested time, and
// the encryption and decryption throughput of aes, serpent and twofish in
// CBC and XTS modes at cryptsetup's key sizes. It knows nothing of FUSE or
// of the command line; every function returns plain structs that the
// caller prints (cmd/twincrypt speed) or marshals as JSON.
//
// # How the ciphers are measured
//
// As dm-crypt does, each sector (4096 bytes by default) is its own data
// unit with its own IV or tweak: dm-crypt's plain64, the little-endian
// 64-bit sector number counted in 512-byte sectors. cryptsetup benchmark
// hands the kernel's cbc(aes) and xts(aes) a caller-supplied IV, no ESSIV,
// so aes-cbc is measured as aes-cbc-plain64 rather than essiv:sha256 (which
// would add one AES-256 block per sector). The aes rows run twincrypt's own cipher/sector code, the
// code that the filesystem and the userspace dm-crypt path use; the twofish
// rows use golang.org/x/crypto/twofish, in crypto/cipher's CBC and in
// golang.org/x/crypto/xts. Serpent has no maintained Go implementation, so
// its rows are reported as not available rather than pulling in an
// unmaintained dependency.
//
// Each worker goroutine owns a 1 MiB buffer (cryptsetup's benchmark buffer
// size) and its own cipher instance, warms up with one pass, and then
// encrypts (or decrypts) the buffer in place, sector by sector, for the
// requested time. One worker gives the one-core figure; one worker per CPU
// (GOMAXPROCS) gives the all-cores figure, the sum of the workers' rates.
// Wall-clock time is used for the rates, and the CPU time of the worker
// threads is recorded alongside.
//
// The numbers are as noisy as the machine. Compare rows of one run with
// each other, and repeat runs, rather than trusting one figure.
package speed

import (
	"context"
	"runtime"
	"slices"
	"time"
)

// Defaults, chosen to resemble cryptsetup benchmark.
const (
	DefaultCipherTime = 300 * time.Millisecond // per row and direction
	DefaultPBKDF2Time = 1 * time.Second        // per hash, CPU time of the final run; cryptsetup's runs are of that order
	DefaultArgon2Time = 2 * time.Second        // cryptsetup's requested time
	DefaultSectorSize = 4096
	DefaultBufferSize = 1 << 20
)

// Options selects what Run measures and how long.
type Options struct {
	CipherTime         time.Duration // per row and direction; 0: DefaultCipherTime
	PBKDF2Time         time.Duration // per hash; 0: DefaultPBKDF2Time
	Argon2Time         time.Duration // requested derivation time; 0: DefaultArgon2Time
	Argon2MaxMemoryKiB uint32        // 0: Argon2MemoryCap()
	Argon2Threads      int           // 0: DefaultArgon2Threads()
	SectorSize         int           // 0: DefaultSectorSize
	BufferSize         int           // 0: DefaultBufferSize
	// Workers lists the worker counts for the cipher tables, e.g. {1} for
	// one core, {GOMAXPROCS} for all cores; nil means both (once if
	// GOMAXPROCS is 1).
	Workers     []int
	SkipKDF     bool
	SkipCiphers bool

	// Called as each result is ready, so a caller can print progressively.
	OnPBKDF2 func(PBKDF2Result)
	OnArgon2 func(Argon2Result)
	OnCipher func(CipherResult)
}

// Settings records the parameters a Report was measured with.
type Settings struct {
	CipherTimeMS  float64 `json:"cipher_time_ms"`
	PBKDF2TimeMS  float64 `json:"pbkdf2_time_ms"`
	Argon2TimeMS  float64 `json:"argon2_time_ms"`
	Argon2Threads int     `json:"argon2_threads"`
	SectorSize    int     `json:"sector_size"`
	BufferSize    int     `json:"buffer_size"`
	Workers       []int   `json:"workers"`
}

// Report is everything Run measured.
type Report struct {
	System   System         `json:"system"`
	Settings Settings       `json:"settings"`
	PBKDF2   []PBKDF2Result `json:"pbkdf2"`
	Argon2   []Argon2Result `json:"argon2"`
	Ciphers  []CipherResult `json:"ciphers"` // Rows() for Workers[0], then for Workers[1], ...
}

// AllCores is the worker count for the all-cores table: GOMAXPROCS.
func AllCores() int { return runtime.GOMAXPROCS(0) }

// DefaultWorkers returns {1, GOMAXPROCS}, or {1} on a single CPU.
func DefaultWorkers() []int {
	if n := AllCores(); n > 1 {
		return []int{1, n}
	}
	return []int{1}
}

// Run measures PBKDF2 (sha1, sha256, sha512), argon2i and argon2id, and
// every row of the cipher table for each worker count, in cryptsetup's
// order. It stops at the first error, or when ctx is cancelled, and returns
// what it has measured so far with the error.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.CipherTime <= 0 {
		o.CipherTime = DefaultCipherTime
	}
	if o.PBKDF2Time <= 0 {
		o.PBKDF2Time = DefaultPBKDF2Time
	}
	if o.Argon2Time <= 0 {
		o.Argon2Time = DefaultArgon2Time
	}
	if o.Argon2Threads <= 0 {
		o.Argon2Threads = DefaultArgon2Threads()
	}
	if o.SectorSize <= 0 {
		o.SectorSize = DefaultSectorSize
	}
	if o.BufferSize <= 0 {
		o.BufferSize = DefaultBufferSize
	}
	workers := slices.Compact(slices.Clone(o.Workers))
	if len(workers) == 0 {
		workers = DefaultWorkers()
	}
	rep := &Report{
		System: ReadSystem(),
		Settings: Settings{
			CipherTimeMS:  ms(o.CipherTime),
			PBKDF2TimeMS:  ms(o.PBKDF2Time),
			Argon2TimeMS:  ms(o.Argon2Time),
			Argon2Threads: o.Argon2Threads,
			SectorSize:    o.SectorSize,
			BufferSize:    o.BufferSize,
			Workers:       workers,
		},
		PBKDF2:  []PBKDF2Result{},
		Argon2:  []Argon2Result{},
		Ciphers: []CipherResult{},
	}
	if !o.SkipKDF {
		for _, h := range PBKDF2Hashes {
			r, err := MeasurePBKDF2(ctx, h, o.PBKDF2Time)
			if err != nil {
				return rep, err
			}
			rep.PBKDF2 = append(rep.PBKDF2, r)
			if o.OnPBKDF2 != nil {
				o.OnPBKDF2(r)
			}
		}
		for _, v := range Argon2Variants {
			r, err := MeasureArgon2(ctx, v, Argon2Options{
				Target:       o.Argon2Time,
				MaxMemoryKiB: o.Argon2MaxMemoryKiB,
				Threads:      o.Argon2Threads,
			})
			if err != nil {
				return rep, err
			}
			rep.Argon2 = append(rep.Argon2, r)
			if o.OnArgon2 != nil {
				o.OnArgon2(r)
			}
		}
	}
	if !o.SkipCiphers {
		for _, w := range workers {
			for _, row := range Rows() {
				r, err := MeasureCipher(ctx, row, CipherOptions{
					Time:       o.CipherTime,
					BufferSize: o.BufferSize,
					SectorSize: o.SectorSize,
					Workers:    w,
				})
				if err != nil {
					return rep, err
				}
				rep.Ciphers = append(rep.Ciphers, r)
				if o.OnCipher != nil {
					o.OnCipher(r)
				}
			}
		}
	}
	return rep, nil
}
