package speed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// External is what another tool measured on this machine, in the same
// structs as Report, for a side-by-side comparison.
type External struct {
	Tool      string   `json:"tool"` // "cryptsetup" or "openssl"
	Version   string   `json:"version,omitempty"`
	Commands  []string `json:"commands,omitempty"`
	Available bool     `json:"available"`       // installed, and at least part of it ran
	Error     string   `json:"error,omitempty"` // why it did not run at all
	// CipherError says why the cipher part is missing while the rest ran
	// (cryptsetup without the kernel's AF_ALG interface).
	CipherError string         `json:"cipher_error,omitempty"`
	PBKDF2      []PBKDF2Result `json:"pbkdf2,omitempty"`
	Argon2      []Argon2Result `json:"argon2,omitempty"`
	Ciphers     []CipherResult `json:"ciphers,omitempty"`
}

// Cipher returns the result for algorithm/keyBits/workers, if measured.
func (e *External) Cipher(algorithm string, keyBits, workers int) (CipherResult, bool) {
	for _, c := range e.Ciphers {
		if c.Algorithm == algorithm && c.KeyBits == keyBits && c.Workers == workers {
			return c, true
		}
	}
	return CipherResult{}, false
}

// cEnv runs tools in the C locale, so that numbers have decimal points and
// messages are in English.
func cEnv() []string { return append(os.Environ(), "LC_ALL=C", "LANG=C") }

func runTool(ctx context.Context, name string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Env = cEnv()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// RunCryptsetup runs `cryptsetup benchmark --iter-time MS` (MS from
// argon2Target, so that its argon2 lines answer the same request) and
// parses what it prints. With kdf false it skips the KDFs and runs
// `cryptsetup benchmark --cipher ALG --key-size BITS` for each row of
// Rows() instead. cryptsetup computes PBKDF2 and argon2 in userspace, but
// takes its cipher figures from the kernel crypto API through AF_ALG
// sockets (no device-mapper needed); where the kernel lacks AF_ALG it prints
// only the KDF lines and exits 1, and CipherError says why.
func RunCryptsetup(ctx context.Context, argon2Target time.Duration, kdf bool) External {
	e := External{Tool: "cryptsetup"}
	if _, err := exec.LookPath("cryptsetup"); err != nil {
		e.Error = "not installed"
		return e
	}
	if out, _, err := runTool(ctx, "cryptsetup", "--version"); err == nil {
		f := strings.Fields(out)
		if len(f) >= 2 {
			e.Version = f[1]
		}
	}
	if !kdf {
		return runCryptsetupCiphers(ctx, e)
	}
	if argon2Target <= 0 {
		argon2Target = DefaultArgon2Time
	}
	args := []string{"benchmark", "--iter-time", strconv.FormatInt(argon2Target.Milliseconds(), 10)}
	e.Commands = []string{"cryptsetup " + strings.Join(args, " ")}
	out, stderr, err := runTool(ctx, "cryptsetup", args...)
	if ctx.Err() != nil {
		e.Error = ctx.Err().Error()
		return e
	}
	e.PBKDF2, e.Argon2, e.Ciphers = ParseCryptsetupBenchmark(out)
	if len(e.PBKDF2)+len(e.Argon2)+len(e.Ciphers) == 0 {
		e.Error = toolError(err, stderr, "printed nothing that could be parsed")
		return e
	}
	e.Available = true
	if measuredCiphers(e.Ciphers) == 0 {
		e.CipherError = noCiphersWhy(err, stderr)
	}
	return e
}

// runCryptsetupCiphers runs cryptsetup benchmark for one cipher row at a
// time, and stops at the first run that says the kernel interface is
// missing altogether.
func runCryptsetupCiphers(ctx context.Context, e External) External {
	for _, r := range Rows() {
		args := []string{"benchmark", "--cipher", r.Algorithm(), "--key-size", strconv.Itoa(r.KeyBits)}
		e.Commands = append(e.Commands, "cryptsetup "+strings.Join(args, " "))
		out, stderr, err := runTool(ctx, "cryptsetup", args...)
		if ctx.Err() != nil {
			e.Error = ctx.Err().Error()
			return e
		}
		_, _, cs := ParseCryptsetupBenchmark(out)
		if len(cs) == 1 && cs[0].Available {
			e.Ciphers = append(e.Ciphers, cs[0])
			continue
		}
		if strings.Contains(stderr, "kernel crypto interface not available") {
			e.CipherError = noCiphersWhy(err, stderr)
			break
		}
		e.Ciphers = append(e.Ciphers, CipherResult{Algorithm: r.Algorithm(), KeyBits: r.KeyBits, Workers: 1,
			Reason: toolError(err, stderr, "N/A")})
	}
	if measuredCiphers(e.Ciphers) == 0 && e.CipherError == "" {
		e.Error = "no cipher figures"
		return e
	}
	e.Available = true
	return e
}

// noCiphersWhy explains a cryptsetup run without cipher figures: its own
// message, and what the AF_ALG probe found.
func noCiphersWhy(err error, stderr string) string {
	why := toolError(err, stderr, "printed no cipher figures")
	if perr := ProbeAFALG(); perr != nil {
		why += "; " + perr.Error()
	}
	return why
}

func measuredCiphers(cs []CipherResult) int {
	n := 0
	for _, c := range cs {
		if c.Available {
			n++
		}
	}
	return n
}

// toolError folds an exit status and stderr into one line.
func toolError(err error, stderr, fallback string) string {
	msg := strings.Join(strings.Fields(stderr), " ")
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && msg != "":
		return fmt.Sprintf("exit status %d: %s", ee.ExitCode(), msg)
	case err != nil && msg != "":
		return err.Error() + ": " + msg
	case err != nil:
		return err.Error()
	case msg != "":
		return msg
	}
	return fallback
}

var (
	reCsPBKDF2 = regexp.MustCompile(`^PBKDF2-(\S+)\s+(\d+)\s+iterations per second for (\d+)-bit key`)
	reCsArgon2 = regexp.MustCompile(`^(argon2id?)\s+(\d+)\s+iterations,\s+(\d+)\s+memory,\s+(\d+)\s+parallel threads \(CPUs\) for (\d+)-bit key \(requested (\d+) ms time[^)]*\)`)
	reCsCipher = regexp.MustCompile(`^\s*([a-z0-9]+)-([a-z0-9]+)\s+(\d+)b\s+(?:([\d.,]+)\s*MiB/s|N/A)\s+(?:([\d.,]+)\s*MiB/s|N/A)\s*$`)
)

// ParseCryptsetupBenchmark parses the output of `cryptsetup benchmark`:
// PBKDF2 lines, argon2 lines and the cipher table (N/A rows come back with
// Available false). Decimal commas, as some locales print, are accepted.
// Cipher results have Workers 1: the kernel benchmark runs on one thread.
func ParseCryptsetupBenchmark(out string) ([]PBKDF2Result, []Argon2Result, []CipherResult) {
	var (
		pb []PBKDF2Result
		ar []Argon2Result
		cs []CipherResult
	)
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\r\n")
		if m := reCsPBKDF2.FindStringSubmatch(line); m != nil {
			ips, _ := strconv.ParseUint(m[2], 10, 64)
			kb, _ := strconv.Atoi(m[3])
			pb = append(pb, PBKDF2Result{Hash: m[1], KeyBits: kb, IterationsPerSecond: ips, Clock: "cryptsetup"})
			continue
		}
		if m := reCsArgon2.FindStringSubmatch(line); m != nil {
			t, _ := strconv.ParseUint(m[2], 10, 32)
			mem, _ := strconv.ParseUint(m[3], 10, 32)
			p, _ := strconv.Atoi(m[4])
			kb, _ := strconv.Atoi(m[5])
			req, _ := strconv.ParseInt(m[6], 10, 64)
			ar = append(ar, Argon2Result{Variant: m[1], KeyBits: kb, Iterations: uint32(t),
				MemoryKiB: uint32(mem), Threads: p, RequestedMS: req})
			continue
		}
		if m := reCsCipher.FindStringSubmatch(line); m != nil {
			kb, _ := strconv.Atoi(m[3])
			r := CipherResult{Algorithm: m[1] + "-" + m[2], KeyBits: kb, Workers: 1}
			enc, okE := parseDecimal(m[4])
			dec, okD := parseDecimal(m[5])
			if okE && okD {
				r.Available = true
				// cryptsetup prints one figure; it is kept under both clocks.
				r.Encryption = &Throughput{MiBPerSec: enc, CPUMiBPerSec: enc}
				r.Decryption = &Throughput{MiBPerSec: dec, CPUMiBPerSec: dec}
			} else {
				r.Reason = "N/A"
			}
			cs = append(cs, r)
		}
	}
	return pb, ar, cs
}

func parseDecimal(s string) (float64, bool) {
	if s == "" {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", "."), 64)
	return v, err == nil
}

// OpenSSLRows maps the aes rows of the cipher table to OpenSSL EVP names.
// OpenSSL 3 has no Serpent, and Twofish in none of its providers.
var OpenSSLRows = []struct {
	Row Row
	EVP string
}{
	{Row{"aes", "cbc", 128}, "aes-128-cbc"},
	{Row{"aes", "cbc", 256}, "aes-256-cbc"},
	{Row{"aes", "xts", 256}, "aes-128-xts"},
	{Row{"aes", "xts", 512}, "aes-256-xts"},
}

// RunOpenSSL runs `openssl speed [-elapsed] -mr -evp NAME [-decrypt]
// -seconds S -bytes SECTOR [-multi N]` for the aes rows, for each worker
// count (-multi forks that many processes; their rates are summed by
// openssl). With elapsed, openssl times by the wall clock, as
// Throughput.MiBPerSec; without, by user CPU time, like
// Throughput.CPUMiBPerSec. Each 4096-byte EVP update is one XTS data unit,
// like our sectors; for CBC, openssl keeps chaining across updates instead
// of starting a new IV per sector. The figures are stored in both MiBPerSec
// and CPUMiBPerSec.
func RunOpenSSL(ctx context.Context, workers []int, seconds, sectorSize int, elapsed bool) External {
	e := External{Tool: "openssl"}
	if _, err := exec.LookPath("openssl"); err != nil {
		e.Error = "not installed"
		return e
	}
	if out, _, err := runTool(ctx, "openssl", "version"); err == nil {
		f := strings.Fields(out)
		if len(f) >= 2 {
			e.Version = f[1]
		}
	}
	if seconds < 1 {
		seconds = 1
	}
	if sectorSize <= 0 {
		sectorSize = DefaultSectorSize
	}
	var firstErr string
	for _, w := range workers {
		for _, or := range OpenSSLRows {
			r := CipherResult{Algorithm: or.Row.Algorithm(), KeyBits: or.Row.KeyBits, Workers: w,
				SectorSize: sectorSize, Implementation: "openssl speed -evp " + or.EVP}
			var tp [2]*Throughput
			for i, decrypt := range []bool{false, true} {
				args := []string{"speed"}
				if elapsed {
					args = append(args, "-elapsed")
				}
				args = append(args, "-mr", "-seconds", strconv.Itoa(seconds), "-bytes", strconv.Itoa(sectorSize))
				if w > 1 {
					args = append(args, "-multi", strconv.Itoa(w))
				}
				args = append(args, "-evp", or.EVP)
				if decrypt {
					args = append(args, "-decrypt")
				}
				e.Commands = append(e.Commands, "openssl "+strings.Join(args, " "))
				out, stderr, err := runTool(ctx, "openssl", args...)
				if ctx.Err() != nil {
					e.Error = ctx.Err().Error()
					return e
				}
				bps, perr := ParseOpenSSLSpeed(out)
				if err != nil || perr != nil {
					msg := toolError(err, stderr, fmt.Sprint(perr))
					r.Reason = msg
					if firstErr == "" {
						firstErr = msg
					}
					break
				}
				v := bps / (1 << 20)
				tp[i] = &Throughput{MiBPerSec: v, CPUMiBPerSec: v, Seconds: float64(seconds)}
			}
			if tp[0] != nil && tp[1] != nil {
				r.Available = true
				r.Encryption, r.Decryption = tp[0], tp[1]
			}
			e.Ciphers = append(e.Ciphers, r)
		}
	}
	if measuredCiphers(e.Ciphers) == 0 {
		e.Error = firstErr
		return e
	}
	e.Available = true
	return e
}

// ParseOpenSSLSpeed returns the bytes per second of the one block size in
// `openssl speed -mr` output: the last "+F:" line that is not a child's
// report ("Got: +F:..." under -multi), "+F:idx:NAME:bytes_per_second".
func ParseOpenSSLSpeed(out string) (float64, error) {
	found, v := false, 0.0
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "+F:") {
			continue
		}
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		x, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			continue
		}
		found, v = true, x
	}
	if !found || v <= 0 {
		return 0, errors.New("no +F: line with a rate in openssl speed -mr output")
	}
	return v, nil
}
