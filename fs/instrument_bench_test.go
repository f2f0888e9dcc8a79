package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// benchDir returns a directory on tmpfs when the machine has one, so that
// disk noise stays out of the comparison.
func benchDir(b *testing.B) string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "twincrypt-bench-")
		if err == nil {
			b.Cleanup(func() { os.RemoveAll(d) })
			return d
		}
	}
	return b.TempDir()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkInstrumentCost measures what the instrument costs: the same
// encrypted volume kind mounted three times — timing off, histograms only,
// histograms plus a full op log — and a 1 GiB sequential write (1 MiB
// blocks, fsync) and 10 000 small files created, stat'ed and deleted on
// each, interleaved per round (A B C A B C …) so drift hits all alike.
// Medians of TWINCRYPT_BENCH_ROUNDS rounds (default 3) are reported as
// ratios to "off". Run with:
//
//	go test -run x -bench InstrumentCost -benchtime 1x ./fs
func BenchmarkInstrumentCost(b *testing.B) {
	requireFUSE(b)
	sizeMiB := envInt("TWINCRYPT_BENCH_MB", 1024)
	files := envInt("TWINCRYPT_BENCH_FILES", 10000)
	rounds := envInt("TWINCRYPT_BENCH_ROUNDS", 3)
	dir := benchDir(b)

	modes := []string{"off", "hist", "hist+log"}
	mnts := map[string]string{}
	for _, mode := range modes {
		tm := newVolume(b, variants[0])
		tm.lower = filepath.Join(dir, mode+"-lower")
		os.Mkdir(tm.lower, 0755)
		// Move the config made by newVolume onto tmpfs.
		tm2 := newVolume(b, variants[0])
		ents, _ := os.ReadDir(tm2.lower)
		for _, e := range ents {
			data, _ := os.ReadFile(filepath.Join(tm2.lower, e.Name()))
			os.WriteFile(filepath.Join(tm.lower, e.Name()), data, 0600)
		}
		tm.cfg, tm.master = tm2.cfg, tm2.master
		var rec *measure.Recorder
		if mode != "off" {
			rec = measure.NewRecorder(mode)
		}
		if mode == "hist+log" {
			l, err := measure.OpenOpLog(filepath.Join(dir, "op.log"), measure.OpLogOptions{Mount: mode})
			if err != nil {
				b.Fatal(err)
			}
			rec.SetOpLog(l)
			b.Cleanup(func() {
				l.Close()
				b.Logf("op log: %d lines, %d dropped", l.Lines(), l.Dropped())
			})
		}
		tm.mount(b, func(o *Options) { o.Recorder = rec })
		mnts[mode] = tm.mnt
	}

	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(i * 7)
	}
	seqwrite := func(mnt string) time.Duration {
		p := filepath.Join(mnt, "seq")
		t0 := time.Now()
		f, err := os.Create(p)
		if err != nil {
			b.Fatal(err)
		}
		for i := 0; i < sizeMiB; i++ {
			if _, err := f.Write(block); err != nil {
				b.Fatal(err)
			}
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
		f.Close()
		d := time.Since(t0)
		os.Remove(p)
		return d
	}
	smallfiles := func(mnt string) time.Duration {
		d := filepath.Join(mnt, "small")
		os.Mkdir(d, 0755)
		t0 := time.Now()
		for i := 0; i < files; i++ {
			if err := os.WriteFile(filepath.Join(d, strconv.Itoa(i)), block[:100], 0644); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < files; i++ {
			if _, err := os.Stat(filepath.Join(d, strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
		}
		for i := 0; i < files; i++ {
			if err := os.Remove(filepath.Join(d, strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	}

	results := map[string][]time.Duration{}
	b.ResetTimer()
	for r := 0; r < rounds; r++ {
		for _, mode := range modes {
			results["seqwrite/"+mode] = append(results["seqwrite/"+mode], seqwrite(mnts[mode]))
		}
		for _, mode := range modes {
			results["smallfiles/"+mode] = append(results["smallfiles/"+mode], smallfiles(mnts[mode]))
		}
	}
	b.StopTimer()
	median := func(ds []time.Duration) time.Duration {
		s := append([]time.Duration(nil), ds...)
		sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
		return s[len(s)/2]
	}
	for _, w := range []string{"seqwrite", "smallfiles"} {
		off := median(results[w+"/off"])
		for _, mode := range modes {
			m := median(results[w+"/"+mode])
			b.ReportMetric(m.Seconds(), w+"-"+mode+"-s")
			if mode != "off" {
				b.ReportMetric(float64(m)/float64(off), w+"-"+mode+"/off")
			}
			b.Logf("%-10s %-8s median %7.3fs  all %v  ratio to off %.3f", w, mode, m.Seconds(), results[w+"/"+mode], float64(m)/float64(off))
		}
	}
	b.Logf("%s", fmt.Sprintf("seqwrite %d MiB, smallfiles %d, rounds %d", sizeMiB, files, rounds))
}
