package speed

import (
	"context"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"fmt"
	"hash"
	"runtime"
	"time"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/pbkdf2"
)

// KeyBits is the derived key size of every KDF measurement, as in
// cryptsetup benchmark ("for 256-bit key").
const KeyBits = 256

var (
	benchPassword = []byte("twincrypt speed benchmark passphrase")
	benchSalt     = []byte("twincrypt speed salt, 32 bytes..")
)

// PBKDF2Hashes are the hashes measured, in cryptsetup's order.
var PBKDF2Hashes = []string{"sha1", "sha256", "sha512"}

func pbkdf2Hash(name string) (func() hash.Hash, error) {
	switch name {
	case "sha1":
		return sha1.New, nil
	case "sha256":
		return sha256.New, nil
	case "sha512":
		return sha512.New, nil
	}
	return nil, fmt.Errorf("speed: unknown PBKDF2 hash %q", name)
}

// PBKDF2Result is one PBKDF2 line.
type PBKDF2Result struct {
	Hash                string  `json:"hash"`
	KeyBits             int     `json:"key_bits"`
	IterationsPerSecond uint64  `json:"iterations_per_second"`
	Iterations          int     `json:"iterations"`  // of the run the rate comes from
	CPUSeconds          float64 `json:"cpu_seconds"` // thread CPU time of that run
	WallSeconds         float64 `json:"wall_seconds"`
	Clock               string  `json:"clock"` // "thread-cpu" (as cryptsetup's getrusage) or "wall"
}

// MeasurePBKDF2 finds how many PBKDF2-HMAC iterations per second one core
// does for a 256-bit key (golang.org/x/crypto/pbkdf2). Like cryptsetup it
// grows the iteration count until one derivation takes at least target,
// and divides; time is the CPU time of the thread (cryptsetup uses the
// process's getrusage), or the wall clock where that cannot be read. For
// SHA-1, a 256-bit key takes two HMAC chains, so its rate is half of what a
// 160-bit key would give; cryptsetup counts the same way.
func MeasurePBKDF2(ctx context.Context, hashName string, target time.Duration) (PBKDF2Result, error) {
	h, err := pbkdf2Hash(hashName)
	if err != nil {
		return PBKDF2Result{}, err
	}
	if target <= 0 {
		target = DefaultPBKDF2Time
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	iters := 1000
	for round := 0; ; round++ {
		if err := ctx.Err(); err != nil {
			return PBKDF2Result{}, err
		}
		c0, ok0 := threadCPUTime()
		w0 := time.Now()
		pbkdf2.Key(benchPassword, benchSalt, iters, KeyBits/8, h)
		wall := time.Since(w0)
		c1, ok1 := threadCPUTime()
		used, clock := c1-c0, "thread-cpu"
		if !ok0 || !ok1 || used <= 0 {
			used, clock = wall, "wall"
		}
		if used >= target || round >= 40 {
			return PBKDF2Result{
				Hash:                hashName,
				KeyBits:             KeyBits,
				IterationsPerSecond: uint64(float64(iters) / used.Seconds()),
				Iterations:          iters,
				CPUSeconds:          (c1 - c0).Seconds(),
				WallSeconds:         wall.Seconds(),
				Clock:               clock,
			}, nil
		}
		iters = nextCount(iters, used, target)
	}
}

// nextCount scales a work count that took used toward target: by 16 while
// the run is too short to extrapolate from, else proportionally with 5 %
// headroom so that the next run lands just above target.
func nextCount(n int, used, target time.Duration) int {
	if used < target/16 {
		return n * 16
	}
	next := int(float64(n)*float64(target)/float64(used)*1.05) + 1
	if next <= n {
		next = n + 1
	}
	return next
}

// Argon2Variants are the argon2 variants measured, in cryptsetup's order.
var Argon2Variants = []string{"argon2i", "argon2id"}

// Argon2Options controls the argon2 parameter search.
type Argon2Options struct {
	Target       time.Duration // requested time per derivation; cryptsetup's default is 2 s
	MaxMemoryKiB uint32        // 0: Argon2MemoryCap()
	Threads      int           // parallel lanes; 0: min(4, runtime.NumCPU())
}

// Argon2Result is one argon2 line: the parameters found for the target.
type Argon2Result struct {
	Variant         string  `json:"variant"`
	KeyBits         int     `json:"key_bits"`
	Iterations      uint32  `json:"iterations"`
	MemoryKiB       uint32  `json:"memory_kib"`
	Threads         int     `json:"threads"`
	RequestedMS     int64   `json:"requested_ms"`
	MeasuredMS      float64 `json:"measured_ms"` // wall time of the last derivation with these parameters
	Converged       bool    `json:"converged"`   // measured within -5 %/+10 % of the request, as cryptsetup accepts
	Derivations     int     `json:"derivations"` // how many derivations the search ran
	MemoryCapKiB    uint32  `json:"memory_cap_kib"`
	MemoryCapSource string  `json:"memory_cap_source"`
}

// DefaultArgon2Threads is min(4, NumCPU): cryptsetup's default of 4 lanes,
// capped by the CPUs as luksFormat does.
func DefaultArgon2Threads() int { return min(4, runtime.NumCPU()) }

// Argon2 minimum cost, as LUKS2: 4 passes; memory at least 32 KiB and at
// least the 8 KiB per lane that the specification requires.
const (
	argon2MinIterations = 4
	argon2MinMemoryKiB  = 32
)

// MeasureArgon2 searches, the way cryptsetup's benchmark does, for argon2
// parameters (golang.org/x/crypto/argon2) whose derivation of a 256-bit key
// takes o.Target of wall-clock time: keep 4 iterations and raise memory up
// to the cap first, then raise iterations. A first phase finds small
// parameters that take at least 1/8 of the target (cryptsetup: 250 ms of
// 2 s), using the fastest of 3 runs; then it extrapolates and re-measures,
// one run each, until a run lands within -5 %/+10 % of the target or 10
// attempts have been made (Converged then reports false).
func MeasureArgon2(ctx context.Context, variant string, o Argon2Options) (Argon2Result, error) {
	var kdf func(t, m uint32, p uint8)
	switch variant {
	case "argon2i":
		kdf = func(t, m uint32, p uint8) { argon2.Key(benchPassword, benchSalt, t, m, p, KeyBits/8) }
	case "argon2id":
		kdf = func(t, m uint32, p uint8) { argon2.IDKey(benchPassword, benchSalt, t, m, p, KeyBits/8) }
	default:
		return Argon2Result{}, fmt.Errorf("speed: unknown argon2 variant %q", variant)
	}
	if o.Target <= 0 {
		o.Target = DefaultArgon2Time
	}
	if o.Threads <= 0 {
		o.Threads = DefaultArgon2Threads()
	}
	if o.Threads > 255 {
		return Argon2Result{}, fmt.Errorf("speed: argon2 threads %d > 255", o.Threads)
	}
	res := Argon2Result{
		Variant:     variant,
		KeyBits:     KeyBits,
		Threads:     o.Threads,
		RequestedMS: o.Target.Milliseconds(),
	}
	res.MemoryCapKiB, res.MemoryCapSource = o.MaxMemoryKiB, "--argon2-memory"
	if o.MaxMemoryKiB == 0 {
		res.MemoryCapKiB, res.MemoryCapSource = Argon2MemoryCap()
	}
	minM := max(argon2MinMemoryKiB, 8*uint32(o.Threads))
	maxM := max(res.MemoryCapKiB, minM)
	p := uint8(o.Threads)

	measure := func(t, m uint32, samples int) (time.Duration, error) {
		best := time.Duration(-1)
		for range samples {
			if err := ctx.Err(); err != nil {
				return 0, err
			}
			t0 := time.Now()
			kdf(t, m, p)
			d := time.Since(t0)
			res.Derivations++
			if best < 0 || d < best {
				best = d
			}
			if m >= 64*1024 {
				runtime.GC() // give the big block array back before the next run
			}
		}
		return best, nil
	}

	target := o.Target
	minTime := min(250*time.Millisecond, target/8)
	fastTime := minTime / 25 // cryptsetup: 10 ms of 250 ms
	t, m := uint32(argon2MinIterations), minM

	// Phase 1: small parameters that take at least minTime.
	var took time.Duration
	for range 64 {
		d, err := measure(t, m, 3)
		if err != nil {
			return res, err
		}
		took = d
		if d >= minTime {
			break
		}
		grow := func(x uint32) uint32 {
			if d < fastTime {
				return satMul(x, 16)
			}
			return uint32(min(float64(x)*float64(minTime)/float64(d)+1, 1<<32-1))
		}
		if m < maxM {
			m = min(grow(m), maxM)
		} else {
			t = grow(t)
		}
	}

	// Phase 2: extrapolate to the target and check, as cryptsetup does.
	lo, hi := target*95/100, target*110/100
	res.Iterations, res.MemoryKiB, res.MeasuredMS = t, m, ms(took)
	for range 10 {
		if took >= lo && took <= hi {
			break
		}
		nt, nm := nextArgon2(t, m, argon2MinIterations, minM, maxM, took, target)
		if nt == t && nm == m {
			break // stuck, as at the memory cap with a target just out of reach
		}
		t, m = nt, nm
		d, err := measure(t, m, 1)
		if err != nil {
			return res, err
		}
		took = d
		res.Iterations, res.MemoryKiB, res.MeasuredMS = t, m, ms(took)
	}
	res.Converged = took >= lo && took <= hi
	return res, nil
}

// nextArgon2 scales (t, m) from a run that took to one that should take
// target: when too slow, lower the iterations first and then the memory;
// when too fast, raise the memory first (up to maxM) and then iterations.
func nextArgon2(t, m, minT, minM, maxM uint32, took, target time.Duration) (uint32, uint32) {
	if took <= 0 {
		return t, m
	}
	f := float64(target) / float64(took)
	work := float64(t) * float64(m) * f
	if took > target {
		nt := uint32(float64(t) * f)
		if nt >= minT {
			return nt, m
		}
		nm := work / float64(minT)
		return minT, uint32(max(min(nm, float64(m)), float64(minM)))
	}
	nm := float64(m) * f
	if nm > float64(maxM) {
		nt := uint32(min(work/float64(maxM), 1<<32-1))
		return max(nt, minT), maxM
	}
	return t, uint32(max(nm, float64(minM)))
}

func satMul(x, k uint32) uint32 {
	if uint64(x)*uint64(k) > 1<<32-1 {
		return 1<<32 - 1
	}
	return x * k
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
