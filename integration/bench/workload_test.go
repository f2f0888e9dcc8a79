package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// wantMetrics are the metrics each workload must report (with a value
// above zero) whichever implementation runs.
var wlWantMetrics = map[string][]string{
	"seqwrite":      {"MiBps"},
	"seqread":       {"MiBps"},
	"smallwrite4k":  {"MiBps"},
	"smallwrite512": {"MiBps"},
	"copytree":      {"MiBps"},
	"gzip":          {"MiBps"},
	"srctree":       {"untar_s", "lsR_s", "md5_s", "rm_s"},
	"bonnie":        {"write_MiBps", "rewrite_MiBps", "create_per_s", "stat_per_s", "delete_per_s"},
	"randrw":        {"iops", "read_iops", "write_iops", "read_p50_us", "read_p99_us", "write_p99_us"},
	"sqlite":        {"inserts_per_s"},
	"lame":          {"MiBps"},
	"git":           {"clone_s", "status_s", "commit_s", "checkout_s", "gc_s"},
	"build":         {"build_s", "noop_s", "rebuild_s"},
}

// testEnv is a tiny run's environment: a fresh cache, and caches that
// cannot be dropped (a test must not empty the machine's page cache).
func wlEnv(t *testing.T) *Env {
	return &Env{Size: SizeTiny, Cache: t.TempDir(), DropCaches: func() error { return errors.New("not in tests") }}
}

// runOne prepares and runs w in a fresh directory and returns the result
// and the directory.
func wlRun(t *testing.T, w Workload, env *Env) (Result, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.Prepare(ctx, env); err != nil {
		if errors.Is(err, ErrSkipped) {
			t.Skip(err)
		}
		t.Fatalf("%s: Prepare: %v", w.Name(), err)
	}
	dir := filepath.Join(t.TempDir(), "target")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := w.Run(ctx, dir, env)
	if errors.Is(err, ErrSkipped) {
		t.Skip(err)
	}
	return res, dir, err
}

// checkResult checks the fields of a successful run.
func wlCheckResult(t *testing.T, name string, res Result, dir string) {
	t.Helper()
	if !res.Verified {
		t.Errorf("%s: not Verified", name)
	}
	if res.Wall <= 0 {
		t.Errorf("%s: Wall %v", name, res.Wall)
	}
	if res.Bytes <= 0 {
		t.Errorf("%s: Bytes %d", name, res.Bytes)
	}
	if res.Ops <= 0 {
		t.Errorf("%s: Ops %d", name, res.Ops)
	}
	if res.WorkloadCPU <= 0 {
		t.Errorf("%s: WorkloadCPU %v", name, res.WorkloadCPU)
	}
	for _, m := range wlWantMetrics[name] {
		if v, ok := res.Metrics[m]; !ok || v <= 0 {
			t.Errorf("%s: metric %s = %v (present %v); metrics %v", name, m, v, ok, res.Metrics)
		}
	}
	if err := checkDirEmpty(dir); err != nil {
		t.Errorf("%s: %v", name, err)
	}
	t.Logf("%s: wall %v, cpu %v, %d bytes, %d ops, %v; note %q", name, res.Wall.Round(time.Millisecond),
		res.WorkloadCPU.Round(time.Millisecond), res.Bytes, res.Ops, res.Metrics, res.Note)
}

func TestWorkloadsTiny(t *testing.T) {
	env := wlEnv(t)
	names := map[string]bool{}
	for _, w := range Workloads() {
		if names[w.Name()] {
			t.Fatalf("two workloads named %s", w.Name())
		}
		names[w.Name()] = true
		if _, ok := wlWantMetrics[w.Name()]; !ok {
			t.Errorf("workload %s has no entry in wantMetrics", w.Name())
		}
		t.Run(w.Name(), func(t *testing.T) {
			res, dir, err := wlRun(t, w, env)
			if err != nil {
				t.Fatalf("%s: %v", w.Name(), err)
			}
			wlCheckResult(t, w.Name(), res, dir)
			if !strings.Contains(res.Note, "warm") && (w.Name() == "seqread" || w.Name() == "gzip" || w.Name() == "srctree") {
				t.Errorf("%s: caches could not be dropped, yet the Note does not say warm: %q", w.Name(), res.Note)
			}
		})
	}
	for name := range wlWantMetrics {
		if _, ok := WorkloadByName(name); !ok {
			t.Errorf("WorkloadByName(%q) not found", name)
		}
	}
	if _, ok := WorkloadByName("nosuch"); ok {
		t.Error("WorkloadByName found nosuch")
	}
}

// TestWorkloadsGoImplementations runs the Go implementations of the
// workloads that prefer installed programs.
func TestWorkloadsGoImplementations(t *testing.T) {
	env := wlEnv(t)
	for _, w := range []Workload{&CopyTree{noPrograms: true}, &Gzip{noPrograms: true}, &SrcTree{noPrograms: true}, &Lame{noPrograms: true}} {
		t.Run(w.Name(), func(t *testing.T) {
			res, dir, err := wlRun(t, w, env)
			if err != nil {
				t.Fatalf("%s: %v", w.Name(), err)
			}
			wlCheckResult(t, w.Name(), res, dir)
			if !strings.Contains(res.Note, "Go") {
				t.Errorf("%s: Note %q does not say the Go implementation ran", w.Name(), res.Note)
			}
		})
	}
}

// TestWorkloadsPrograms runs the opt-in programs, where installed.
func TestWorkloadsPrograms(t *testing.T) {
	for _, c := range []struct {
		prog string
		w    Workload
	}{{"bonnie++", &Bonnie{Program: true}}, {"fio", &RandRW{FIO: true}}} {
		t.Run(c.w.Name(), func(t *testing.T) {
			if _, err := exec.LookPath(c.prog); err != nil {
				t.Skipf("%s not installed", c.prog)
			}
			res, dir, err := wlRun(t, c.w, wlEnv(t))
			if err != nil {
				t.Fatal(err)
			}
			if !res.Verified || res.Wall <= 0 || res.Bytes <= 0 || !strings.Contains(res.Note, c.prog) {
				t.Errorf("%+v", res)
			}
			if err := checkDirEmpty(dir); err != nil {
				t.Error(err)
			}
			t.Logf("%+v", res)
		})
	}
}

// flipByte changes one byte of the file at path.
func wlFlipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := []byte{0}
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestWorkloadsDetectCorruption changes what a workload wrote between
// its write and its verification, and expects the workload to fail and
// name what differs.
func TestWorkloadsDetectCorruption(t *testing.T) {
	cases := []struct {
		w       Workload
		point   string
		corrupt func(t *testing.T, dir string)
		want    string // in the error
		needs   string // a program the case needs
	}{
		{&SeqWrite{}, "seqwrite.written", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "seqwrite.dat"), 5*oneMiB+4096*3+100)
		}, "seqwrite.dat: 4 KiB unit 1283", ""},
		{&SeqRead{}, "seqread.written", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "seqread.dat"), 7*oneMiB+3)
		}, "seqread.dat: 4 KiB unit 1792", ""},
		{&SmallWrite{BlockSize: 512}, "smallwrite512.written", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "smallwrite512.dat"), 2*oneMiB+513)
		}, "smallwrite512.dat: 4 KiB unit 512", ""},
		{&RandRW{}, "randrw.done", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "randrw.dat"), 9*oneMiB+4096+7)
		}, "randrw.dat: 4 KiB unit 2305", ""},
		{&Bonnie{}, "bonnie.rewritten", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "Bonnie.dat"), 3*oneMiB)
		}, "Bonnie.dat (rewritten): 4 KiB unit 768", ""},
		{&CopyTree{}, "copytree.copied", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "img", "IMG_0123.jpg"), 1000)
		}, "img/IMG_0123.jpg: sha256", ""},
		{&CopyTree{}, "copytree.copied", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "img", "IMG_0200.jpg")); err != nil {
				t.Fatal(err)
			}
		}, "img/IMG_0200.jpg: missing", ""},
		{&Gzip{}, "gzip.copied", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "data.tar"), 3*oneMiB)
		}, "the original tar's is", ""},
		{&SrcTree{}, "srctree.untarred", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "src", "net", "net.go"), 10)
		}, "src/net/net.go", ""},
		{&SrcTree{}, "srctree.untarred", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, "src", "net", "dial.go")); err != nil {
				t.Fatal(err)
			}
		}, "ls -lR src listed", ""},
		{&Lame{noPrograms: true}, "lame.encoded", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "song.wav.deflate"), 2000)
		}, "song.wav.deflate", ""},
		{&Lame{}, "lame.encoded", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, "song.mp3"), 5000)
		}, "song.mp3", "lame"},
		{&SQLite{}, "sqlite.inserted", func(t *testing.T, dir string) {
			// A byte of row 1000's payload, found in the database file.
			db, err := os.ReadFile(filepath.Join(dir, "bench.db"))
			if err != nil {
				t.Fatal(err)
			}
			p := sha256.Sum256([]byte("twincrypt-1000"))
			i := bytes.Index(db, p[:])
			if i < 0 {
				t.Fatal("row 1000's payload not found in bench.db")
			}
			wlFlipByte(t, filepath.Join(dir, "bench.db"), int64(i+5))
		}, "verify: hash of the rows", ""},
		{&Git{}, "git.done", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, gitWork, "src", "net", "net.go"), 10)
		}, "md5: src/net/net.go", "git"},
		{&Git{}, "git.done", func(t *testing.T, dir string) {
			packs, _ := filepath.Glob(filepath.Join(dir, gitWork, ".git", "objects", "pack", "*.pack"))
			if len(packs) != 1 {
				t.Fatalf("%d packs after gc: %v", len(packs), packs)
			}
			fi, err := os.Stat(packs[0])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(packs[0], 0o644); err != nil { // git makes packs read-only
				t.Fatal(err)
			}
			wlFlipByte(t, packs[0], fi.Size()/2)
		}, "fsck", "git"},
		{&Build{}, "build.built", func(t *testing.T, dir string) {
			wlFlipByte(t, filepath.Join(dir, buildSrcDir, "obj", "u0003.o"), 100)
		}, "obj/u0003.o", "make"},
		{&Build{}, "build.built", func(t *testing.T, dir string) {
			if err := os.Remove(filepath.Join(dir, buildSrcDir, "libunits.a")); err != nil {
				t.Fatal(err)
			}
		}, "libunits.a", "make"},
	}
	for _, c := range cases {
		t.Run(c.point, func(t *testing.T) {
			if c.needs != "" {
				if _, err := exec.LookPath(c.needs); err != nil {
					t.Skipf("%s not installed", c.needs)
				}
			}
			if (c.w.Name() == "srctree" || c.w.Name() == "git") && goSrcDir() == "" {
				t.Skip("synthetic tree: no src/net/net.go")
			}
			env := wlEnv(t)
			called := false
			testVerifyHook = func(point, dir string) {
				if point == c.point {
					called = true
					c.corrupt(t, dir)
				}
			}
			defer func() { testVerifyHook = nil }()
			_, _, err := wlRun(t, c.w, env)
			if !called {
				t.Fatalf("%s: hook %s never called (err %v)", c.w.Name(), c.point, err)
			}
			if err == nil {
				t.Fatalf("%s: corrupted data passed verification", c.w.Name())
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("%s: error %q does not name %q", c.w.Name(), err, c.want)
			}
			t.Logf("%s: %v", c.w.Name(), err)
		})
	}
}

func TestPattern(t *testing.T) {
	pt := newPattern(99)
	// span and unit agree, also across the base's wrap-around.
	for _, off := range []int64{0, 3 * oneMiB, patternPeriod - 8192, 5 * patternPeriod} {
		got := append([]byte(nil), pt.span(off, 16384)...)
		if err := pt.check("f", got, off, nil); err != nil {
			t.Fatalf("span at %d: %v", off, err)
		}
		for k := int64(0); k < 4; k++ {
			if !bytes.Equal(got[k*patternUnit:(k+1)*patternUnit], pt.unit(off/patternUnit+k, 0)) {
				t.Fatalf("span at %d, unit %d differs from unit()", off, k)
			}
		}
	}
	// A unit at the wrong place, a stale generation, and units one period
	// apart (the same base bytes) are all caught by the stamp.
	u5 := append([]byte(nil), pt.unit(5, 0)...)
	if at := pt.unitDiff(u5, 6, 0); at < 0 || at >= patternStampSize {
		t.Errorf("unit 5 passed as unit 6 (diff at %d)", at)
	}
	if at := pt.unitDiff(u5, 5, 1); at < 0 {
		t.Error("generation 0 passed as generation 1")
	}
	if at := pt.unitDiff(u5, 5+unitsPerPeriod, 0); at != 0 && (at < 0 || at >= patternStampSize) {
		t.Errorf("unit 5 passed as the unit one period later (diff at %d)", at)
	}
	if pt.unitDiff(u5, 5, 0) != -1 {
		t.Error("unit 5 does not pass as itself")
	}
	u5[4000] ^= 1
	if at := pt.unitDiff(u5, 5, 0); at != 4000 {
		t.Errorf("flipped byte 4000, diff at %d", at)
	}
	err := pt.check("f", u5, 5*patternUnit, nil)
	if !errors.Is(err, errContent) || !strings.Contains(err.Error(), "f: 4 KiB unit 5 (offset 20480, generation 0) differs at byte 4000") {
		t.Errorf("check: %v", err)
	}
}

func TestParseBonnieCSV(t *testing.T) {
	// bonnie++ 2.00a -s 64 -r 32 -n 4 -f -q on a disk: the I/O phases
	// were too fast to time ("+++++").
	const line = "1.98,2.00a,vm,1,1796014939,64M,,8192,5,,,+++++,+++,+++++,+++,,,+++++,+++,+++++,+++,4,,,,,3154,80,+++++,+++,+++++,+++,4776,75,+++++,+++,+++++,+++,,65us,97us,,245us,16091us,5465us,217us,4440us,8998us,14us,4036us\n"
	res, err := parseBonnieCSV("some text\n" + line)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics["create_per_s"] != 3154 || res.Metrics["rand_create_per_s"] != 4776 {
		t.Errorf("metrics %v", res.Metrics)
	}
	if _, ok := res.Metrics["rewrite_MiBps"]; ok {
		t.Errorf("+++++ parsed as a number: %v", res.Metrics)
	}
	if !strings.Contains(res.Note, "rewrite_MiBps") || !strings.Contains(res.Note, "2.00a") {
		t.Errorf("note %q", res.Note)
	}
	const timed = "1.98,2.00a,twincrypt,1,1,3000M,,8192,5,,,120000,20,51200,12,,,300000,15,1234.5,10,16,,,,,30000,50,90000,40,25000,30,12000,20,80000,30,20000,25,,1us,2us,,3us,4us,5us,6us,7us,8us,9us,10us"
	res, err = parseBonnieCSV(timed)
	if err != nil {
		t.Fatal(err)
	}
	if res.Metrics["rewrite_MiBps"] != 50 || res.Metrics["write_MiBps"] != 120000.0/1024 || res.Metrics["stat_per_s"] != 90000 {
		t.Errorf("metrics %v", res.Metrics)
	}
	if _, err := parseBonnieCSV("no csv here"); err == nil {
		t.Error("no CSV line accepted")
	}
}

func TestParseFIO(t *testing.T) {
	const out = `note: both iodepth >= 1 and synchronous I/O engine are selected
{"fio version": "fio-3.33", "jobs": [{"jobname": "randrw", "error": 0, "job_runtime": 3000,
 "read": {"iops": 1000.5, "total_ios": 3001, "io_bytes": 12292096, "clat_ns": {"percentile": {"50.000000": 2000, "99.000000": 95000}}},
 "write": {"iops": 430.0, "total_ios": 1290, "io_bytes": 5283840, "clat_ns": {"percentile": {"50.000000": 4000, "99.000000": 120000}}}}]}`
	res, err := parseFIO([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if res.Wall != 3*time.Second || res.Ops != 4291 || res.Metrics["read_p99_us"] != 95 || res.Metrics["write_p50_us"] != 4 || res.Metrics["read_iops"] != 1000.5 {
		t.Errorf("%+v", res)
	}
	if _, err := parseFIO([]byte(`{"jobs": [{"error": 5}]}`)); err == nil {
		t.Error("job error accepted")
	}
}

// TestSrcTreeHiddenEntries: at size default the tarball is all of Go's
// src, hidden directories and files included (src/embed/internal/
// embedtest/testdata/.hidden); the listing counts them like the tarball
// does, with ls and with the Go implementation.
func TestSrcTreeHiddenEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("untars all of Go's src")
	}
	root := goSrcDir()
	if root == "" {
		t.Skip("skipping: Go's src not found")
	}
	if _, err := os.Stat(filepath.Join(root, "embed", "internal", "embedtest", "testdata", ".hidden")); err != nil {
		t.Skipf("skipping: this Go's src has no hidden test data: %v", err)
	}
	for _, noProg := range []bool{false, true} {
		env := wlEnv(t)
		env.Size = SizeDefault
		res, dir, err := wlRun(t, &SrcTree{noPrograms: noProg}, env)
		if err != nil {
			t.Fatalf("noPrograms=%v: %v", noProg, err)
		}
		wlCheckResult(t, "srctree", res, dir)
	}
}
