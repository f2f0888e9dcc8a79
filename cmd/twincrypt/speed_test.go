package main

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/speed"
)

// Tiny budgets: the tests check the layout, never the speed.
var speedTiny = []string{"speed", "--time", "20ms", "--pbkdf2-time", "20ms", "--argon2-time", "50ms"}

var (
	reSpeedPBKDF2Line = regexp.MustCompile(`^PBKDF2-(sha1|sha256|sha512) +(\d+) iterations per second for 256-bit key$`)
	reSpeedArgon2Line = regexp.MustCompile(`^(argon2id?) +\d+ iterations, +\d+ memory, \d+ parallel threads \(CPUs\) for 256-bit key \(requested 50 ms time; took \d+ ms(, outside -5/\+10 %)?\)$`)
	reSpeedCipherLine = regexp.MustCompile(`^ +([a-z]+-[a-z]+) +(\d+)b +(?:\d+\.\d MiB/s +\d+\.\d MiB/s|N/A +N/A)$`)
)

func TestSpeedTable(t *testing.T) {
	r := twincrypt(t, "", speedTiny...)
	r.expectExit(t, 0, "speed")
	if r.stderr != "" {
		t.Errorf("stderr: %q", r.stderr)
	}
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	for _, want := range []string{"# CPU: ", "# Go go1", "GOMAXPROCS", "# Tests are approximate using memory only (no storage IO).",
		"# serpent-cbc: N/A: " + speed.SerpentUnavailable, "# serpent-xts: N/A: " + speed.SerpentUnavailable,
		"# aes-xts: twincrypt cipher/sector aes-xts-plain64"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(lines[1], "AES-NI") && runtime.GOARCH == "amd64" {
		t.Errorf("CPU line does not say whether AES-NI is there: %q", lines[1])
	}

	// KDF lines, in cryptsetup's order and columns.
	var hashes, variants []string
	for _, l := range lines {
		if m := reSpeedPBKDF2Line.FindStringSubmatch(l); m != nil {
			hashes = append(hashes, m[1])
			if len(m[2]) <= 7 && strings.Index(l, " iterations") != 24 {
				t.Errorf("PBKDF2 line not in cryptsetup's columns: %q", l)
			}
		}
		if m := reSpeedArgon2Line.FindStringSubmatch(l); m != nil {
			variants = append(variants, m[1])
		}
	}
	if strings.Join(hashes, ",") != "sha1,sha256,sha512" {
		t.Errorf("PBKDF2 lines for %v:\n%s", hashes, r.stdout)
	}
	if strings.Join(variants, ",") != "argon2i,argon2id" {
		t.Errorf("argon2 lines for %v:\n%s", variants, r.stdout)
	}

	// Cipher tables: one per worker count, each cryptsetup's 12 rows in order,
	// every row as wide as the header so the columns line up.
	tables := 0
	rows := speed.Rows()
	for i, l := range lines {
		if l != speedCipherHeader {
			continue
		}
		tables++
		if i+len(rows) >= len(lines) {
			t.Fatalf("table at line %d is cut short", i)
		}
		for j, row := range rows {
			got := lines[i+1+j]
			m := reSpeedCipherLine.FindStringSubmatch(got)
			if m == nil || m[1] != row.Algorithm() || m[2] != strconv.Itoa(row.KeyBits) {
				t.Errorf("table %d row %d = %q, want %s %db", tables, j, got, row.Algorithm(), row.KeyBits)
				continue
			}
			if len(got) != len(speedCipherHeader) {
				t.Errorf("row %q is %d wide, header %d", got, len(got), len(speedCipherHeader))
			}
			if na := strings.HasSuffix(got, "N/A"); na != (row.Cipher == "serpent") {
				t.Errorf("row %q: N/A = %v", got, na)
			}
		}
	}
	wantTables := 2
	if runtime.GOMAXPROCS(0) == 1 {
		wantTables = 1
	}
	if tables != wantTables {
		t.Errorf("%d cipher tables, want %d:\n%s", tables, wantTables, r.stdout)
	}

	// What cryptsetup users paste, our parser for their output reads in ours.
	pb, ar, cs := speed.ParseCryptsetupBenchmark(r.stdout)
	if len(pb) != 3 || len(ar) != 2 || len(cs) != 12*wantTables {
		t.Errorf("parsed %d PBKDF2, %d argon2, %d cipher lines from our own output", len(pb), len(ar), len(cs))
	}
}

func TestSpeedJSON(t *testing.T) {
	r := twincrypt(t, "", "speed", "--json", "--cores", "1", "--time", "5ms", "--pbkdf2-time", "5ms", "--argon2-time", "20ms")
	r.expectExit(t, 0, "speed --json")
	var rep struct {
		speed.Report
		Compare []speed.External `json:"compare"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, r.stdout)
	}
	if rep.System.GoVersion == "" || rep.System.CPUModel == "" || rep.System.GOMAXPROCS < 1 {
		t.Errorf("system: %+v", rep.System)
	}
	if len(rep.PBKDF2) != 3 || len(rep.Argon2) != 2 || len(rep.Ciphers) != 12 || len(rep.Compare) != 0 {
		t.Fatalf("%d PBKDF2, %d argon2, %d ciphers, %d compare", len(rep.PBKDF2), len(rep.Argon2), len(rep.Ciphers), len(rep.Compare))
	}
	for _, c := range rep.Ciphers {
		if c.Workers != 1 {
			t.Errorf("%s: %d workers with --cores 1", c.Algorithm, c.Workers)
		}
		if c.Available == strings.HasPrefix(c.Algorithm, "serpent") {
			t.Errorf("%s: available = %v", c.Algorithm, c.Available)
		}
		if c.Available && (c.Encryption.MiBPerSec <= 0 || c.Decryption.MiBPerSec <= 0 || c.Encryption.CPUMiBPerSec <= 0) {
			t.Errorf("%s %db: %+v %+v", c.Algorithm, c.KeyBits, *c.Encryption, *c.Decryption)
		}
	}
}

func TestSpeedOnlyCiphersAllCores(t *testing.T) {
	r := twincrypt(t, "", "speed", "--no-kdf", "--cores", "all", "--time", "5ms", "--sector-size", "512", "--clock", "cpu")
	r.expectExit(t, 0, "speed --no-kdf --cores all")
	if strings.Contains(r.stdout, "PBKDF2-") || strings.Contains(r.stdout, "argon2i ") {
		t.Errorf("KDF lines with --no-kdf:\n%s", r.stdout)
	}
	if n := strings.Count(r.stdout, speedCipherHeader); n != 1 {
		t.Errorf("%d tables with --cores all", n)
	}
	if !strings.Contains(r.stdout, "512-byte sectors") || !strings.Contains(r.stdout, "MiB/s by CPU time") {
		t.Errorf("sector size or clock not reported:\n%s", r.stdout)
	}
}

func TestSpeedUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"speed", "--cores", "3"},
		{"speed", "--sector-size", "100"},
		{"speed", "--time", "0s"},
		{"speed", "--no-kdf", "--no-ciphers"},
		{"speed", "--argon2-threads", "300"},
		{"speed", "--clock", "tsc"},
		{"speed", "extra-arg"},
	} {
		r := twincrypt(t, "", args...)
		r.expectExit(t, exitUsage, strings.Join(args, " "))
	}
}

// TestSpeedCompare runs the real cryptsetup and openssl where installed
// (about 10 s: --no-kdf, so cryptsetup only runs its cipher benchmark) and
// checks that the comparison says what ran and what did not.
func TestSpeedCompare(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed")
	}
	r := twincrypt(t, "", "speed", "--compare", "--no-kdf", "--cores", "1", "--time", "10ms")
	r.expectExit(t, 0, "speed --compare")
	out := r.stdout
	for _, want := range []string{"# Comparison: ratio = twincrypt / other", "# twincrypt vs openssl, one core, MiB/s"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	reRow := regexp.MustCompile(`(?m)^ +aes-(cbc|xts) +\d+b +\d+\.\d +\d+\.\d +\d+\.\d\d +\d+\.\d +\d+\.\d +\d+\.\d\d$`)
	if n := len(reRow.FindAllString(out, -1)); n != 4 {
		t.Errorf("%d aes comparison rows with openssl, want 4:\n%s", n, out)
	}
	if _, err := exec.LookPath("cryptsetup"); err == nil {
		if !strings.Contains(out, "# cryptsetup ") {
			t.Errorf("no cryptsetup section:\n%s", out)
		}
		// Either cryptsetup measured the ciphers, or the output says why not.
		if !strings.Contains(out, "# twincrypt vs cryptsetup, one core") && !strings.Contains(out, "cipher figures not available: ") {
			t.Errorf("cryptsetup cipher figures neither shown nor explained:\n%s", out)
		}
	}
}

// TestSpeedComparisonLayout prints a comparison from made-up figures, so
// the KDF and cipher comparison tables are checked without the tools.
func TestSpeedComparisonLayout(t *testing.T) {
	tp := func(v float64) *speed.Throughput { return &speed.Throughput{MiBPerSec: v} }
	rep := &speed.Report{
		PBKDF2: []speed.PBKDF2Result{{Hash: "sha256", KeyBits: 256, IterationsPerSecond: 2000000}},
		Argon2: []speed.Argon2Result{{Variant: "argon2id", Iterations: 4, MemoryKiB: 1048576, Threads: 2, RequestedMS: 2000}},
		Ciphers: []speed.CipherResult{
			{Algorithm: "aes-xts", KeyBits: 256, Workers: 1, Available: true, Encryption: tp(1500), Decryption: tp(1400)},
			{Algorithm: "serpent-xts", KeyBits: 256, Workers: 1, Reason: speed.SerpentUnavailable},
		},
	}
	ext := []speed.External{
		{Tool: "cryptsetup", Version: "2.7.0", Available: true, Commands: []string{"cryptsetup benchmark --iter-time 2000"},
			PBKDF2: []speed.PBKDF2Result{{Hash: "sha256", KeyBits: 256, IterationsPerSecond: 1000000}},
			Argon2: []speed.Argon2Result{{Variant: "argon2id", Iterations: 4, MemoryKiB: 524288, Threads: 4, RequestedMS: 2000}},
			Ciphers: []speed.CipherResult{
				{Algorithm: "aes-xts", KeyBits: 256, Workers: 1, Available: true, Encryption: tp(3000), Decryption: tp(2800)},
				{Algorithm: "serpent-xts", KeyBits: 256, Workers: 1, Available: true, Encryption: tp(500), Decryption: tp(490)},
			}},
		{Tool: "openssl", Error: "not installed"},
	}
	var b strings.Builder
	printSpeedComparison(&b, rep, ext, []int{1}, speedFlags{})
	out := b.String()
	for _, want := range []string{
		"# cryptsetup 2.7.0: cryptsetup benchmark --iter-time 2000\n",
		"  PBKDF2-sha256 |           2000000 iter/s |           1000000 iter/s |   2.00\n",
		"       argon2id |     t=4 m=1048576KiB p=2 |      t=4 m=524288KiB p=4 |   2.00\n",
		"# Comparison: ratio = twincrypt / other",
		"#           KDF |                twincrypt |               cryptsetup |  ratio\n",
		"# twincrypt vs cryptsetup, one core, MiB/s\n",
		"#     Algorithm         Key  enc twincrypt    cryptsetup    ratio  dec twincrypt    cryptsetup    ratio\n",
		"        aes-xts        256b         1500.0        3000.0     0.50         1400.0        2800.0     0.50\n",
		"    serpent-xts        256b            N/A         500.0        -            N/A         490.0        -\n",
		"# openssl: not run: not installed\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("comparison lacks %q:\n%s", want, out)
		}
	}
}
