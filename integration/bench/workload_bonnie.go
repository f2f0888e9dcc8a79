package bench

import (
	"bytes"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// bonnieFileMiB is the size of bonnie's I/O file (large: the article's
// bonnie++ -s 3000).
var bonnieFileMiB = scale[int64]{tiny: 16, small: 32, dflt: 256, large: 3000}

// bonnieFiles is the number of small files bonnie creates, stats and
// deletes (bonnie++ -n counts in 1024s; 16384 is bonnie++'s default).
var bonnieFiles = scale[int]{tiny: 1024, small: 4096, dflt: 16384, large: 16384}

// bonnieChunk is bonnie++'s I/O chunk: its default, 8 KiB.
const bonnieChunk = 8192

// bonnieFilesPerDir spreads the small files over directories, as
// bonnie++ -n N:0:0:dirs does.
const bonnieFilesPerDir = 1024

// bonnieRewriteMask is XORed into every chunk the rewrite phase reads:
// the "modify" of its read-modify-write, so that the result is checkable.
var bonnieRewriteMask = bytes.Repeat([]byte{0xa5}, bonnieChunk)

// Bonnie is bonnie++ -f (the LUKS article ran bonnie++ -r 300 -s 3000):
// a block write, the rewrite (read a chunk, change it, seek back, write
// it) that the article saw 2-3x slower on LUKS, and the sequential
// create, stat and delete of empty files (the article: 30k/s against 12k/s).
//
// By default it is a Go implementation of those phases, which checks the
// rewritten file against what it must hold and every file's presence. With
// Program set and bonnie++ installed it runs bonnie++ itself: at small
// sizes bonnie++ reports "+++++" for every phase under 500 ms and spends
// seconds in fixed pauses, so it is for default and large runs.
type Bonnie struct {
	// Program runs bonnie++ when installed (the runner's --bonnie++).
	Program bool
}

func (*Bonnie) Name() string { return "bonnie" }

func (*Bonnie) Describe() string {
	return "bonnie++ -f: block write, rewrite (read, modify, seek back, write), create/stat/delete of empty files"
}

func (*Bonnie) Prepare(context.Context, *Env) error { return nil }

func (w *Bonnie) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	if p := lookProgram("bonnie++", !w.Program); p != "" {
		return w.runProgram(ctx, p, dir, env)
	}
	res := Result{Metrics: map[string]float64{}}
	if w.Program {
		appendNote(&res, "bonnie++ not installed: Go implementation")
	} else {
		appendNote(&res, "Go implementation of bonnie++ -f")
	}
	size := bonnieFileMiB.pick(env.Size) * oneMiB
	nfiles := bonnieFiles.pick(env.Size)
	var sw stopwatch
	pt := newPattern(seedBonnie)

	// Block write, then rewrite.
	const name = "Bonnie.dat"
	path := filepath.Join(dir, name)
	var chunks int64
	writeWall, err := sw.lap(func() (err error) {
		chunks, err = writePattern(ctx, path, pt, size, bonnieChunk)
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	rewriteWall, err := sw.lap(func() error { return bonnieRewrite(ctx, path, pt, size) })
	if err != nil {
		return Result{}, fmt.Errorf("rewrite %s: %w", name, err)
	}
	verifyHook("bonnie.rewritten", dir)
	if err := verifyRewritten(path, name, pt, size); err != nil {
		return Result{}, err
	}
	if err := os.Remove(path); err != nil {
		return Result{}, err
	}

	// Create, stat, delete.
	fdir := filepath.Join(dir, "Bonnie.files")
	names := bonnieNames(nfiles)
	createWall, err := sw.lap(func() error { return bonnieCreate(ctx, fdir, names) })
	if err != nil {
		return Result{}, fmt.Errorf("create: %w", err)
	}
	verifyHook("bonnie.created", dir)
	statWall, err := sw.lap(func() error { return bonnieStat(ctx, fdir, names) })
	if err != nil {
		return Result{}, fmt.Errorf("stat: %w", err)
	}
	deleteWall, err := sw.lap(func() error { return bonnieDelete(ctx, fdir, names) })
	if err != nil {
		return Result{}, fmt.Errorf("delete: %w", err)
	}
	if err := checkDirEmpty(dir); err != nil {
		return Result{}, err
	}
	n := int64(nfiles)
	res.Wall, res.WorkloadCPU, res.Verified = sw.wall, sw.cpu, true
	res.Bytes = 3 * size // written, then read and written again
	res.Ops = 2*chunks + 3*n
	res.Metrics["write_MiBps"] = mibps(size, writeWall)
	res.Metrics["rewrite_MiBps"] = mibps(size, rewriteWall)
	res.Metrics["create_per_s"] = perSecond(n, createWall)
	res.Metrics["stat_per_s"] = perSecond(n, statWall)
	res.Metrics["delete_per_s"] = perSecond(n, deleteWall)
	return res, nil
}

// bonnieRewrite is bonnie++'s rewrite phase: for each chunk, read it,
// change it, seek back and write it; then fsync. Each chunk read is
// checked against what the write phase wrote (cheap, and it catches a
// layer that returns stale data mid-file).
func bonnieRewrite(ctx context.Context, path string, pt *pattern, size int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	buf := make([]byte, bonnieChunk)
	for off := int64(0); off < size; off += bonnieChunk {
		if off%oneMiB == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if _, err := io.ReadFull(f, buf); err != nil {
			return fmt.Errorf("read at offset %d: %w", off, err)
		}
		if err := pt.check(filepath.Base(path), buf, off, nil); err != nil {
			return err
		}
		subtle.XORBytes(buf, buf, bonnieRewriteMask)
		if _, err := f.Seek(-bonnieChunk, io.SeekCurrent); err != nil {
			return err
		}
		if _, err := f.Write(buf); err != nil {
			return fmt.Errorf("write at offset %d: %w", off, err)
		}
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	return f.Close()
}

// verifyRewritten checks, after dropping the file's cached pages, that
// every chunk holds the pattern XOR the rewrite mask.
func verifyRewritten(path, name string, pt *pattern, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	dropFileCache(f)
	if fi, err := f.Stat(); err != nil {
		return err
	} else if fi.Size() != size {
		return fmt.Errorf("verify %s: %d bytes after rewrite, wrote %d: %w", name, fi.Size(), size, errContent)
	}
	buf := make([]byte, oneMiB)
	for off := int64(0); off < size; off += oneMiB {
		n, err := io.ReadFull(f, buf[:min(oneMiB, size-off)])
		if err != nil {
			return fmt.Errorf("verify %s: read at offset %d: %w", name, off, err)
		}
		for k := 0; k < n; k += bonnieChunk {
			subtle.XORBytes(buf[k:k+bonnieChunk], buf[k:k+bonnieChunk], bonnieRewriteMask)
		}
		if err := pt.check(name+" (rewritten)", buf[:n], off, nil); err != nil {
			return fmt.Errorf("verify %w", err)
		}
	}
	return nil
}

// bonnieNames are the small files' paths relative to their directory:
// dNNN/ and a name like bonnie++'s (a 7-digit number and letters).
func bonnieNames(n int) []string {
	names := make([]string, n)
	const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	for i := range names {
		suffix := make([]byte, 1+i%12)
		for k := range suffix {
			suffix[k] = letters[(i*7+k*13)%len(letters)]
		}
		names[i] = fmt.Sprintf("d%03d/%07d%s", i/bonnieFilesPerDir, i, suffix)
	}
	return names
}

func bonnieCreate(ctx context.Context, fdir string, names []string) error {
	if err := os.Mkdir(fdir, 0o755); err != nil {
		return err
	}
	lastDir := ""
	for i, n := range names {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if d := filepath.Dir(n); d != lastDir {
			if err := os.Mkdir(filepath.Join(fdir, d), 0o755); err != nil {
				return err
			}
			lastDir = d
		}
		f, err := os.OpenFile(filepath.Join(fdir, n), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// bonnieStat reads every directory and stats every file in it, as
// bonnie++'s sequential "read" of empty files does, and checks that the
// directories hold exactly the files created, all empty.
func bonnieStat(ctx context.Context, fdir string, names []string) error {
	want := map[string][]string{}
	for _, n := range names {
		d, b := filepath.Split(n)
		want[d] = append(want[d], b)
	}
	dirs := sortedNames(want)
	for _, d := range dirs {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(fdir, d))
		if err != nil {
			return err
		}
		got, err := f.Readdirnames(-1)
		f.Close()
		if err != nil {
			return err
		}
		for _, b := range got {
			fi, err := os.Lstat(filepath.Join(fdir, d, b))
			if err != nil {
				return err
			}
			if !fi.Mode().IsRegular() || fi.Size() != 0 {
				return fmt.Errorf("%s%s: %v, %d bytes; created empty and regular: %w", d, b, fi.Mode(), fi.Size(), errContent)
			}
		}
		sort.Strings(got)
		w := append([]string(nil), want[d]...)
		sort.Strings(w)
		if strings.Join(got, "/") != strings.Join(w, "/") {
			return fmt.Errorf("%s: %d entries, created %d (%s): %w", d, len(got), len(w), firstMissing(w, got), errContent)
		}
	}
	return nil
}

// firstMissing names the first of want missing from got, or the first
// extra of got.
func firstMissing(want, got []string) string {
	g := map[string]bool{}
	for _, n := range got {
		g[n] = true
	}
	for _, n := range want {
		if !g[n] {
			return n + " missing"
		}
		delete(g, n)
	}
	for n := range g {
		return n + " not created"
	}
	return "same names"
}

func bonnieDelete(ctx context.Context, fdir string, names []string) error {
	lastDir := ""
	for i, n := range names {
		if i%256 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		if d := filepath.Dir(n); d != lastDir {
			if lastDir != "" {
				if err := os.Remove(filepath.Join(fdir, lastDir)); err != nil {
					return err
				}
			}
			lastDir = d
		}
		if err := os.Remove(filepath.Join(fdir, n)); err != nil {
			return err
		}
	}
	if lastDir != "" {
		if err := os.Remove(filepath.Join(fdir, lastDir)); err != nil {
			return err
		}
	}
	return os.Remove(fdir)
}

// runProgram runs bonnie++ itself and reads its CSV line. bonnie++ does
// not compare data, so a short Go rewrite (4 MiB, not measured) then
// checks that this target returns what it was given.
func (w *Bonnie) runProgram(ctx context.Context, prog, dir string, env *Env) (Result, error) {
	sizeMiB := bonnieFileMiB.pick(env.Size)
	nfiles := bonnieFiles.pick(env.Size)
	k := nfiles / 1024
	args := []string{prog, "-d", ".", "-s", strconv.FormatInt(sizeMiB, 10), "-r", strconv.FormatInt(sizeMiB/2, 10),
		"-n", fmt.Sprintf("%d:0:0:%d", k, k), "-f", "-q", "-m", "twincrypt"}
	if asRoot() {
		args = append(args, "-u", "root")
	}
	var out bytes.Buffer
	wall, cpu, err := shellCmd{dir: dir, script: `exec "$@"`, args: args, stdout: &out}.run(ctx)
	if err != nil {
		return Result{}, err
	}
	res, err := parseBonnieCSV(out.String())
	if err != nil {
		return Result{}, err
	}
	res.Wall, res.WorkloadCPU = wall, cpu
	res.Bytes = 4 * sizeMiB * oneMiB // block write, rewrite (read+write), block read
	res.Ops = 6 * int64(k*1024)
	if err := checkDirEmpty(dir); err != nil {
		return Result{}, fmt.Errorf("after bonnie++: %w", err)
	}
	pt := newPattern(seedBonnie)
	const name = "Bonnie.check"
	path := filepath.Join(dir, name)
	if _, err := writePattern(ctx, path, pt, 4*oneMiB, bonnieChunk); err != nil {
		return Result{}, fmt.Errorf("check: %w", err)
	}
	if err := bonnieRewrite(ctx, path, pt, 4*oneMiB); err != nil {
		return Result{}, fmt.Errorf("check: %w", err)
	}
	verifyHook("bonnie.rewritten", dir)
	if err := verifyRewritten(path, name, pt, 4*oneMiB); err != nil {
		return Result{}, err
	}
	if err := removeAndCheck(dir, name); err != nil {
		return Result{}, err
	}
	res.Verified = true
	return res, nil
}

// bonnieFields maps the fields of bonnie++'s CSV line (format 1.97 and
// 1.98: the I/O results at 9-20, the file results at 26-37, each rate
// followed by its %CPU) to our metrics and their scale (K/s to MiB/s).
var bonnieFields = []struct {
	index  int
	metric string
	scale  float64
}{
	{11, "write_MiBps", 1.0 / 1024},
	{13, "rewrite_MiBps", 1.0 / 1024},
	{17, "read_MiBps", 1.0 / 1024},
	{19, "seeks_per_s", 1},
	{26, "create_per_s", 1},
	{28, "stat_per_s", 1},
	{30, "delete_per_s", 1},
	{32, "rand_create_per_s", 1},
	{34, "rand_stat_per_s", 1},
	{36, "rand_delete_per_s", 1},
}

// parseBonnieCSV reads the CSV line of bonnie++ -q. A phase faster than
// bonnie++ can time (under 500 ms) is "+++++": its metric is left out and
// the Note lists it.
func parseBonnieCSV(out string) (Result, error) {
	var line string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "1.9") {
			line = strings.TrimSpace(l)
		}
	}
	if line == "" {
		return Result{}, errors.New("bonnie++: no CSV line in its output")
	}
	f := strings.Split(line, ",")
	if len(f) < 38 {
		return Result{}, fmt.Errorf("bonnie++: CSV line of %d fields, want at least 38: %q", len(f), line)
	}
	res := Result{Metrics: map[string]float64{}}
	var tooFast []string
	for _, bf := range bonnieFields {
		v := f[bf.index]
		switch {
		case v == "":
			continue
		case strings.HasPrefix(v, "+"):
			tooFast = append(tooFast, bf.metric)
			continue
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return Result{}, fmt.Errorf("bonnie++: field %d (%s) is %q", bf.index, bf.metric, v)
		}
		res.Metrics[bf.metric] = x * bf.scale
	}
	appendNote(&res, "bonnie++ %s (data checked by a 4 MiB Go rewrite)", f[1])
	if len(tooFast) > 0 {
		appendNote(&res, "too fast for bonnie++ to time: %s", strings.Join(tooFast, " "))
	}
	return res, nil
}
