package kdf

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kat is one known-answer vector from testdata/*.json.
type kat struct {
	Name       string `json:"name"`
	Password   string `json:"password"`
	Salt       string `json:"salt"`
	Time       uint32 `json:"time"`
	MemoryKiB  uint32 `json:"memory_kib"`
	Threads    uint8  `json:"threads"`
	LogN       int    `json:"log_n"`
	R          int    `json:"r"`
	P          int    `json:"p"`
	Iterations int    `json:"iterations"`
	Hash       string `json:"hash"`
	KeyLen     int    `json:"key_len"`
	Expected   string `json:"expected_hex"`
	Slow       bool   `json:"slow"`      // skipped with -short
	VerySlow   bool   `json:"very_slow"` // only with TWINCRYPT_SLOW_KAT=1
}

func loadKAT(t *testing.T, file string) []kat {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", file))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Source  string `json:"source"`
		Vectors []kat  `json:"vectors"`
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if f.Source == "" || len(f.Vectors) == 0 {
		t.Fatalf("%s: no source or no vectors", file)
	}
	return f.Vectors
}

func runKAT(t *testing.T, algorithm, file string) {
	for _, v := range loadKAT(t, file) {
		t.Run(v.Name, func(t *testing.T) {
			if v.VerySlow && os.Getenv("TWINCRYPT_SLOW_KAT") == "" {
				t.Skip("needs about 1 GiB; set TWINCRYPT_SLOW_KAT=1")
			}
			if v.Slow && testing.Short() {
				t.Skip("slow vector skipped with -short")
			}
			want, err := hex.DecodeString(v.Expected)
			if err != nil || len(want) != v.KeyLen {
				t.Fatalf("bad expected_hex (len %d, key_len %d): %v", len(want), v.KeyLen, err)
			}
			p := Params{
				Algorithm: algorithm, Salt: []byte(v.Salt),
				Time: v.Time, MemoryKiB: v.MemoryKiB, Threads: v.Threads,
				LogN: v.LogN, R: v.R, P: v.P,
				Iterations: v.Iterations, Hash: v.Hash,
			}
			// The published vectors use short salts (and PBKDF2 c=1)
			// that Validate rightly refuses for real volumes, so the
			// unvalidated derive is tested here; Derive only adds
			// Validate in front of it.
			got, err := p.derive([]byte(v.Password), v.KeyLen)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got  %x\nwant %x", got, want)
			}
			// Where the vector satisfies our own policy, the public
			// entry point must give the same answer.
			if p.Validate() == nil && v.KeyLen >= MinKeyLen {
				got, err := p.Derive([]byte(v.Password), v.KeyLen)
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("Derive: %x, %v", got, err)
				}
			}
		})
	}
}

func TestKATArgon2id(t *testing.T) { runKAT(t, Argon2id, "argon2id.json") }
func TestKATScrypt(t *testing.T)   { runKAT(t, Scrypt, "scrypt.json") }
func TestKATPBKDF2(t *testing.T)   { runKAT(t, PBKDF2, "pbkdf2.json") }

// refPBKDF2 is PBKDF2 written from RFC 8018 section 5.2 with crypto/hmac,
// independent of x/crypto/pbkdf2 and crypto/pbkdf2.
func refPBKDF2(h func() hash.Hash, password, salt []byte, iter, keyLen int) []byte {
	var out []byte
	for block := uint32(1); len(out) < keyLen; block++ {
		mac := hmac.New(h, password)
		mac.Write(salt)
		var be [4]byte
		binary.BigEndian.PutUint32(be[:], block)
		mac.Write(be[:])
		u := mac.Sum(nil)
		t := append([]byte(nil), u...)
		for i := 1; i < iter; i++ {
			mac = hmac.New(h, password)
			mac.Write(u)
			u = mac.Sum(nil)
			for j := range t {
				t[j] ^= u[j]
			}
		}
		out = append(out, t...)
	}
	return out[:keyLen]
}

func TestPBKDF2MatchesIndependentImplementation(t *testing.T) {
	for _, c := range []struct {
		hash string
		h    func() hash.Hash
	}{{"sha256", sha256.New}, {"sha512", sha512.New}} {
		for _, iter := range []int{1, 2, 1000} {
			for _, keyLen := range []int{16, 32, 33, 64, 100} {
				p := Params{Algorithm: PBKDF2, Salt: bytes.Repeat([]byte{0x5a}, 32), Iterations: iter, Hash: c.hash}
				got, err := p.Derive([]byte("correct horse"), keyLen)
				if err != nil {
					t.Fatal(err)
				}
				want := refPBKDF2(c.h, []byte("correct horse"), p.Salt, iter, keyLen)
				if !bytes.Equal(got, want) {
					t.Fatalf("%s iter=%d len=%d: got %x want %x", c.hash, iter, keyLen, got, want)
				}
			}
		}
	}
}

func TestDefault(t *testing.T) {
	a, err := Default(Argon2id)
	if err != nil {
		t.Fatal(err)
	}
	if a.Time != 3 || a.MemoryKiB != 64*1024 || a.Threads != 4 {
		t.Errorf("argon2id defaults: %+v", a)
	}
	s, err := Default(Scrypt)
	if err != nil {
		t.Fatal(err)
	}
	if s.LogN != 17 || s.R != 8 || s.P != 1 {
		t.Errorf("scrypt defaults: %+v", s)
	}
	p, err := Default(PBKDF2)
	if err != nil {
		t.Fatal(err)
	}
	if p.Iterations != 600000 || p.Hash != "sha256" {
		t.Errorf("pbkdf2 defaults: %+v", p)
	}
	for _, d := range []Params{a, s, p} {
		if len(d.Salt) != 32 {
			t.Errorf("%s: salt is %d bytes", d.Algorithm, len(d.Salt))
		}
		if err := d.Validate(); err != nil {
			t.Errorf("%s: default does not validate: %v", d.Algorithm, err)
		}
	}
	a2, _ := Default(Argon2id)
	if bytes.Equal(a.Salt, a2.Salt) {
		t.Error("two defaults share a salt")
	}
	if _, err := Default("bcrypt"); !errors.Is(err, ErrParams) {
		t.Errorf("Default(bcrypt) = %v, want ErrParams", err)
	}
}

// TestDefaultsRoundTripJSON checks that the omitempty tags keep the other
// algorithms' fields out of the file and that decoding gives back the same
// parameters.
func TestDefaultsRoundTripJSON(t *testing.T) {
	for _, alg := range []string{Argon2id, Scrypt, PBKDF2} {
		p, _ := Default(alg)
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		var q Params
		if err := json.Unmarshal(b, &q); err != nil {
			t.Fatal(err)
		}
		if q.Validate() != nil || !bytes.Equal(q.Salt, p.Salt) || q.Time != p.Time || q.LogN != p.LogN || q.Iterations != p.Iterations {
			t.Errorf("%s: %s does not round-trip", alg, b)
		}
	}
}

func salt() []byte { return bytes.Repeat([]byte{1}, 32) }

func TestValidateRejects(t *testing.T) {
	argon := func(mod func(*Params)) Params {
		p := Params{Algorithm: Argon2id, Salt: salt(), Time: 1, MemoryKiB: 64, Threads: 1}
		mod(&p)
		return p
	}
	scr := func(mod func(*Params)) Params {
		p := Params{Algorithm: Scrypt, Salt: salt(), LogN: 4, R: 8, P: 1}
		mod(&p)
		return p
	}
	pb := func(mod func(*Params)) Params {
		p := Params{Algorithm: PBKDF2, Salt: salt(), Iterations: 1000, Hash: "sha256"}
		mod(&p)
		return p
	}
	cases := []struct {
		name  string
		p     Params
		field string
	}{
		{"empty", Params{}, "salt"},
		{"unknown algorithm", Params{Algorithm: "bcrypt", Salt: salt()}, "algorithm"},
		{"algorithm case", argon(func(p *Params) { p.Algorithm = "Argon2id" }), "algorithm"},
		{"short salt", argon(func(p *Params) { p.Salt = p.Salt[:15] }), "salt"},
		{"nil salt", argon(func(p *Params) { p.Salt = nil }), "salt"},
		{"huge salt", argon(func(p *Params) { p.Salt = make([]byte, MaxSaltSize+1) }), "salt"},

		{"argon2 time 0", argon(func(p *Params) { p.Time = 0 }), "time"},
		{"argon2 time 101", argon(func(p *Params) { p.Time = 101 }), "time"},
		{"argon2 time max", argon(func(p *Params) { p.Time = ^uint32(0) }), "time"},
		{"argon2 threads 0", argon(func(p *Params) { p.Threads = 0 }), "threads"},
		{"argon2 memory 0", argon(func(p *Params) { p.MemoryKiB = 0 }), "memory_kib"},
		{"argon2 memory < 8/thread", argon(func(p *Params) { p.Threads = 4; p.MemoryKiB = 31 }), "memory_kib"},
		{"argon2 memory 4GiB+1KiB", argon(func(p *Params) { p.MemoryKiB = 4*1024*1024 + 1 }), "memory_kib"},
		{"argon2 memory max", argon(func(p *Params) { p.MemoryKiB = ^uint32(0) }), "memory_kib"},
		{"argon2 with scrypt field", argon(func(p *Params) { p.LogN = 10 }), "algorithm"},
		{"argon2 with pbkdf2 field", argon(func(p *Params) { p.Iterations = 10 }), "algorithm"},

		{"scrypt logN 0", scr(func(p *Params) { p.LogN = 0 }), "log_n"},
		{"scrypt logN negative", scr(func(p *Params) { p.LogN = -3 }), "log_n"},
		{"scrypt logN 25", scr(func(p *Params) { p.LogN = 25 }), "log_n"},
		{"scrypt logN 64", scr(func(p *Params) { p.LogN = 64 }), "log_n"},
		{"scrypt r 0", scr(func(p *Params) { p.R = 0 }), "r"},
		{"scrypt p 0", scr(func(p *Params) { p.P = 0 }), "p"},
		{"scrypt r negative", scr(func(p *Params) { p.R = -1 }), "r"},
		{"scrypt r*p 2^30", scr(func(p *Params) { p.R = 1 << 15; p.P = 1 << 15 }), "r"},
		{"scrypt r*p overflow", scr(func(p *Params) { p.R = 1 << 40; p.P = 1 << 40 }), "r"},
		{"scrypt memory > 4GiB", scr(func(p *Params) { p.LogN = 23; p.R = 5 }), "r"},
		{"scrypt memory 2^24*r large", scr(func(p *Params) { p.LogN = 24; p.R = 1 << 20 }), "r"},
		{"scrypt r*p at RFC limit but endless", scr(func(p *Params) { p.LogN = 1; p.R = 1; p.P = 1<<30 - 1 }), "p"},
		{"scrypt endless p", scr(func(p *Params) { p.LogN = 20; p.R = 8; p.P = 1 << 20 }), "p"},
		{"scrypt with argon field", scr(func(p *Params) { p.Threads = 1 }), "algorithm"},

		{"pbkdf2 unknown hash", pb(func(p *Params) { p.Hash = "sha1" }), "hash"},
		{"pbkdf2 empty hash", pb(func(p *Params) { p.Hash = "" }), "hash"},
		{"pbkdf2 iterations 0", pb(func(p *Params) { p.Iterations = 0 }), "iterations"},
		{"pbkdf2 iterations negative", pb(func(p *Params) { p.Iterations = -1 }), "iterations"},
		{"pbkdf2 iterations 1e8+1", pb(func(p *Params) { p.Iterations = 1e8 + 1 }), "iterations"},
		{"pbkdf2 with scrypt field", pb(func(p *Params) { p.R = 8 }), "algorithm"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.p.Validate()
			if !errors.Is(err, ErrParams) {
				t.Fatalf("Validate = %v, want ErrParams", err)
			}
			if !strings.Contains(err.Error(), c.field) {
				t.Errorf("error %q does not name field %q", err, c.field)
			}
			// Derive must refuse before doing any work: these
			// parameters would otherwise allocate gigabytes or run
			// for hours, so returning at all proves it.
			if _, err := c.p.Derive([]byte("pw"), 32); !errors.Is(err, ErrParams) {
				t.Errorf("Derive = %v, want ErrParams", err)
			}
		})
	}
}

func TestValidateAcceptsLimits(t *testing.T) {
	for _, p := range []Params{
		{Algorithm: Argon2id, Salt: make([]byte, MinSaltSize), Time: MaxArgon2Time, MemoryKiB: MaxArgon2MemoryKiB, Threads: 255},
		{Algorithm: Argon2id, Salt: make([]byte, MaxSaltSize), Time: 1, MemoryKiB: 8, Threads: 1},
		{Algorithm: Scrypt, Salt: salt(), LogN: 22, R: 8, P: 1},            // exactly 4 GiB
		{Algorithm: Scrypt, Salt: salt(), LogN: 24, R: 2, P: 16},           // 4 GiB, 64 GiB of work
		{Algorithm: PBKDF2, Salt: salt(), Iterations: 1e8, Hash: "sha512"}, // exactly the limit
		{Algorithm: PBKDF2, Salt: salt(), Iterations: 1, Hash: "sha256"},
	} {
		if err := p.Validate(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
}

func TestDeriveKeyLen(t *testing.T) {
	p := Params{Algorithm: PBKDF2, Salt: salt(), Iterations: 1, Hash: "sha256"}
	for _, n := range []int{-1, 0, MinKeyLen - 1, MaxKeyLen + 1, 1 << 40} {
		if _, err := p.Derive([]byte("pw"), n); err == nil {
			t.Errorf("keyLen %d accepted", n)
		}
	}
	for _, n := range []int{MinKeyLen, 32, 64, MaxKeyLen} {
		k, err := p.Derive([]byte("pw"), n)
		if err != nil || len(k) != n {
			t.Errorf("keyLen %d: %d bytes, %v", n, len(k), err)
		}
	}
}

// TestDeriveSeparates checks, for every algorithm at a cheap setting, that
// the output is deterministic and depends on passphrase, salt and cost.
func TestDeriveSeparates(t *testing.T) {
	for _, p := range []Params{
		{Algorithm: Argon2id, Salt: salt(), Time: 1, MemoryKiB: 64, Threads: 1},
		{Algorithm: Scrypt, Salt: salt(), LogN: 4, R: 1, P: 1},
		{Algorithm: PBKDF2, Salt: salt(), Iterations: 2, Hash: "sha512"},
	} {
		k1, err := p.Derive([]byte("pass"), 32)
		if err != nil {
			t.Fatal(err)
		}
		k2, _ := p.Derive([]byte("pass"), 32)
		if !bytes.Equal(k1, k2) {
			t.Errorf("%s: not deterministic", p.Algorithm)
		}
		if k3, _ := p.Derive([]byte("pasS"), 32); bytes.Equal(k1, k3) {
			t.Errorf("%s: passphrase ignored", p.Algorithm)
		}
		q := p
		q.Salt = bytes.Repeat([]byte{2}, 32)
		if k4, _ := q.Derive([]byte("pass"), 32); bytes.Equal(k1, k4) {
			t.Errorf("%s: salt ignored", p.Algorithm)
		}
		q = p
		switch p.Algorithm {
		case Argon2id:
			q.Time = 2
		case Scrypt:
			q.LogN = 5
		case PBKDF2:
			q.Iterations = 3
		}
		if k5, _ := q.Derive([]byte("pass"), 32); bytes.Equal(k1, k5) {
			t.Errorf("%s: cost ignored", p.Algorithm)
		}
	}
}

// TestCheckMinimum: the defaults and OWASP's rows pass; one step below each
// row, the attack's PBKDF2 x 1 and argon2id 8 KiB x 1, and the example
// volumes' 1 MiB x 1 are refused with ErrWeak (and so ErrParams).
func TestCheckMinimum(t *testing.T) {
	for _, alg := range []string{Argon2id, Scrypt, PBKDF2} {
		p, _ := Default(alg)
		if err := p.CheckMinimum(); err != nil {
			t.Errorf("default %s: %v", alg, err)
		}
	}
	argon := func(m, t uint32) Params {
		return Params{Algorithm: Argon2id, Salt: salt(), Time: t, MemoryKiB: m, Threads: 1}
	}
	scrypt := func(logN, r, p int) Params { return Params{Algorithm: Scrypt, Salt: salt(), LogN: logN, R: r, P: p} }
	pbkdf2 := func(n int, h string) Params { return Params{Algorithm: PBKDF2, Salt: salt(), Iterations: n, Hash: h} }
	ok := []Params{
		argon(47104, 1), argon(19456, 2), argon(12288, 3), argon(9216, 4), argon(7168, 5), argon(7168, 50),
		scrypt(17, 8, 1), scrypt(16, 8, 2), scrypt(15, 8, 3), scrypt(14, 8, 5), scrypt(13, 8, 10),
		pbkdf2(600000, "sha256"), pbkdf2(210000, "sha512"),
	}
	weak := []Params{
		argon(47103, 1), argon(19455, 2), argon(12287, 3), argon(9215, 4), argon(7167, 5), argon(7167, 100),
		argon(8, 1), argon(1024, 1), argon(8192, 1),
		scrypt(12, 8, 20), scrypt(14, 8, 4), scrypt(10, 8, 1),
		pbkdf2(1, "sha256"), pbkdf2(599999, "sha256"), pbkdf2(209999, "sha512"),
	}
	for _, p := range ok {
		if err := p.CheckMinimum(); err != nil {
			t.Errorf("%+v: %v", p, err)
		}
	}
	for _, p := range weak {
		err := p.CheckMinimum()
		if !errors.Is(err, ErrWeak) || !errors.Is(err, ErrParams) || !strings.Contains(err.Error(), "minimums:") {
			t.Errorf("%+v: %v, want ErrWeak naming the minimums", p, err)
		}
	}
	// Invalid parameters are invalid first, not weak.
	if err := argon(4, 1).CheckMinimum(); err == nil || errors.Is(err, ErrWeak) {
		t.Errorf("argon2id 4 KiB: %v, want a Validate error", err)
	}
}
