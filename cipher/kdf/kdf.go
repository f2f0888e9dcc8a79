// Package kdf derives key-encryption keys from passphrases with argon2id,
// scrypt or PBKDF2, with parameters that are stored in the config file.
//
// Security argument. The parameters come from twincrypt.conf, a file that
// an attacker who can write to the lower directory can edit. Deriving is the
// first thing that happens with them (before anything authenticates the
// file), so every cost is bounded by Validate: a tampered config can make an
// unlock fail, but it cannot make the process allocate gigabytes it was
// never going to, or spin for days. Lowering the costs does not open the
// volume either: the master key is wrapped under the key derived with the
// original parameters, so a config with weakened parameters simply does not
// unlock (see package config). It could have made the next wrapping weak,
// though: recovery with the master key used to rewrap under the config's
// parameters. CheckMinimum is the floor the CLI holds every wrapping and
// unlock to, and recovery takes no parameters from the config.
//
// The bounds are deliberately far above the defaults (argon2id 64 MiB / 3
// passes, scrypt 128 MiB, PBKDF2 600 000 iterations) so that users may raise
// the costs, but low enough that an honest machine can still open a volume
// it created: memory is capped at 4 GiB for both memory-hard functions.
package kdf

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"errors"
	"fmt"
	"hash"

	"golang.org/x/crypto/argon2"
	"golang.org/x/crypto/pbkdf2"
	"golang.org/x/crypto/scrypt"
)

// ErrParams is returned for parameters that are unknown, malformed or so
// costly that honouring them would be a denial of service.
var ErrParams = errors.New("kdf: invalid parameters")

// ErrWeak is returned by CheckMinimum for valid parameters that cost less
// than the minimums below. It wraps ErrParams.
var ErrWeak = fmt.Errorf("%w: below the minimum cost", ErrParams)

// Algorithm names as they appear in Params.Algorithm.
const (
	Argon2id = "argon2id"
	Scrypt   = "scrypt"
	PBKDF2   = "pbkdf2"
)

// Default costs, used by Default. They follow current guidance (RFC 9106
// second recommended option for argon2id with more passes, RFC 7914's
// interactive scrypt setting doubled, OWASP 2023 for PBKDF2-HMAC-SHA256).
const (
	DefaultArgon2Time      = 3
	DefaultArgon2MemoryKiB = 64 * 1024
	DefaultArgon2Threads   = 4
	DefaultScryptLogN      = 17
	DefaultScryptR         = 8
	DefaultScryptP         = 1
	DefaultPBKDF2Iter      = 600000
	DefaultPBKDF2Hash      = "sha256"
	// SaltSize is the length of the salts Default generates.
	SaltSize = 32
)

// Limits enforced by Validate. A salt shorter than MinSaltSize is refused
// because the salt is what keeps one precomputation from attacking many
// volumes; the upper limits exist only so that a malicious config cannot
// exhaust memory or time.
const (
	MinSaltSize = 16
	MaxSaltSize = 1024

	MaxArgon2MemoryKiB = 4 * 1024 * 1024 // 4 GiB
	MaxArgon2Time      = 100

	MaxScryptLogN = 24
	// MaxScryptMemory bounds the V array of scrypt, 128*r*N bytes.
	MaxScryptMemory = 4 << 30
	// MaxScryptWork bounds the memory traffic 128*r*N*p, which is
	// proportional to the running time: p lanes are computed one after the
	// other by x/crypto/scrypt. 64 GiB is 512 times the default.
	MaxScryptWork = 64 << 30

	MaxPBKDF2Iter = 100000000

	// MinKeyLen and MaxKeyLen bound the keyLen argument of Derive.
	MinKeyLen = 16
	MaxKeyLen = 1024
)

// Minimum costs, enforced by CheckMinimum wherever a passphrase is wrapped
// or unwrapped (the CLI: init, passwd, mount, fsck, path). Validate's bounds
// above say what can be computed at all; these say what is worth
// computing. They are the cheapest settings of the OWASP Password Storage
// Cheat Sheet (2023), which are also the floor of RFC 9106's guidance:
//
//   - argon2id: the memory for t passes must reach MinArgon2MemoryKiB[t]
//     (46 MiB for 1 pass, 19 MiB for 2, 12 MiB for 3, 9 MiB for 4, 7 MiB for
//     5 or more: OWASP's five equivalent rows, m=47104/t=1 ... m=7168/t=5);
//   - scrypt: 128*r*N of at least 8 MiB and 128*r*N*p of at least 80 MiB
//     (OWASP's rows N=2^17,r=8,p=1 down to N=2^13,r=8,p=10 all meet both);
//   - PBKDF2: 600 000 iterations of HMAC-SHA-256, 210 000 of HMAC-SHA-512.
//
// The defaults are well above them (argon2id 64 MiB x 3, scrypt 128 MiB,
// PBKDF2 600 000). Volumes made before the minimums existed, such as the
// example volumes in testdata/ (argon2id 1 MiB x 1 pass), are below them:
// the CLI opens those only when the user says so (--allow-weak-kdf), never
// because a config says so.
var MinArgon2MemoryKiB = [...]uint32{1: 47104, 2: 19456, 3: 12288, 4: 9216, 5: 7168}

const (
	MinScryptMemory = 8 << 20
	MinScryptWork   = 80 << 20
	MinPBKDF2SHA256 = 600000
	MinPBKDF2SHA512 = 210000
	minimumsSummary = "argon2id 46 MiB x 1 pass, 19 MiB x 2, 12 MiB x 3, 9 MiB x 4 or 7 MiB x 5+; scrypt 128*r*N >= 8 MiB and 128*r*N*p >= 80 MiB; pbkdf2 600000 iterations (sha256) or 210000 (sha512)"
)

// MinimumsSummary says the minimums in one line, for messages.
func MinimumsSummary() string { return minimumsSummary }

// CheckMinimum returns an error wrapping ErrWeak when valid parameters
// cost less than the minimums, and Validate's error for invalid ones.
func (p Params) CheckMinimum() error {
	if err := p.Validate(); err != nil {
		return err
	}
	weak := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s (minimums: %s)", ErrWeak, fmt.Sprintf(format, args...), minimumsSummary)
	}
	switch p.Algorithm {
	case Argon2id:
		t := min(int(p.Time), len(MinArgon2MemoryKiB)-1)
		if need := MinArgon2MemoryKiB[t]; p.MemoryKiB < need {
			return weak("argon2id with %d KiB and %d pass(es): needs at least %d KiB for that many passes", p.MemoryKiB, p.Time, need)
		}
	case Scrypt:
		mem := 128 * uint64(p.R) << uint(p.LogN)
		if mem < MinScryptMemory {
			return weak("scrypt 128*r*N = %d bytes, needs at least %d", mem, MinScryptMemory)
		}
		if work := mem * uint64(p.P); work < MinScryptWork {
			return weak("scrypt 128*r*N*p = %d bytes, needs at least %d", work, MinScryptWork)
		}
	case PBKDF2:
		need := MinPBKDF2SHA256
		if p.Hash == "sha512" {
			need = MinPBKDF2SHA512
		}
		if p.Iterations < need {
			return weak("pbkdf2-%s with %d iterations, needs at least %d", p.Hash, p.Iterations, need)
		}
	}
	return nil
}

// Params is the JSON-serialised description of one derivation. Only the
// fields of the chosen algorithm are set.
type Params struct {
	Algorithm string `json:"algorithm"` // "argon2id", "scrypt" or "pbkdf2"
	Salt      []byte `json:"salt"`      // random, 32 bytes at creation
	// argon2id
	Time      uint32 `json:"time,omitempty"`       // passes
	MemoryKiB uint32 `json:"memory_kib,omitempty"` // memory in KiB
	Threads   uint8  `json:"threads,omitempty"`
	// scrypt
	LogN int `json:"log_n,omitempty"` // N = 1<<LogN
	R    int `json:"r,omitempty"`
	P    int `json:"p,omitempty"`
	// pbkdf2
	Iterations int    `json:"iterations,omitempty"`
	Hash       string `json:"hash,omitempty"` // "sha256" or "sha512"
}

// Default returns sane default parameters for algorithm with a fresh random salt.
func Default(algorithm string) (Params, error) {
	p := Params{Algorithm: algorithm}
	switch algorithm {
	case Argon2id:
		p.Time = DefaultArgon2Time
		p.MemoryKiB = DefaultArgon2MemoryKiB
		p.Threads = DefaultArgon2Threads
	case Scrypt:
		p.LogN = DefaultScryptLogN
		p.R = DefaultScryptR
		p.P = DefaultScryptP
	case PBKDF2:
		p.Iterations = DefaultPBKDF2Iter
		p.Hash = DefaultPBKDF2Hash
	default:
		return Params{}, fmt.Errorf("%w: unknown algorithm %q", ErrParams, algorithm)
	}
	salt, err := NewSalt()
	if err != nil {
		return Params{}, err
	}
	p.Salt = salt
	return p, nil
}

// String describes the function and its costs (not the salt), for messages.
func (p Params) String() string {
	switch p.Algorithm {
	case Argon2id:
		mem := fmt.Sprintf("%d KiB", p.MemoryKiB)
		if p.MemoryKiB%1024 == 0 {
			mem = fmt.Sprintf("%d MiB", p.MemoryKiB/1024)
		}
		return fmt.Sprintf("argon2id (t=%d, m=%s, p=%d)", p.Time, mem, p.Threads)
	case Scrypt:
		return fmt.Sprintf("scrypt (N=2^%d, r=%d, p=%d)", p.LogN, p.R, p.P)
	case PBKDF2:
		return fmt.Sprintf("pbkdf2-%s (%d iterations)", p.Hash, p.Iterations)
	}
	return fmt.Sprintf("%q", p.Algorithm)
}

// NewSalt returns SaltSize fresh random bytes.
func NewSalt() ([]byte, error) {
	salt := make([]byte, SaltSize)
	if _, err := rand.Read(salt); err != nil {
		return nil, fmt.Errorf("kdf: reading random salt: %w", err)
	}
	return salt, nil
}

func paramErr(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrParams, field, fmt.Sprintf(format, args...))
}

// Validate checks the parameters without deriving anything.
//
// Every error wraps ErrParams and names the offending field. Fields that
// belong to another algorithm must be zero: a config that says
// {"algorithm":"argon2id","iterations":10000000} is almost certainly a
// mistake about which cost is in force, and refusing it is cheaper than
// explaining later why the volume was weaker than its owner thought.
func (p Params) Validate() error {
	switch {
	case len(p.Salt) < MinSaltSize:
		return paramErr("salt", "%d bytes, need at least %d", len(p.Salt), MinSaltSize)
	case len(p.Salt) > MaxSaltSize:
		return paramErr("salt", "%d bytes, at most %d allowed", len(p.Salt), MaxSaltSize)
	}
	argonSet := p.Time != 0 || p.MemoryKiB != 0 || p.Threads != 0
	scryptSet := p.LogN != 0 || p.R != 0 || p.P != 0
	pbkdf2Set := p.Iterations != 0 || p.Hash != ""
	switch p.Algorithm {
	case Argon2id:
		if scryptSet || pbkdf2Set {
			return paramErr("algorithm", "argon2id with scrypt or pbkdf2 fields set")
		}
		switch {
		case p.Time == 0:
			return paramErr("time", "must be at least 1")
		case p.Time > MaxArgon2Time:
			return paramErr("time", "%d passes, at most %d allowed", p.Time, MaxArgon2Time)
		case p.Threads == 0:
			return paramErr("threads", "must be at least 1")
		case p.MemoryKiB == 0:
			return paramErr("memory_kib", "must not be zero")
		case p.MemoryKiB < 8*uint32(p.Threads):
			// RFC 9106 requires m >= 8*p; x/crypto/argon2 would
			// silently round it up and so compute a different
			// function than every other implementation.
			return paramErr("memory_kib", "%d KiB, need at least 8 per thread", p.MemoryKiB)
		case p.MemoryKiB > MaxArgon2MemoryKiB:
			return paramErr("memory_kib", "%d KiB, at most %d allowed", p.MemoryKiB, MaxArgon2MemoryKiB)
		}
	case Scrypt:
		if argonSet || pbkdf2Set {
			return paramErr("algorithm", "scrypt with argon2id or pbkdf2 fields set")
		}
		switch {
		case p.LogN <= 0:
			return paramErr("log_n", "must be at least 1")
		case p.LogN > MaxScryptLogN:
			return paramErr("log_n", "%d, at most %d allowed", p.LogN, MaxScryptLogN)
		case p.R <= 0:
			return paramErr("r", "must be at least 1")
		case p.P <= 0:
			return paramErr("p", "must be at least 1")
		case p.R >= 1<<30 || p.P >= 1<<30 || uint64(p.R)*uint64(p.P) >= 1<<30:
			// RFC 7914 section 2: r*p < 2^30. Each factor is checked
			// alone first so that the product cannot overflow.
			return paramErr("r", "r*p = %d*%d must be below 2^30", p.R, p.P)
		}
		// LogN <= 24 and r < 2^30 keep 128*r*N below 2^61; after the
		// memory check it is at most 2^32, and p < 2^30 keeps the work
		// below 2^62.
		mem := 128 * uint64(p.R) << uint(p.LogN)
		if mem > MaxScryptMemory {
			return paramErr("r", "128*r*N = %d bytes, at most %d allowed", mem, uint64(MaxScryptMemory))
		}
		if work := mem * uint64(p.P); work > MaxScryptWork {
			return paramErr("p", "128*r*N*p = %d bytes of work, at most %d allowed", work, uint64(MaxScryptWork))
		}
	case PBKDF2:
		if argonSet || scryptSet {
			return paramErr("algorithm", "pbkdf2 with argon2id or scrypt fields set")
		}
		switch {
		case p.Hash != "sha256" && p.Hash != "sha512":
			return paramErr("hash", "unknown hash %q", p.Hash)
		case p.Iterations <= 0:
			return paramErr("iterations", "must be at least 1")
		case p.Iterations > MaxPBKDF2Iter:
			return paramErr("iterations", "%d, at most %d allowed", p.Iterations, MaxPBKDF2Iter)
		}
	default:
		return paramErr("algorithm", "unknown algorithm %q", p.Algorithm)
	}
	return nil
}

// Derive returns keyLen bytes derived from passphrase.
//
// keyLen must lie in [MinKeyLen, MaxKeyLen]. The parameters are validated
// first, so Derive never allocates or computes more than the limits allow.
func (p Params) Derive(passphrase []byte, keyLen int) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if keyLen < MinKeyLen || keyLen > MaxKeyLen {
		return nil, fmt.Errorf("kdf: key length %d outside [%d, %d]", keyLen, MinKeyLen, MaxKeyLen)
	}
	return p.derive(passphrase, keyLen)
}

// derive computes the key without validating; the known-answer tests use it
// directly because the published vectors use salts shorter than
// MinSaltSize and PBKDF2 iteration counts of 1.
func (p Params) derive(passphrase []byte, keyLen int) ([]byte, error) {
	switch p.Algorithm {
	case Argon2id:
		return argon2.IDKey(passphrase, p.Salt, p.Time, p.MemoryKiB, p.Threads, uint32(keyLen)), nil
	case Scrypt:
		k, err := scrypt.Key(passphrase, p.Salt, 1<<uint(p.LogN), p.R, p.P, keyLen)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrParams, err)
		}
		return k, nil
	case PBKDF2:
		var h func() hash.Hash
		switch p.Hash {
		case "sha256":
			h = sha256.New
		case "sha512":
			h = sha512.New
		default:
			return nil, paramErr("hash", "unknown hash %q", p.Hash)
		}
		return pbkdf2.Key(passphrase, p.Salt, p.Iterations, keyLen, h), nil
	}
	return nil, paramErr("algorithm", "unknown algorithm %q", p.Algorithm)
}
