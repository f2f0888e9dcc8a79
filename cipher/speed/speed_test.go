package speed

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Tiny budgets: these tests check structure and sanity, never speed (the
// machines are noisy; no timing assertions).
const (
	tinyCipher = 2 * time.Millisecond
	tinyPBKDF2 = 5 * time.Millisecond
	tinyArgon2 = 20 * time.Millisecond
	tinyBuffer = 64 << 10
)

func TestRowsAreCryptsetupsTable(t *testing.T) {
	want := []string{
		"aes-cbc 128", "serpent-cbc 128", "twofish-cbc 128",
		"aes-cbc 256", "serpent-cbc 256", "twofish-cbc 256",
		"aes-xts 256", "serpent-xts 256", "twofish-xts 256",
		"aes-xts 512", "serpent-xts 512", "twofish-xts 512",
	}
	rows := Rows()
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, r := range rows {
		if got := r.Algorithm() + " " + itoa(r.KeyBits); got != want[i] {
			t.Errorf("row %d = %q, want %q", i, got, want[i])
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func available(r Row) bool { return r.Cipher != "serpent" }

func checkCipherResult(t *testing.T, r CipherResult, row Row, workers int) {
	t.Helper()
	name := r.Algorithm + " " + itoa(r.KeyBits)
	if r.Algorithm != row.Algorithm() || r.KeyBits != row.KeyBits || r.Workers != workers {
		t.Errorf("%s: result for %s/%d workers=%d, want %s/%d workers=%d", name, r.Algorithm, r.KeyBits, r.Workers,
			row.Algorithm(), row.KeyBits, workers)
	}
	if !available(row) {
		if r.Available || r.Encryption != nil || r.Decryption != nil {
			t.Errorf("%s: serpent measured: %+v", name, r)
		}
		if r.Reason != SerpentUnavailable {
			t.Errorf("%s: reason %q, want %q", name, r.Reason, SerpentUnavailable)
		}
		return
	}
	if !r.Available || r.Encryption == nil || r.Decryption == nil {
		t.Fatalf("%s: not measured: %+v", name, r)
	}
	for dir, tp := range map[string]*Throughput{"encryption": r.Encryption, "decryption": r.Decryption} {
		if tp.MiBPerSec <= 0 || tp.Bytes <= 0 || tp.Seconds <= 0 {
			t.Errorf("%s %s: %+v, want positive figures", name, dir, *tp)
		}
		if tp.Bytes%int64(r.BufferSize) != 0 || tp.Bytes < int64(workers*r.BufferSize) {
			t.Errorf("%s %s: %d bytes, want whole buffers, at least one per worker", name, dir, tp.Bytes)
		}
		if runtime.GOOS == "linux" && (tp.CPUSeconds <= 0 || tp.CPUMiBPerSec <= 0) {
			t.Errorf("%s %s: no CPU time recorded", name, dir)
		}
	}
	if r.Implementation == "" {
		t.Errorf("%s: no implementation named", name)
	}
}

func TestMeasureCipherEveryRow(t *testing.T) {
	for _, workers := range []int{1, 2} {
		for _, row := range Rows() {
			r, err := MeasureCipher(context.Background(), row, CipherOptions{
				Time: tinyCipher, BufferSize: tinyBuffer, SectorSize: 4096, Workers: workers,
			})
			if err != nil {
				t.Fatalf("%v workers=%d: %v", row, workers, err)
			}
			checkCipherResult(t, r, row, workers)
		}
	}
}

func TestMeasureCipherSectorSizes(t *testing.T) {
	for _, ss := range []int{512, 4096} {
		r, err := MeasureCipher(context.Background(), Row{"twofish", "xts", 256}, CipherOptions{
			Time: tinyCipher, BufferSize: 8192, SectorSize: ss,
		})
		if err != nil {
			t.Fatal(err)
		}
		if r.SectorSize != ss || !r.Available {
			t.Errorf("sector size %d: %+v", ss, r)
		}
	}
}

func TestMeasureCipherBadOptions(t *testing.T) {
	for _, o := range []CipherOptions{
		{SectorSize: 100},
		{SectorSize: 4096, BufferSize: 6000},
		{SectorSize: 4096, BufferSize: 2048},
	} {
		if _, err := MeasureCipher(context.Background(), Rows()[0], o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
}

func TestMeasureCipherCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := MeasureCipher(ctx, Rows()[0], CipherOptions{Time: time.Hour, BufferSize: tinyBuffer})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
}

func TestMeasurePBKDF2(t *testing.T) {
	for _, h := range PBKDF2Hashes {
		r, err := MeasurePBKDF2(context.Background(), h, tinyPBKDF2)
		if err != nil {
			t.Fatal(err)
		}
		if r.Hash != h || r.KeyBits != 256 || r.IterationsPerSecond == 0 || r.Iterations < 1000 {
			t.Errorf("%s: %+v", h, r)
		}
		if r.Clock != "thread-cpu" && r.Clock != "wall" {
			t.Errorf("%s: clock %q", h, r.Clock)
		}
	}
	if _, err := MeasurePBKDF2(context.Background(), "md5", tinyPBKDF2); err == nil {
		t.Error("md5 accepted")
	}
}

func TestMeasureArgon2(t *testing.T) {
	for _, v := range Argon2Variants {
		r, err := MeasureArgon2(context.Background(), v, Argon2Options{Target: tinyArgon2})
		if err != nil {
			t.Fatal(err)
		}
		if r.Variant != v || r.KeyBits != 256 || r.Iterations < 4 || r.MemoryKiB < 32 ||
			r.MemoryKiB > r.MemoryCapKiB || r.Threads != DefaultArgon2Threads() ||
			r.RequestedMS != tinyArgon2.Milliseconds() || r.MeasuredMS <= 0 || r.Derivations < 2 {
			t.Errorf("%s: %+v", v, r)
		}
		if r.MemoryCapKiB == 0 || r.MemoryCapKiB > 1<<20 || r.MemoryCapSource == "" {
			t.Errorf("%s: memory cap %d (%q)", v, r.MemoryCapKiB, r.MemoryCapSource)
		}
	}
	if _, err := MeasureArgon2(context.Background(), "argon2d", Argon2Options{Target: tinyArgon2}); err == nil {
		t.Error("argon2d accepted")
	}
}

// TestMeasureArgon2MemoryCap: with the memory cap far below what the target
// needs, the search keeps memory at the cap and raises the iterations,
// as cryptsetup does.
func TestMeasureArgon2MemoryCap(t *testing.T) {
	r, err := MeasureArgon2(context.Background(), "argon2id", Argon2Options{
		Target: 30 * time.Millisecond, MaxMemoryKiB: 64, Threads: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.MemoryKiB != 64 || r.Iterations <= 4 || r.Threads != 1 || r.MemoryCapSource != "--argon2-memory" {
		t.Errorf("%+v: want memory at the 64 KiB cap and more than 4 iterations", r)
	}
}

func TestNextArgon2(t *testing.T) {
	const minT, minM, maxM = 4, 32, 1 << 20
	ms := time.Millisecond
	tests := []struct {
		name         string
		t, m         uint32
		took, target time.Duration
		wantT, wantM uint32
	}{
		{"too fast: more memory", 4, 1000, 100 * ms, 2000 * ms, 4, 20000},
		{"too fast at the cap: more iterations", 4, maxM, 500 * ms, 2000 * ms, 16, maxM},
		{"too fast, memory would pass the cap", 4, 600000, 500 * ms, 2000 * ms, 9, maxM},
		{"too slow: fewer iterations", 16, maxM, 4000 * ms, 2000 * ms, 8, maxM},
		{"too slow at 4 iterations: less memory", 4, 100000, 4000 * ms, 2000 * ms, 4, 50000},
		{"never below the minimum memory", 4, 40, 4000 * ms, 1 * ms, 4, 32},
	}
	for _, tt := range tests {
		gotT, gotM := nextArgon2(tt.t, tt.m, minT, minM, maxM, tt.took, tt.target)
		if gotT != tt.wantT || gotM != tt.wantM {
			t.Errorf("%s: nextArgon2(%d, %d, took %v, target %v) = (%d, %d), want (%d, %d)",
				tt.name, tt.t, tt.m, tt.took, tt.target, gotT, gotM, tt.wantT, tt.wantM)
		}
	}
}

// TestRun runs everything with tiny budgets and checks that every line of
// cryptsetup's table is present, in order, and that the callbacks saw what
// the report holds.
func TestRun(t *testing.T) {
	var seenP, seenA, seenC int
	rep, err := Run(context.Background(), Options{
		CipherTime: tinyCipher, PBKDF2Time: tinyPBKDF2, Argon2Time: tinyArgon2,
		BufferSize: tinyBuffer, Workers: []int{1, 2},
		OnPBKDF2: func(PBKDF2Result) { seenP++ },
		OnArgon2: func(Argon2Result) { seenA++ },
		OnCipher: func(CipherResult) { seenC++ },
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.PBKDF2) != 3 || len(rep.Argon2) != 2 || len(rep.Ciphers) != 24 {
		t.Fatalf("%d PBKDF2, %d argon2, %d cipher results; want 3, 2, 24", len(rep.PBKDF2), len(rep.Argon2), len(rep.Ciphers))
	}
	if seenP != 3 || seenA != 2 || seenC != 24 {
		t.Errorf("callbacks: %d, %d, %d", seenP, seenA, seenC)
	}
	for i, h := range PBKDF2Hashes {
		if rep.PBKDF2[i].Hash != h || rep.PBKDF2[i].IterationsPerSecond == 0 {
			t.Errorf("PBKDF2 line %d: %+v", i, rep.PBKDF2[i])
		}
	}
	for i, v := range Argon2Variants {
		if rep.Argon2[i].Variant != v || rep.Argon2[i].Iterations == 0 {
			t.Errorf("argon2 line %d: %+v", i, rep.Argon2[i])
		}
	}
	rows := Rows()
	for i, c := range rep.Ciphers {
		checkCipherResult(t, c, rows[i%len(rows)], []int{1, 2}[i/len(rows)])
	}
	s := rep.System
	if s.GoVersion != runtime.Version() || s.GOMAXPROCS < 1 || s.NumCPU < 1 || s.CPUModel == "" {
		t.Errorf("system: %+v", s)
	}
	if rep.Settings.SectorSize != 4096 || rep.Settings.BufferSize != tinyBuffer || len(rep.Settings.Workers) != 2 {
		t.Errorf("settings: %+v", rep.Settings)
	}
}

func TestRunSkips(t *testing.T) {
	rep, err := Run(context.Background(), Options{SkipKDF: true, SkipCiphers: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.PBKDF2)+len(rep.Argon2)+len(rep.Ciphers) != 0 {
		t.Errorf("skipped everything but got %+v", rep)
	}
}

func TestReadSystem(t *testing.T) {
	s := ReadSystem()
	if runtime.GOARCH == "amd64" {
		names := map[string]bool{}
		for _, f := range s.Features {
			names[f.Name] = true
		}
		for _, n := range []string{"AES-NI", "VAES", "AVX2", "AVX512F"} {
			if !names[n] {
				t.Errorf("feature %s not reported: %+v", n, s.Features)
			}
		}
	}
	info := []byte("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Test CPU @ 2.00GHz\nflags\t\t: fpu aes avx2 vaes\n")
	if got := cpuModel(info); got != "Test CPU @ 2.00GHz" {
		t.Errorf("cpuModel = %q", got)
	}
	if f := cpuFlags(info); !f["vaes"] || !f["aes"] || f["avx512f"] {
		t.Errorf("cpuFlags = %v", f)
	}
	if kib, src := Argon2MemoryCap(); kib == 0 || kib > 1<<20 || src == "" {
		t.Errorf("Argon2MemoryCap = %d, %q", kib, src)
	}
}

func readFixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestParseCryptsetupSeed parses the German `cryptsetup benchmark` output of
// seed article 001 (decimal commas, blanks collapsed by the web page).
func TestParseCryptsetupSeed(t *testing.T) {
	pb, ar, cs := ParseCryptsetupBenchmark(readFixture(t, "cryptsetup-seed001-de.txt"))
	if len(pb) != 5 || len(ar) != 0 || len(cs) != 12 {
		t.Fatalf("%d PBKDF2, %d argon2, %d cipher lines; want 5, 0, 12", len(pb), len(ar), len(cs))
	}
	if pb[0].Hash != "sha1" || pb[0].IterationsPerSecond != 451972 || pb[0].KeyBits != 256 {
		t.Errorf("PBKDF2 line 1: %+v", pb[0])
	}
	rows := Rows()
	for i, c := range cs {
		if c.Algorithm != rows[i].Algorithm() || c.KeyBits != rows[i].KeyBits || !c.Available || c.Workers != 1 {
			t.Errorf("cipher line %d: %+v", i, c)
		}
	}
	if cs[0].Encryption.MiBPerSec != 89.1 || cs[0].Decryption.MiBPerSec != 101.4 {
		t.Errorf("aes-cbc 128b: %v / %v, want 89.1 / 101.4", cs[0].Encryption.MiBPerSec, cs[0].Decryption.MiBPerSec)
	}
	if c := cs[10]; c.Algorithm != "serpent-xts" || c.KeyBits != 512 || c.Encryption.MiBPerSec != 120.7 {
		t.Errorf("serpent-xts 512b: %+v", c)
	}
}

// TestParseCryptsetupNoAFALG parses cryptsetup 2.6.1 on a kernel without
// AF_ALG: the KDF lines, no cipher table.
func TestParseCryptsetupNoAFALG(t *testing.T) {
	pb, ar, cs := ParseCryptsetupBenchmark(readFixture(t, "cryptsetup-2.6.1-no-afalg.txt"))
	if len(pb) != 5 || len(ar) != 2 || len(cs) != 0 {
		t.Fatalf("%d PBKDF2, %d argon2, %d cipher lines; want 5, 2, 0", len(pb), len(ar), len(cs))
	}
	a := ar[1]
	if a.Variant != "argon2id" || a.Iterations != 4 || a.MemoryKiB != 214967 || a.Threads != 4 || a.RequestedMS != 500 || a.KeyBits != 256 {
		t.Errorf("argon2id: %+v", a)
	}
}

func TestParseCryptsetupNA(t *testing.T) {
	out := "#     Algorithm |       Key |      Encryption |      Decryption\n" +
		"        aes-cbc        128b      1180.3 MiB/s      3541.6 MiB/s\n" +
		"    serpent-cbc        128b               N/A               N/A\n" +
		"argon2i       4 iterations, 1048576 memory, 4 parallel threads (CPUs) for 256-bit key (requested 2000 ms time; took 1990 ms)\n"
	_, ar, cs := ParseCryptsetupBenchmark(out)
	if len(cs) != 2 || !cs[0].Available || cs[0].Encryption.MiBPerSec != 1180.3 || cs[1].Available || cs[1].Reason != "N/A" {
		t.Errorf("ciphers: %+v", cs)
	}
	if len(ar) != 1 || ar[0].MemoryKiB != 1048576 {
		t.Errorf("argon2: %+v", ar)
	}
}

func TestParseOpenSSLSpeed(t *testing.T) {
	v, err := ParseOpenSSLSpeed(readFixture(t, "openssl-3.0-mr.txt"))
	if err != nil || v != 5787758592 {
		t.Errorf("single: %v, %v", v, err)
	}
	v, err = ParseOpenSSLSpeed(readFixture(t, "openssl-3.0-mr-multi.txt"))
	if err != nil || v != 10838351872 {
		t.Errorf("multi: %v, %v (want the sum line, not a child's)", v, err)
	}
	if _, err := ParseOpenSSLSpeed("Error setting cipher foo\n"); err == nil {
		t.Error("no error for output without +F")
	}
}

// TestRunOpenSSL runs the real openssl where installed (about 8 s).
func TestRunOpenSSL(t *testing.T) {
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	if testing.Short() {
		t.Skip("-short")
	}
	e := RunOpenSSL(context.Background(), []int{1}, 1, 4096, true)
	if !e.Available || e.Version == "" || len(e.Ciphers) != 4 {
		t.Fatalf("%+v", e)
	}
	for _, c := range e.Ciphers {
		if !c.Available || c.Encryption.MiBPerSec <= 0 || c.Decryption.MiBPerSec <= 0 {
			t.Errorf("%+v", c)
		}
	}
	if _, ok := e.Cipher("aes-xts", 512, 1); !ok {
		t.Error("aes-xts 512b missing")
	}
}

// TestProbeAFALG only checks that the probe answers and that an error says
// what failed; whether AF_ALG exists depends on the kernel.
func TestProbeAFALG(t *testing.T) {
	err := ProbeAFALG()
	t.Logf("ProbeAFALG: %v", err)
	if err != nil && !strings.Contains(err.Error(), "AF_ALG") {
		t.Errorf("error does not name AF_ALG: %v", err)
	}
}
