package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	hdr "github.com/HdrHistogram/hdrhistogram-go"
)

// randFileMiB is the size of randrw's file in MiB.
var randFileMiB = scale[int64]{tiny: 32, small: 128, dflt: 512, large: 1024}

// randBudget is how long randrw's random phase runs.
var randBudget = scale[time.Duration]{tiny: time.Second, small: 3 * time.Second, dflt: 10 * time.Second, large: 30 * time.Second}

// randReadPercent is the share of reads: fio --rw=randrw --rwmixread=70.
const randReadPercent = 70

// randSeed fixes the sequence of offsets, the same on every target.
const randSeed = 42

// RandRW is fio --rw=randrw --rwmixread=70 --bs=4k --ioengine=psync
// --iodepth=1 on one file: random 4 KiB reads and writes, one at a time,
// for a fixed time. The file is laid out first (not measured) and its
// cached pages dropped, as fio's invalidate=1 does.
//
// The Go implementation times every pread and pwrite into an HDR
// histogram per direction. It remembers the generation of every 4 KiB
// unit it wrote, checks every read against it, and checks the whole file
// at the end. With FIO set and fio installed, fio runs instead; its
// writes carry a fixed pattern, so the final check can only tell that
// every unit holds either the layout's content or fio's pattern.
type RandRW struct {
	// FIO runs fio when installed (the runner's --fio).
	FIO bool
}

func (*RandRW) Name() string { return "randrw" }

func (*RandRW) Describe() string {
	return "random 4 KiB reads and writes, 70/30, queue depth 1, on one file (fio randrw psync)"
}

func (*RandRW) Prepare(context.Context, *Env) error { return nil }

func (w *RandRW) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	size := randFileMiB.pick(env.Size) * oneMiB
	budget := randBudget.pick(env.Size)
	pt := newPattern(seedRandRW)
	const name = "randrw.dat"
	path := filepath.Join(dir, name)
	if _, err := writePattern(ctx, path, pt, size, oneMiB); err != nil {
		return Result{}, fmt.Errorf("lay out %s: %w", name, err)
	}
	if p := lookProgram("fio", !w.FIO); p != "" {
		return runFIO(ctx, p, dir, name, pt, size, budget)
	}
	var res Result
	if w.FIO {
		appendNote(&res, "fio not installed: Go implementation")
	}
	units := size / patternUnit
	gens := make([]uint32, units)
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	dropFileCache(f)
	rng := rand.New(rand.NewPCG(randSeed, randSeed))
	// Latencies in nanoseconds, 1 ns to 1 minute, 3 significant digits.
	hr, hw := hdr.New(1, int64(time.Minute), 3), hdr.New(1, int64(time.Minute), 3)
	buf := make([]byte, patternUnit)
	var sw stopwatch
	var reads, writes int64
	sw.start()
	deadline := sw.t0.Add(budget)
	for {
		u := rng.Int64N(units)
		off := u * patternUnit
		if rng.IntN(100) < randReadPercent {
			t := time.Now()
			_, err := f.ReadAt(buf, off)
			lat := time.Since(t)
			if err != nil {
				return Result{}, fmt.Errorf("%s: pread at offset %d: %w", name, off, err)
			}
			_ = hr.RecordValue(max(1, min(lat.Nanoseconds(), hr.HighestTrackableValue())))
			reads++
			if at := pt.unitDiff(buf, u, gens[u]); at >= 0 {
				return Result{}, fmt.Errorf("random read: %w", contentError(name, u, gens[u], at))
			}
			if t.After(deadline) {
				break
			}
		} else {
			gens[u]++
			data := pt.unit(u, gens[u])
			t := time.Now()
			_, err := f.WriteAt(data, off)
			lat := time.Since(t)
			if err != nil {
				return Result{}, fmt.Errorf("%s: pwrite at offset %d: %w", name, off, err)
			}
			_ = hw.RecordValue(max(1, min(lat.Nanoseconds(), hw.HighestTrackableValue())))
			writes++
			if t.After(deadline) {
				break
			}
		}
		if (reads+writes)%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return Result{}, err
			}
		}
	}
	sw.stop()
	if err := f.Sync(); err != nil {
		return Result{}, fmt.Errorf("%s: fsync: %w", name, err)
	}
	if err := f.Close(); err != nil {
		return Result{}, err
	}
	verifyHook("randrw.done", dir)
	if err := pt.verifyFile(path, name, size, func(u int64) uint32 { return gens[u] }); err != nil {
		return Result{}, err
	}
	if err := removeAndCheck(dir, name); err != nil {
		return Result{}, err
	}
	us := func(h *hdr.Histogram, q float64) float64 { return float64(h.ValueAtQuantile(q)) / 1e3 }
	res.Wall, res.WorkloadCPU, res.Verified = sw.wall, sw.cpu, true
	res.Ops, res.Bytes = reads+writes, (reads+writes)*patternUnit
	res.Metrics = map[string]float64{
		"iops":         perSecond(reads+writes, sw.wall),
		"read_iops":    perSecond(reads, sw.wall),
		"write_iops":   perSecond(writes, sw.wall),
		"read_p50_us":  us(hr, 50),
		"read_p99_us":  us(hr, 99),
		"write_p50_us": us(hw, 50),
		"write_p99_us": us(hw, 99),
	}
	return res, nil
}

// fioPattern is what fio's writes carry (--buffer_pattern), repeated.
const fioPattern = "twic"

// fioJSON is the part of fio --output-format=json randrw reads.
type fioJSON struct {
	Jobs []struct {
		Error      int    `json:"error"`
		JobRuntime int64  `json:"job_runtime"` // ms
		Read       fioDir `json:"read"`
		Write      fioDir `json:"write"`
	} `json:"jobs"`
}

type fioDir struct {
	IOPS     float64 `json:"iops"`
	TotalIOs int64   `json:"total_ios"`
	IOBytes  int64   `json:"io_bytes"`
	ClatNs   struct {
		Percentile map[string]float64 `json:"percentile"`
	} `json:"clat_ns"`
}

func runFIO(ctx context.Context, prog, dir, name string, pt *pattern, size int64, budget time.Duration) (Result, error) {
	var out bytes.Buffer
	args := []string{prog, "--name=randrw", "--filename=" + name, "--size=" + strconv.FormatInt(size, 10),
		"--rw=randrw", "--rwmixread=" + strconv.Itoa(randReadPercent), "--bs=4k", "--ioengine=psync", "--iodepth=1",
		"--time_based", "--runtime=" + strconv.FormatInt(max(1, int64(budget/time.Second)), 10),
		"--randseed=" + strconv.Itoa(randSeed), "--buffer_pattern=0x" + fmt.Sprintf("%x", fioPattern),
		"--output-format=json"}
	_, cpu, err := shellCmd{dir: dir, script: `exec "$@"`, args: args, stdout: &out}.run(ctx)
	if err != nil {
		return Result{}, err
	}
	res, err := parseFIO(out.Bytes())
	if err != nil {
		return Result{}, err
	}
	res.WorkloadCPU = cpu
	verifyHook("randrw.done", dir)
	fioUnits, err := checkFIOFile(filepath.Join(dir, name), name, pt, size)
	if err != nil {
		return Result{}, err
	}
	if writes := int64(res.Metrics["write_iops"] * res.Wall.Seconds()); fioUnits == 0 && writes > 0 {
		return Result{}, fmt.Errorf("verify %s: fio wrote about %d times, yet no unit holds its pattern: %w", name, writes, errContent)
	}
	if err := removeAndCheck(dir, name); err != nil {
		return Result{}, err
	}
	res.Verified = true
	appendNote(&res, "fio (content checked: %d of %d units hold fio's fixed pattern, the rest the layout; misplaced fio blocks are not detectable)",
		fioUnits, size/patternUnit)
	return res, nil
}

// parseFIO reads fio's JSON output (text before the JSON, such as
// warnings, is skipped).
func parseFIO(out []byte) (Result, error) {
	if i := bytes.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	var j fioJSON
	if err := json.Unmarshal(out, &j); err != nil {
		return Result{}, fmt.Errorf("fio: parse its JSON output: %w", err)
	}
	if len(j.Jobs) != 1 {
		return Result{}, fmt.Errorf("fio: %d jobs in its output, want 1", len(j.Jobs))
	}
	job := j.Jobs[0]
	if job.Error != 0 {
		return Result{}, fmt.Errorf("fio: job error %d", job.Error)
	}
	pct := func(d fioDir, p string) float64 { return d.ClatNs.Percentile[p] / 1e3 }
	ios := job.Read.TotalIOs + job.Write.TotalIOs
	return Result{
		Wall: time.Duration(job.JobRuntime) * time.Millisecond,
		Ops:  ios, Bytes: job.Read.IOBytes + job.Write.IOBytes,
		Metrics: map[string]float64{
			"iops":         job.Read.IOPS + job.Write.IOPS,
			"read_iops":    job.Read.IOPS,
			"write_iops":   job.Write.IOPS,
			"read_p50_us":  pct(job.Read, "50.000000"),
			"read_p99_us":  pct(job.Read, "99.000000"),
			"write_p50_us": pct(job.Write, "50.000000"),
			"write_p99_us": pct(job.Write, "99.000000"),
		},
	}, nil
}

// checkFIOFile checks that every unit of the file is either the layout's
// (generation 0) or fio's pattern, and returns how many are fio's.
func checkFIOFile(path, name string, pt *pattern, size int64) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	dropFileCache(f)
	if fi, err := f.Stat(); err != nil {
		return 0, err
	} else if fi.Size() != size {
		return 0, fmt.Errorf("verify %s: %d bytes after fio, laid out %d: %w", name, fi.Size(), size, errContent)
	}
	fioUnit := bytes.Repeat([]byte(fioPattern), patternUnit/len(fioPattern))
	buf := make([]byte, oneMiB)
	var fioUnits int64
	for off := int64(0); off < size; off += oneMiB {
		n, err := io.ReadFull(f, buf[:min(oneMiB, size-off)])
		if err != nil {
			return 0, fmt.Errorf("verify %s: read at offset %d: %w", name, off, err)
		}
		for k := 0; k < n; k += patternUnit {
			u := (off + int64(k)) / patternUnit
			got := buf[k : k+patternUnit]
			if bytes.Equal(got, fioUnit) {
				fioUnits++
				continue
			}
			if at := pt.unitDiff(got, u, 0); at >= 0 {
				return 0, fmt.Errorf("verify (neither the layout nor fio's pattern) %w", contentError(name, u, 0, at))
			}
		}
	}
	return fioUnits, nil
}
