//go:build linux && amd64

package integration

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure/trace"
)

// BenchmarkTraceCost measures what kernel tracing costs, in one
// interleaved run per target: blocks of calls untraced ("off"), with the
// programs attached but this process not followed ("bystander": what
// every other process on the machine pays), and followed ("traced"),
// the three in a rotating order each round. It reports the median ns per
// call of each and the added ns; and, from the kernel's BPF run-time
// statistics (on during the blocks), the programs' own time per run: a
// bystander's (every run of the block with this process not followed)
// and a followed call's (the traced block's run time less its bystander
// runs, over this process's calls). The calls: stat on a native directory,
// and getxattr on our mounts (a FUSE round trip each: the kernel caches
// no extended attributes).
//
//	go test -run '^$' -bench TraceCost -benchtime 1x ./integration
func BenchmarkTraceCost(b *testing.B) {
	native := b.TempDir()
	file := filepath.Join(native, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		b.Fatal(err)
	}
	b.Run("native-stat", func(b *testing.B) {
		var st unix.Stat_t
		traceCost(b, native, func() { _ = unix.Stat(file, &st) })
	})
	for _, v := range []Variant{Variants[2], Variants[0]} {
		b.Run(v.Name+"-getxattr", func(b *testing.B) {
			vol := MountVariant(b, v)
			p := filepath.Join(vol.Mnt, "f")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 64)
			traceCost(b, vol.Mnt, func() { _, _ = unix.Getxattr(p, "user.cost", buf) })
		})
	}
}

func traceCost(b *testing.B, target string, call func()) {
	const rounds, calls = 7, 20000
	modes := []string{"off", "bystander", "traced"}
	ns := map[string][]float64{}
	progNs := map[string][]float64{} // "mode program" -> ns per run
	for r := 0; r < rounds; r++ {
		for i := range modes {
			mode := modes[(i+r)%len(modes)]
			var tr *trace.Tracer
			if mode != "off" {
				var err error
				tr, err = trace.New(trace.Options{})
				var u *trace.Unavailable
				if errors.As(err, &u) {
					b.Skip(err)
				}
				if err != nil {
					b.Fatal(err)
				}
				if _, err := tr.AddTarget(target); err != nil {
					b.Fatal(err)
				}
				if mode == "traced" {
					if err := tr.AddProcess(os.Getpid()); err != nil {
						b.Fatal(err)
					}
				}
			}
			for i := 0; i < calls/10; i++ { // warm
				call()
			}
			var stats io.Closer
			var before map[string]trace.ProgramStat
			if tr != nil {
				var err error
				if stats, err = trace.EnableRunStats(); err != nil {
					b.Fatal(err)
				}
				if before, err = tr.ProgramStats(); err != nil {
					b.Fatal(err)
				}
			}
			t0 := time.Now()
			for i := 0; i < calls; i++ {
				call()
			}
			ns[mode] = append(ns[mode], float64(time.Since(t0).Nanoseconds())/calls)
			if tr != nil {
				after, err := tr.ProgramStats()
				if err != nil {
					b.Fatal(err)
				}
				stats.Close()
				for name, a := range after {
					runs := float64(a.Runs - before[name].Runs)
					total := float64(a.Total - before[name].Total)
					if runs > 0 {
						progNs[mode+" "+name] = append(progNs[mode+" "+name], total)
						progNs[mode+" runs "+name] = append(progNs[mode+" runs "+name], runs)
					}
				}
				tr.Close()
			}
		}
	}
	med := func(v []float64) float64 {
		sort.Float64s(v)
		return v[len(v)/2]
	}
	off := med(ns["off"])
	for _, m := range modes {
		b.ReportMetric(med(ns[m]), "ns/call-"+m)
	}
	b.ReportMetric(med(ns["bystander"])-off, "ns-added-bystander")
	b.ReportMetric(med(ns["traced"])-off, "ns-added-traced")
	sum := func(v []float64) float64 {
		var t float64
		for _, x := range v {
			t += x
		}
		return t
	}
	for _, prog := range []string{"sys_enter", "sys_exit", "fuse_request_send", "fuse_request_end"} {
		bRuns, bNs := sum(progNs["bystander runs "+prog]), sum(progNs["bystander "+prog])
		if bRuns == 0 {
			continue
		}
		per := bNs / bRuns
		b.ReportMetric(per, "ns/run-bystander-"+prog)
		// The followed calls: the traced blocks' time less what their
		// other runs cost at the bystander rate, over this process's
		// calls (one run of each program per call).
		tRuns, tNs := sum(progNs["traced runs "+prog]), sum(progNs["traced "+prog])
		if n := float64(rounds * calls); tRuns >= n {
			b.ReportMetric((tNs-(tRuns-n)*per)/n, "ns/run-followed-"+prog)
		}
	}
}
