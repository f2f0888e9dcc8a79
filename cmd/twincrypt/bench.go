package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/fs"
)

// benchPassphrase protects the throwaway demo volume; it is not a secret.
var benchPassphrase = []byte("twincrypt bench demo")

const benchBlockSize = 1 << 20 // write and read in 1 MiB blocks

type benchFlags struct {
	dir     string
	sizeMiB int
	files   int
}

func newBenchCmd() *cobra.Command {
	var f benchFlags
	cmd := &cobra.Command{
		Use:   "bench [flags]",
		Short: "Demo benchmark: plain dir vs passthrough twin vs encrypted mount (full harness later)",
		Long: `Run a short self-contained benchmark (well under a minute) and print
how much FUSE and how much encryption cost on this machine.

bench creates a temporary directory (under --dir, default $TMPDIR), creates a
throwaway aes-xts volume with a fixed demo passphrase and a cheap KDF, mounts
the passthrough twin and the encrypted volume in-process, and on each of the
plain directory, the twin and the encrypted mount runs:

  seqwrite   write --size MiB in 1 MiB blocks, then fsync
  seqread    drop the file from the page cache (drop_caches as root, else
             posix_fadvise DONTNEED), read it back and verify every byte
  smallfiles create, stat and delete --files small files

Ratios are time ratios: crypt/twin is the cost of encryption, twin/plain the
cost of FUSE; above 1 means slower. Everything is unmounted and removed
afterwards, also on error or Ctrl-C. bench needs FUSE (/dev/fuse).

This is a demo; the full harness (the articles' workloads, repeats, medians,
CPU time, per-op latency, dm-crypt and peers) comes later.`,
		Example: `  twincrypt bench
  twincrypt bench --size 1024 --dir /mnt/ssd`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.sizeMiB < 1 {
				return usageErrorf("--size must be at least 1 (MiB)")
			}
			if f.files < 1 {
				return usageErrorf("--files must be at least 1")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return runBench(ctx, cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.dir, "dir", "", "create the temporary directories under `DIR` (default $TMPDIR)")
	fl.IntVar(&f.sizeMiB, "size", 256, "sequential file size in MiB")
	fl.IntVar(&f.files, "files", 2000, "number of small files")
	return cmd
}

type benchTarget struct {
	name string
	dir  string
}

// benchResult holds one target's timings.
type benchResult struct {
	write, read, small time.Duration
}

func runBench(ctx context.Context, out io.Writer, f benchFlags) (err error) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return mountFailedErrorf("bench needs FUSE, which is unavailable here: %w", err)
	}
	root, err := os.MkdirTemp(f.dir, "twincrypt-bench-")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	// Deferred calls run last-in first-out: the mounts registered below go
	// away before the directory tree is removed.
	defer func() {
		if rmErr := os.RemoveAll(root); rmErr != nil && err == nil {
			err = fmt.Errorf("bench: remove %s: %w", root, rmErr)
		}
	}()
	dirs := map[string]string{}
	for _, d := range []string{"plain", "twin.lower", "twin", "crypt.lower", "crypt"} {
		dirs[d] = filepath.Join(root, d)
		if err := os.Mkdir(dirs[d], 0o700); err != nil {
			return fmt.Errorf("bench: %w", err)
		}
	}

	params, err := kdf.Default("argon2id")
	if err != nil {
		return fmt.Errorf("bench: %w", err)
	}
	params.Time, params.MemoryKiB, params.Threads = 1, 64*1024, 1
	cfg, masterKey, err := config.Create(dirs["crypt.lower"], benchPassphrase, config.Options{
		Cipher:  "aes-xts",
		KDF:     params,
		Creator: "twincrypt bench " + buildVersion(),
	})
	if err != nil {
		return fmt.Errorf("bench: create demo volume: %w", err)
	}
	defer wipe(masterKey)

	log := newLogger(os.Stderr, false)
	twin, err := fs.Mount(dirs["twin"], fs.Options{Lower: dirs["twin.lower"], Log: log})
	if err != nil {
		return mountFailedErrorf("bench: mount the twin (is FUSE usable here?): %w", err)
	}
	defer benchUnmount(twin, dirs["twin"])
	crypt, err := fs.Mount(dirs["crypt"], fs.Options{Lower: dirs["crypt.lower"], Config: cfg, MasterKey: masterKey, Log: log})
	if err != nil {
		return mountFailedErrorf("bench: mount the encrypted volume: %w", err)
	}
	defer benchUnmount(crypt, dirs["crypt"])

	targets := []benchTarget{{"plain", dirs["plain"]}, {"twin", dirs["twin"]}, {"crypt", dirs["crypt"]}}
	dropper := newCacheDropper()
	results := make([]benchResult, len(targets))
	for i, t := range targets {
		if results[i], err = benchOne(ctx, t, f, dropper); err != nil {
			if ctx.Err() != nil {
				return errors.New("bench interrupted; mounts and temporary files removed")
			}
			return err
		}
	}
	printBench(out, f, cfg, dropper.method, targets, results)
	return nil
}

// benchUnmount unmounts a bench mount, lazily if it stays busy, so that the
// temporary tree can be removed in every case.
func benchUnmount(srv *fuse.Server, mnt string) {
	if err := srv.Unmount(); err == nil {
		return
	}
	if err := unmountPath(mnt, true); err != nil {
		fmt.Fprintf(os.Stderr, "twincrypt: bench: could not unmount %s: %v\n", mnt, oneLine(err.Error()))
	}
}

func benchOne(ctx context.Context, t benchTarget, f benchFlags, dropper *cacheDropper) (benchResult, error) {
	var r benchResult
	var err error
	file := filepath.Join(t.dir, "seq.dat")
	if r.write, err = benchWrite(ctx, file, f.sizeMiB); err != nil {
		return r, fmt.Errorf("bench %s: seqwrite: %w", t.name, err)
	}
	if err := dropper.drop(file); err != nil {
		return r, fmt.Errorf("bench %s: drop cache: %w", t.name, err)
	}
	if r.read, err = benchRead(ctx, file, f.sizeMiB); err != nil {
		return r, fmt.Errorf("bench %s: seqread: %w", t.name, err)
	}
	if err := os.Remove(file); err != nil {
		return r, fmt.Errorf("bench %s: %w", t.name, err)
	}
	smallDir := filepath.Join(t.dir, "small")
	if err := os.Mkdir(smallDir, 0o700); err != nil {
		return r, fmt.Errorf("bench %s: %w", t.name, err)
	}
	if r.small, err = benchSmallFiles(ctx, smallDir, f.files); err != nil {
		return r, fmt.Errorf("bench %s: smallfiles: %w", t.name, err)
	}
	return r, os.Remove(smallDir)
}

// benchBlock fills buf with block blockNo of the test pattern: a fixed
// pseudo-random 1 MiB with the block number stamped at the start and the
// middle, so that misplaced blocks are caught too.
func benchBlock(buf, pattern []byte, blockNo int) {
	copy(buf, pattern)
	binary.LittleEndian.PutUint64(buf[0:], uint64(blockNo))
	binary.LittleEndian.PutUint64(buf[len(buf)/2:], uint64(blockNo))
}

var benchPattern = func() []byte {
	p := make([]byte, benchBlockSize)
	rng := rand.NewChaCha8([32]byte{'t', 'w', 'i', 'n'})
	_, _ = rng.Read(p)
	return p
}()

func benchWrite(ctx context.Context, path string, sizeMiB int) (time.Duration, error) {
	buf := make([]byte, benchBlockSize)
	start := time.Now()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for i := 0; i < sizeMiB; i++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		benchBlock(buf, benchPattern, i)
		if _, err := f.Write(buf); err != nil {
			return 0, err
		}
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func benchRead(ctx context.Context, path string, sizeMiB int) (time.Duration, error) {
	buf := make([]byte, benchBlockSize)
	want := make([]byte, benchBlockSize)
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	for i := 0; i < sizeMiB; i++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if _, err := io.ReadFull(f, buf); err != nil {
			return 0, fmt.Errorf("block %d: %w", i, err)
		}
		benchBlock(want, benchPattern, i)
		if !bytes.Equal(buf, want) {
			return 0, fmt.Errorf("block %d reads back different bytes than were written", i)
		}
	}
	if n, _ := f.Read(buf[:1]); n != 0 {
		return 0, fmt.Errorf("file is longer than the %d MiB written", sizeMiB)
	}
	return time.Since(start), nil
}

func benchSmallFiles(ctx context.Context, dir string, n int) (time.Duration, error) {
	payload := benchPattern[:100]
	name := func(i int) string { return filepath.Join(dir, fmt.Sprintf("f%06d", i)) }
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return 0, err
		}
		if err := os.WriteFile(name(i), payload, 0o600); err != nil {
			return 0, err
		}
	}
	for i := 0; i < n; i++ {
		fi, err := os.Stat(name(i))
		if err != nil {
			return 0, err
		}
		if fi.Size() != int64(len(payload)) {
			return 0, fmt.Errorf("%s: stat says %d bytes, %d were written", name(i), fi.Size(), len(payload))
		}
	}
	for i := 0; i < n; i++ {
		if err := os.Remove(name(i)); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// cacheDropper evicts a file from the page cache before it is read back, so
// the read measures the filesystem and not memory.
type cacheDropper struct {
	method string // "drop_caches" or "fadvise"
}

func newCacheDropper() *cacheDropper {
	if os.Geteuid() == 0 {
		if f, err := os.OpenFile("/proc/sys/vm/drop_caches", os.O_WRONLY, 0); err == nil {
			f.Close()
			return &cacheDropper{method: "drop_caches"}
		}
	}
	return &cacheDropper{method: "fadvise"}
}

func (d *cacheDropper) drop(path string) error {
	if d.method == "drop_caches" {
		unix.Sync()
		err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("1"), 0)
		if err == nil {
			return nil
		}
		// Read-only /proc/sys in a container: fall back for good.
		d.method = "fadvise"
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fdatasync(int(f.Fd())); err != nil && !errors.Is(err, unix.EINVAL) {
		return err
	}
	return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
}

func printBench(out io.Writer, f benchFlags, cfg *config.Config, dropMethod string, targets []benchTarget, rs []benchResult) {
	fmt.Fprintf(out, "twincrypt bench (demo; the full harness comes later)\n")
	fmt.Fprintf(out, "crypt: %s, %d-bit key; page cache dropped with %s; ratios are time ratios (>1 = slower)\n\n",
		cfg.Cipher, cfg.KeyBytes*8, dropMethod)
	header := []string{"workload"}
	for _, t := range targets {
		header = append(header, t.name)
	}
	table := [][]string{append(header, "crypt/twin", "twin/plain")}

	mib := float64(f.sizeMiB)
	rows := []struct {
		name string
		get  func(benchResult) time.Duration
		unit string
		work float64
	}{
		{fmt.Sprintf("seqwrite %d MiB +fsync", f.sizeMiB), func(r benchResult) time.Duration { return r.write }, "MiB/s", mib},
		{fmt.Sprintf("seqread %d MiB cold", f.sizeMiB), func(r benchResult) time.Duration { return r.read }, "MiB/s", mib},
		{fmt.Sprintf("create+stat+delete %d", f.files), func(r benchResult) time.Duration { return r.small }, "files/s", float64(f.files)},
	}
	for _, row := range rows {
		line := []string{row.name}
		for _, r := range rs {
			d := row.get(r)
			line = append(line, fmt.Sprintf("%.0f %s %.2fs", row.work/d.Seconds(), row.unit, d.Seconds()))
		}
		plain, twin, crypt := row.get(rs[0]), row.get(rs[1]), row.get(rs[2])
		line = append(line, fmt.Sprintf("%.2fx", crypt.Seconds()/twin.Seconds()), fmt.Sprintf("%.2fx", twin.Seconds()/plain.Seconds()))
		table = append(table, line)
	}
	printTable(out, table)
}

// printTable prints rows with the first column left-aligned and the others
// right-aligned, two spaces apart.
func printTable(out io.Writer, rows [][]string) {
	var widths []int
	for _, row := range rows {
		for i, cell := range row {
			if i == len(widths) {
				widths = append(widths, 0)
			}
			widths[i] = max(widths[i], len(cell))
		}
	}
	for _, row := range rows {
		var b strings.Builder
		for i, cell := range row {
			if i == 0 {
				fmt.Fprintf(&b, "%-*s", widths[i], cell)
			} else {
				fmt.Fprintf(&b, "  %*s", widths[i], cell)
			}
		}
		fmt.Fprintln(out, b.String())
	}
}
