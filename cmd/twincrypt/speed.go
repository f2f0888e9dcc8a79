package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/cipher/speed"
)

type speedFlags struct {
	cipherTime     time.Duration
	pbkdf2Time     time.Duration
	argon2Time     time.Duration
	argon2Memory   uint32
	argon2Threads  int
	cores          string
	sectorSize     int
	noKDF          bool
	noCiphers      bool
	json           bool
	compare        bool
	compareSeconds int
	clock          string
}

func newSpeedCmd() *cobra.Command {
	var f speedFlags
	cmd := &cobra.Command{
		Use:   "speed [flags]",
		Short: "cryptsetup benchmark, from userspace: KDFs and sector ciphers in memory",
		Long: `Print the table that 'cryptsetup benchmark' prints, measured in userspace
with the Go code twincrypt uses, laid out so the two can be put side by side:

  PBKDF2-sha1/sha256/sha512  iterations per second for a 256-bit key, one core
  argon2i, argon2id          iterations and memory (KiB) that take --argon2-time,
                             memory up to 1 GiB or half the available RAM,
                             min(4, CPUs) threads
  ciphers                    aes, serpent, twofish in cbc (128/256-bit keys) and
                             xts (256/512-bit keys), encryption and decryption
                             MiB/s, on one core and on all cores

The ciphers run as dm-crypt runs them: every 4096-byte sector is its own
unit with its own IV or tweak (plain64; cryptsetup benchmark uses no ESSIV
either), over a 1 MiB buffer per goroutine. aes is twincrypt's own cipher/sector
code; twofish is golang.org/x/crypto/twofish in CBC and in
golang.org/x/crypto/xts; serpent has no maintained Go implementation and shows
N/A. Nothing touches storage; the numbers are as noisy as the machine.

--compare also runs 'cryptsetup benchmark' and 'openssl speed -evp' where
they are installed, and prints their figures next to ours with ratios
(twincrypt / other; above 1 means twincrypt is faster). cryptsetup takes its
cipher figures from the kernel through AF_ALG sockets and prints only the
KDF lines where the kernel lacks them; the comparison says so. With
--no-kdf, cryptsetup runs one cipher at a time and skips its KDFs too.
openssl speed runs with -elapsed (wall clock, as ours; under --clock cpu
without it, timing user CPU) and -multi N for the all-cores table; it has
no serpent or twofish.

Rates are by the wall clock. On a busy machine the footnotes say how much
CPU the workers really got; --clock cpu then divides by the CPU time of the
worker threads instead, which discounts the time they waited.

A full run takes about half a minute on an idle machine (plus about 30 s
with --compare).`,
		Example: `  twincrypt speed
  twincrypt speed --cores 1 --time 1s
  twincrypt speed --no-kdf --compare
  twincrypt speed --json --time 100ms --argon2-time 500ms`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			workers, err := speedWorkers(f.cores)
			if err != nil {
				return err
			}
			if err := f.validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runSpeed(ctx, cmd.OutOrStdout(), f, workers)
		},
	}
	fl := cmd.Flags()
	fl.DurationVar(&f.cipherTime, "time", speed.DefaultCipherTime, "measure each cipher row and direction for `DURATION`")
	fl.DurationVar(&f.pbkdf2Time, "pbkdf2-time", speed.DefaultPBKDF2Time, "grow each PBKDF2 run until it takes `DURATION` of CPU time")
	fl.DurationVar(&f.argon2Time, "argon2-time", speed.DefaultArgon2Time, "find argon2 parameters that take `DURATION` (cryptsetup: 2s)")
	fl.Uint32Var(&f.argon2Memory, "argon2-memory", 0, "most argon2 memory in `KiB` (default 1 GiB, at most half the available memory)")
	fl.IntVar(&f.argon2Threads, "argon2-threads", 0, "argon2 parallel threads (default min(4, CPUs); cryptsetup benchmark prints 4)")
	fl.StringVar(&f.cores, "cores", "both", "cipher tables for `CORES`: 1, all, or both (one core and all cores)")
	fl.IntVar(&f.sectorSize, "sector-size", speed.DefaultSectorSize, "sector (data unit) size in bytes: 512, 1024, 2048 or 4096")
	fl.BoolVar(&f.noKDF, "no-kdf", false, "skip PBKDF2 and argon2")
	fl.BoolVar(&f.noCiphers, "no-ciphers", false, "skip the cipher tables")
	fl.BoolVar(&f.json, "json", false, "print one JSON object instead of the table")
	fl.BoolVar(&f.compare, "compare", false, "also run cryptsetup benchmark and openssl speed, and print ratios")
	fl.IntVar(&f.compareSeconds, "compare-seconds", 1, "openssl speed -seconds for --compare")
	fl.StringVar(&f.clock, "clock", "wall", "cipher rates by `CLOCK`: wall, or cpu (CPU time of the worker threads; steadier on a busy machine)")
	return cmd
}

func (f *speedFlags) validate() error {
	switch {
	case f.cipherTime <= 0:
		return usageErrorf("--time must be positive")
	case f.pbkdf2Time <= 0:
		return usageErrorf("--pbkdf2-time must be positive")
	case f.argon2Time < time.Millisecond:
		return usageErrorf("--argon2-time must be at least 1ms")
	case f.argon2Threads < 0 || f.argon2Threads > 255:
		return usageErrorf("--argon2-threads must be between 1 and 255")
	case f.argon2Memory != 0 && f.argon2Memory < 64:
		return usageErrorf("--argon2-memory must be at least 64 (KiB)")
	case f.compareSeconds < 1:
		return usageErrorf("--compare-seconds must be at least 1")
	case f.noKDF && f.noCiphers:
		return usageErrorf("--no-kdf and --no-ciphers leave nothing to measure")
	case f.clock != "wall" && f.clock != "cpu":
		return usageErrorf("--clock must be wall or cpu, got %q", f.clock)
	}
	switch f.sectorSize {
	case 512, 1024, 2048, 4096:
	default:
		return usageErrorf("--sector-size must be 512, 1024, 2048 or 4096, got %d", f.sectorSize)
	}
	return nil
}

// speedWorkers turns --cores into worker counts.
func speedWorkers(cores string) ([]int, error) {
	all := speed.AllCores()
	switch cores {
	case "both", "":
		return speed.DefaultWorkers(), nil
	case "1":
		return []int{1}, nil
	case "all":
		return []int{all}, nil
	}
	return nil, usageErrorf("--cores must be 1, all or both, got %q", cores)
}

// speedJSON is the --json output: the report, plus the other tools' figures.
type speedJSON struct {
	*speed.Report
	Compare []speed.External `json:"compare,omitempty"`
}

func runSpeed(ctx context.Context, w io.Writer, f speedFlags, workers []int) error {
	o := speed.Options{
		CipherTime:         f.cipherTime,
		PBKDF2Time:         f.pbkdf2Time,
		Argon2Time:         f.argon2Time,
		Argon2MaxMemoryKiB: f.argon2Memory,
		Argon2Threads:      f.argon2Threads,
		SectorSize:         f.sectorSize,
		Workers:            workers,
		SkipKDF:            f.noKDF,
		SkipCiphers:        f.noCiphers,
	}
	if o.Argon2Threads == 0 {
		o.Argon2Threads = speed.DefaultArgon2Threads()
	}
	if !f.json {
		printSpeedHeader(w, speed.ReadSystem(), f)
		lastWorkers := 0
		o.OnPBKDF2 = func(r speed.PBKDF2Result) { fmt.Fprintln(w, speedFormatPBKDF2(r)) }
		o.OnArgon2 = func(r speed.Argon2Result) { fmt.Fprintln(w, speedFormatArgon2(r)) }
		o.OnCipher = func(r speed.CipherResult) {
			if r.Workers != lastWorkers {
				lastWorkers = r.Workers
				fmt.Fprintln(w, speedCoresTitle(r.Workers))
				fmt.Fprintln(w, speedCipherHeader)
			}
			fmt.Fprintln(w, speedFormatCipher(r, f.clock))
		}
	}
	rep, err := speed.Run(ctx, o)
	if err != nil {
		return err
	}
	if !f.json {
		printSpeedNotes(w, rep, f)
	}
	var ext []speed.External
	if f.compare {
		if !f.json {
			fmt.Fprintln(w, "#")
			fmt.Fprintln(w, "# Running cryptsetup benchmark and openssl speed for --compare ...")
		}
		ext = append(ext, speed.RunCryptsetup(ctx, f.argon2Time, !f.noKDF))
		if !f.noCiphers {
			ext = append(ext, speed.RunOpenSSL(ctx, workers, f.compareSeconds, f.sectorSize, f.clock == "wall"))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !f.json {
			printSpeedComparison(w, rep, ext, workers, f)
		}
	}
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(speedJSON{Report: rep, Compare: ext})
	}
	return nil
}

func speedYesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printSpeedHeader(w io.Writer, s speed.System, f speedFlags) {
	feats := make([]string, 0, len(s.Features))
	for _, ft := range s.Features {
		feats = append(feats, ft.Name+" "+speedYesNo(ft.Present))
	}
	fmt.Fprintf(w, "# twincrypt speed: cryptsetup benchmark from userspace (Go)\n")
	fmt.Fprintf(w, "# CPU: %s, %d CPUs", s.CPUModel, s.NumCPU)
	if len(feats) > 0 {
		fmt.Fprintf(w, "; %s", strings.Join(feats, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "# Go %s %s/%s, GOMAXPROCS %d", s.GoVersion, s.GOOS, s.GOARCH, s.GOMAXPROCS)
	if s.Kernel != "" {
		fmt.Fprintf(w, ", kernel %s", s.Kernel)
	}
	fmt.Fprintln(w)
	if !f.noCiphers {
		clock := "wall clock"
		if f.clock == "cpu" {
			clock = "CPU time of the worker threads"
		}
		fmt.Fprintf(w, "# Ciphers: %d-byte sectors, each its own plain64 IV/tweak, 1 MiB buffer per goroutine, %v per row and direction, MiB/s by %s\n",
			f.sectorSize, f.cipherTime, clock)
	}
	fmt.Fprintln(w, "# Tests are approximate using memory only (no storage IO).")
}

// speedFormatPBKDF2 prints a PBKDF2 line as cryptsetup does.
func speedFormatPBKDF2(r speed.PBKDF2Result) string {
	return fmt.Sprintf("PBKDF2-%-9s %7d iterations per second for %d-bit key", r.Hash, r.IterationsPerSecond, r.KeyBits)
}

// speedFormatArgon2 prints an argon2 line as cryptsetup does, plus the time the
// last derivation with those parameters took.
func speedFormatArgon2(r speed.Argon2Result) string {
	s := fmt.Sprintf("%-10s %4d iterations, %5d memory, %d parallel threads (CPUs) for %d-bit key (requested %d ms time",
		r.Variant, r.Iterations, r.MemoryKiB, r.Threads, r.KeyBits, r.RequestedMS)
	s += fmt.Sprintf("; took %.0f ms", r.MeasuredMS)
	if !r.Converged {
		s += ", outside -5/+10 %"
	}
	return s + ")"
}

const speedCipherHeader = "#     Algorithm |       Key |      Encryption |      Decryption"

func speedCoresTitle(workers int) string {
	if workers == 1 {
		return "# One core (1 goroutine)"
	}
	return fmt.Sprintf("# All cores (%d goroutines, one buffer each, rates summed)", workers)
}

// speedFormatCipher prints a cipher row as cryptsetup does; N/A when the row
// could not be measured.
func speedFormatCipher(r speed.CipherResult, clock string) string {
	enc, dec := speedRate(r, true, clock), speedRate(r, false, clock)
	if enc <= 0 || dec <= 0 {
		return fmt.Sprintf("%15s %10db %17s %17s", r.Algorithm, r.KeyBits, "N/A", "N/A")
	}
	return fmt.Sprintf("%15s %10db %11.1f MiB/s %11.1f MiB/s", r.Algorithm, r.KeyBits, enc, dec)
}

// printSpeedNotes prints the footnotes: what each row ran, why rows are
// N/A, and how time was counted.
func printSpeedNotes(w io.Writer, rep *speed.Report, f speedFlags) {
	fmt.Fprintln(w, "#")
	if !f.noCiphers {
		seen := map[string]bool{}
		for _, c := range rep.Ciphers {
			if seen[c.Algorithm] {
				continue
			}
			seen[c.Algorithm] = true
			if c.Available {
				fmt.Fprintf(w, "# %s: %s\n", c.Algorithm, c.Implementation)
			} else {
				fmt.Fprintf(w, "# %s: N/A: %s\n", c.Algorithm, c.Reason)
			}
		}
		for _, n := range rep.Settings.Workers {
			if line := speedCPUShareNote(rep, n, f.clock); line != "" {
				fmt.Fprintln(w, line)
			}
		}
		if parts := speedCPUPerGiB(rep); len(parts) > 0 {
			fmt.Fprintln(w, "# CPU seconds per GiB, one core, enc/dec:")
			for i := 0; i < len(parts); i += 4 {
				fmt.Fprintf(w, "#   %s\n", strings.Join(parts[i:min(i+4, len(parts))], ", "))
			}
		}
	}
	if !f.noKDF {
		fmt.Fprintf(w, "# PBKDF2: golang.org/x/crypto/pbkdf2, rate from one run of at least %v of thread CPU time (cryptsetup: getrusage)\n", f.pbkdf2Time)
		if len(rep.Argon2) > 0 {
			a := rep.Argon2[0]
			fmt.Fprintf(w, "# argon2: golang.org/x/crypto/argon2, wall time; memory (KiB) capped at %d: %s; %d threads", a.MemoryCapKiB, a.MemoryCapSource, a.Threads)
			if a.Threads != 4 {
				fmt.Fprint(w, " (cryptsetup benchmark uses 4 whatever the CPUs)")
			}
			fmt.Fprintln(w)
		}
	}
}

// speedCPUShareNote says how much CPU the workers of one table actually got:
// on a busy machine the all-cores figures fall short of N times one core
// because the workers were not running, not because the cipher is slow.
func speedCPUShareNote(rep *speed.Report, workers int, clock string) string {
	var cpu, wall float64
	for _, c := range rep.Ciphers {
		if c.Workers != workers || !c.Available {
			continue
		}
		for _, t := range []*speed.Throughput{c.Encryption, c.Decryption} {
			if t == nil || t.CPUSeconds <= 0 {
				return ""
			}
			cpu += t.CPUSeconds
			wall += t.Seconds
		}
	}
	if wall <= 0 {
		return ""
	}
	share := cpu / wall
	if workers == 1 {
		s := fmt.Sprintf("# One core: the worker thread was on a CPU %.0f %% of the time", 100*min(share, 1))
		if share < 0.9 {
			s += speedBusyAdvice(clock)
		}
		return s
	}
	s := fmt.Sprintf("# All cores: the %d workers got %.1f CPUs on average", workers, share)
	if share < 0.9*float64(workers) {
		s += speedBusyAdvice(clock)
	}
	return s
}

func speedBusyAdvice(clock string) string {
	if clock == "cpu" {
		return " (the machine is busy; --clock cpu discounts the time the workers waited)"
	}
	return " (the machine is busy: the wall-clock figures are low; try --clock cpu)"
}

// speedCPUPerGiB summarises the CPU cost of the one-core rows, e.g.
// "aes-xts 256b 0.31/0.30".
func speedCPUPerGiB(rep *speed.Report) []string {
	var parts []string
	for _, c := range rep.Ciphers {
		if c.Workers != 1 || !c.Available || c.Encryption.CPUSeconds == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %db %.2f/%.2f", c.Algorithm, c.KeyBits,
			c.Encryption.CPUSecondsPerGiB(), c.Decryption.CPUSecondsPerGiB()))
	}
	return parts
}

func speedRatio(ours, theirs float64) string {
	if ours <= 0 || theirs <= 0 {
		return "-"
	}
	return strconv.FormatFloat(ours/theirs, 'f', 2, 64)
}

// printSpeedComparison prints the other tools' figures next to ours.
func printSpeedComparison(w io.Writer, rep *speed.Report, ext []speed.External, workers []int, f speedFlags) {
	fmt.Fprintln(w, "#")
	fmt.Fprintln(w, "# Comparison: ratio = twincrypt / other (above 1: twincrypt faster, or more argon2 work in the same time)")
	for _, e := range ext {
		name := e.Tool
		if e.Version != "" {
			name += " " + e.Version
		}
		if !e.Available {
			fmt.Fprintf(w, "# %s: not run: %s\n", name, e.Error)
			continue
		}
		if len(e.Commands) == 1 {
			fmt.Fprintf(w, "# %s: %s\n", name, e.Commands[0])
		} else {
			fmt.Fprintf(w, "# %s: %d runs like %s\n", name, len(e.Commands), e.Commands[0])
		}
		printSpeedKDFComparison(w, rep, e)
		if e.CipherError != "" && !f.noCiphers {
			fmt.Fprintf(w, "# %s: cipher figures not available: %s\n", name, e.CipherError)
		}
		if !f.noCiphers {
			for _, n := range workers {
				printSpeedCipherComparison(w, rep, e, n, f)
			}
		}
	}
}

func printSpeedKDFComparison(w io.Writer, rep *speed.Report, e speed.External) {
	if len(rep.PBKDF2)+len(rep.Argon2) == 0 || len(e.PBKDF2)+len(e.Argon2) == 0 {
		return
	}
	fmt.Fprintf(w, "%-15s | %24s | %24s | %6s\n", "#           KDF", "twincrypt", e.Tool, "ratio")
	for _, ours := range rep.PBKDF2 {
		for _, th := range e.PBKDF2 {
			if th.Hash == ours.Hash && th.KeyBits == ours.KeyBits {
				fmt.Fprintf(w, "%15s | %17d iter/s | %17d iter/s | %6s\n", "PBKDF2-"+ours.Hash,
					ours.IterationsPerSecond, th.IterationsPerSecond,
					speedRatio(float64(ours.IterationsPerSecond), float64(th.IterationsPerSecond)))
			}
		}
	}
	for _, ours := range rep.Argon2 {
		for _, th := range e.Argon2 {
			if th.Variant != ours.Variant {
				continue
			}
			r := "-"
			if th.RequestedMS == ours.RequestedMS {
				r = speedRatio(float64(ours.Iterations)*float64(ours.MemoryKiB), float64(th.Iterations)*float64(th.MemoryKiB))
			}
			fmt.Fprintf(w, "%15s | %24s | %24s | %6s\n", ours.Variant, speedArgon2Params(ours), speedArgon2Params(th), r)
		}
	}
}

func speedArgon2Params(r speed.Argon2Result) string {
	return fmt.Sprintf("t=%d m=%dKiB p=%d", r.Iterations, r.MemoryKiB, r.Threads)
}

func printSpeedCipherComparison(w io.Writer, rep *speed.Report, e speed.External, workers int, f speedFlags) {
	var lines []string
	for _, ours := range rep.Ciphers {
		if ours.Workers != workers {
			continue
		}
		th, ok := e.Cipher(ours.Algorithm, ours.KeyBits, workers)
		if !ok {
			continue
		}
		c := f.clock
		lines = append(lines, fmt.Sprintf("%15s %10db %14s %13s %8s %14s %13s %8s", ours.Algorithm, ours.KeyBits,
			speedMiBps(ours, true, c), speedMiBps(th, true, c), speedRatio(speedRate(ours, true, c), speedRate(th, true, c)),
			speedMiBps(ours, false, c), speedMiBps(th, false, c), speedRatio(speedRate(ours, false, c), speedRate(th, false, c))))
	}
	if len(lines) == 0 {
		return
	}
	what := "one core"
	if workers > 1 {
		what = fmt.Sprintf("all cores (%d)", workers)
	}
	fmt.Fprintf(w, "# %s vs %s, %s, MiB/s\n", "twincrypt", e.Tool, what)
	fmt.Fprintf(w, "%-15s %11s %14s %13s %8s %14s %13s %8s\n", "#     Algorithm", "Key",
		"enc twincrypt", e.Tool, "ratio", "dec twincrypt", e.Tool, "ratio")
	for _, l := range lines {
		fmt.Fprintln(w, l)
	}
}

// speedRate returns one direction's MiB/s by the chosen clock, or 0.
func speedRate(c speed.CipherResult, enc bool, clock string) float64 {
	if !c.Available {
		return 0
	}
	t := c.Decryption
	if enc {
		t = c.Encryption
	}
	if t == nil {
		return 0
	}
	if clock == "cpu" {
		return t.CPUMiBPerSec
	}
	return t.MiBPerSec
}

func speedMiBps(c speed.CipherResult, enc bool, clock string) string {
	v := speedRate(c, enc, clock)
	if v <= 0 {
		return "N/A"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
