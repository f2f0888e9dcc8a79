package fs

// TestSoak runs the differential generator of diff_test.go as 16
// concurrent clients, each on its own subtree of one set of mounts
// (aes-xts, aes-cbc, the twin and a plain directory), plus writers and
// readers sharing files, for -soak (make soak). It fails on any difference,
// on memory or goroutines that grow without bound, and on a client that
// makes no progress for a minute (a deadlock: every goroutine is printed).

import (
	"bufio"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	soakClients = 16
	// soakStall is how long a client may go without finishing an op.
	soakStall = 60 * time.Second
	// soakHistory bounds the ops kept per client for reports and replays:
	// an hour's history must not look like a leak.
	soakHistory = 20000
)

// soakSample is one reading of the process.
type soakSample struct {
	at         time.Duration
	rss        int64 // bytes
	goroutines int
}

// vmRSS is this process's resident set (VmRSS of /proc/self/status).
func vmRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// soakWorker is what the watchdog knows of one worker.
type soakWorker struct {
	name string
	last atomic.Int64 // unix ns when it last finished an op
	ops  atomic.Int64
	cur  atomic.Value // string: the op in progress
}

func (w *soakWorker) doing(what string) { w.cur.Store(what) }

func (w *soakWorker) done() {
	w.ops.Add(1)
	w.last.Store(time.Now().UnixNano())
}

// soakFailure is a difference seen by a client, with its history since
// its subtree was last reset.
type soakFailure struct {
	worker    string
	seed      int64
	f         *diffFailure
	ops       []diffOp
	truncated bool
}

func TestSoak(t *testing.T) {
	if *flagSoak <= 0 {
		t.Skip("soak test: runs only with -soak=DURATION (make soak: go test -run 'TestDifferential|TestSoak' -timeout 2h ./fs -args -soak=1h)")
	}
	requireFUSE(t)
	seed := diffSeed()
	t.Logf("seed %d, %d clients for %v", seed, soakClients, *flagSoak)
	env := newDiffEnv(t, *flagDiffNative, variants[0], variants[1])
	start := time.Now()
	stop := make(chan struct{})
	var (
		mu       sync.Mutex
		failures []soakFailure
		nFail    atomic.Int64
		wg       sync.WaitGroup
		workers  []*soakWorker
	)
	fail := func(sf soakFailure) {
		nFail.Add(1)
		mu.Lock()
		if len(failures) < 50 {
			failures = append(failures, sf)
		}
		mu.Unlock()
	}
	stopped := func() bool {
		select {
		case <-stop:
			return true
		default:
			return false
		}
	}
	for i := 0; i < soakClients; i++ {
		w := &soakWorker{name: fmt.Sprintf("s%02d", i)}
		w.done()
		workers = append(workers, w)
		wg.Add(1)
		go func(i int, w *soakWorker) {
			defer wg.Done()
			for gen := 0; !stopped(); gen++ {
				cseed := seed + int64(i) + 1 + int64(gen)*1000
				if !soakClient(env, w, cseed, stopped, fail) {
					return
				}
			}
		}(i, w)
	}
	// Writers and readers sharing one file, round after round.
	shared := &soakWorker{name: "shared"}
	shared.done()
	workers = append(workers, shared)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for k := int64(0); !stopped(); k++ {
			shared.doing(fmt.Sprintf("shared-file round %d", k))
			if err := runSharedFile(env, "shared", 4, 2, 150, seed+k); err != nil {
				fail(soakFailure{worker: "shared", seed: seed + k, f: &diffFailure{sig: "shared", msg: err.Error()}})
			}
			shared.done()
		}
	}()
	clientsDone := make(chan struct{})
	go func() {
		wg.Wait()
		close(clientsDone)
	}()

	// Sample every 10 s (more often for short runs, so that quarters mean
	// something), watch for stalls every second.
	interval := min(10*time.Second, max(time.Second, *flagSoak/30))
	var samples []soakSample
	sample := func() {
		samples = append(samples, soakSample{time.Since(start), vmRSS(), runtime.NumGoroutine()})
	}
	sample()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	nextSample := start.Add(interval)
	deadline := start.Add(*flagSoak)
	stalled := false
	var stalledAt time.Time
loop:
	for {
		select {
		case <-clientsDone:
			break loop
		case now := <-tick.C:
			if !now.Before(nextSample) {
				sample()
				nextSample = nextSample.Add(interval)
			}
			if !stalled {
				for _, w := range workers {
					if idle := now.Sub(time.Unix(0, w.last.Load())); idle > soakStall {
						stalled, stalledAt = true, now
						soakWatchdog(t, env, w, idle)
						break
					}
				}
			}
			if stalled || !now.Before(deadline) {
				select {
				case <-stop:
				default:
					close(stop)
				}
			}
			if stalled && now.Sub(stalledAt) > 30*time.Second {
				t.Errorf("workers still stuck 30 s after the watchdog aborted the mounts: giving up on them")
				break loop
			}
		}
	}
	elapsed := time.Since(start)
	sample()

	// After the clients, everything must still agree.
	if !stalled {
		all := newDiffClient(env, "", 1<<20)
		if f := all.apply(diffOp{kind: dCheck}); f != nil {
			t.Errorf("final full comparison: %s", f.msg)
		}
	}

	var ops int64
	for _, w := range workers {
		ops += w.ops.Load()
	}
	var peakRSS int64
	peakG, minG := 0, samples[0].goroutines
	for _, s := range samples {
		peakRSS = max(peakRSS, s.rss)
		peakG = max(peakG, s.goroutines)
		minG = min(minG, s.goroutines)
	}
	var trace strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&trace, "\t%8v  RSS %7.1f MiB  goroutines %4d\n", s.at.Round(time.Second), float64(s.rss)/(1<<20), s.goroutines)
	}
	t.Logf("SOAK: %v, %d workers, %d ops (%.0f/s), %.2f GiB compared against the twin, %d failures; peak RSS %.1f MiB; goroutines %d..%d (start %d, end %d)\nsamples:\n%s",
		elapsed.Round(time.Second), len(workers), ops, float64(ops)/elapsed.Seconds(), float64(env.compared.Load())/(1<<30), nFail.Load(),
		float64(peakRSS)/(1<<20), minG, peakG, samples[0].goroutines, samples[len(samples)-1].goroutines, trace.String())

	soakGrowth(t, samples)

	mu.Lock()
	defer mu.Unlock()
	for k, sf := range failures {
		who := fmt.Sprintf("soak worker %s (generator seed %d) of seed %d", sf.worker, sf.seed, seed)
		if sf.ops == nil {
			t.Errorf("DIFFERENCE, %s: %s", who, sf.f.msg)
			continue
		}
		tail := sf.ops
		if len(tail) > 100 {
			tail = tail[len(tail)-100:]
		}
		if k >= 3 || sf.truncated || stalled {
			t.Errorf("DIFFERENCE, %s: %s\nlast %d ops:\n%s", who, sf.f.msg, len(tail), formatOps(tail))
			continue
		}
		// Replay the client's history alone, with each cipher, to see
		// whether concurrency mattered, and shrink it if it did not.
		replayed := false
		for _, v := range variants[:2] {
			if f := replayOps(t, v, *flagDiffNative, sf.ops); f != nil && f.sig == sf.f.sig {
				reportFailure(t, v, who, sf.ops, sf.f, true)
				replayed = true
				break
			}
		}
		if !replayed {
			t.Errorf("DIFFERENCE, %s: %s\n(does not happen when the client's %d ops are replayed alone: concurrency matters)\nlast %d ops:\n%s",
				who, sf.f.msg, len(sf.ops), len(tail), formatOps(tail))
		}
	}
}

// soakClient runs one generator on subtree w.name until stop or a
// failure; after a failure the subtree is removed everywhere and it
// returns true to start afresh, false when it cannot go on.
func soakClient(env *diffEnv, w *soakWorker, seed int64, stopped func() bool, fail func(soakFailure)) bool {
	c := newDiffClient(env, w.name, 1<<20)
	c.maxAlloc = 16 << 20
	defer c.closeFds()
	rng := rand.New(rand.NewSource(seed))
	truncated := false
	every := max(*flagDiffEvery, 1) * 2
	var f *diffFailure
	for step := 0; f == nil; step++ {
		var o diffOp
		switch {
		case step == 0:
			o = diffOp{kind: dMkdir, path: w.name, mode: 0755}
		case stopped():
			o = diffOp{kind: dCheck}
		case step%every == 0:
			o = diffOp{kind: dCheck}
		default:
			o = c.gen(rng)
		}
		w.doing(o.String())
		f = c.apply(o)
		w.done()
		if len(c.ops) > soakHistory {
			c.ops = append([]diffOp(nil), c.ops[len(c.ops)-soakHistory/2:]...)
			truncated = true
		}
		if f == nil && o.kind == dCheck && stopped() {
			return false
		}
	}
	c.closeFds()
	fail(soakFailure{worker: w.name, seed: seed, f: f, ops: append([]diffOp(nil), c.ops...), truncated: truncated})
	w.doing("removing the subtree after a difference")
	for i := range env.mounts {
		if err := os.RemoveAll(env.abs(i, w.name)); err != nil {
			fail(soakFailure{worker: w.name, seed: seed, f: &diffFailure{sig: "reset", msg: fmt.Sprintf("cannot reset subtree %s on %s: %v", w.name, env.names[i], err)}})
			return false
		}
	}
	w.done()
	return true
}

// soakWatchdog reports a stalled worker with every goroutine's stack, then
// aborts the FUSE connections (a forced unmount of a FUSE mount aborts
// it), so that the stuck system calls return and the test can end.
func soakWatchdog(t *testing.T, env *diffEnv, w *soakWorker, idle time.Duration) {
	buf := make([]byte, 64<<20)
	n := runtime.Stack(buf, true)
	cur, _ := w.cur.Load().(string)
	t.Errorf("WATCHDOG: worker %s made no progress for %v, in: %s\nall goroutines:\n%s", w.name, idle.Round(time.Second), cur, buf[:n])
	for _, m := range env.mounts {
		if m.srv != nil && !m.unmounted {
			if err := unix.Unmount(m.mnt, unix.MNT_FORCE); err != nil {
				t.Logf("abort %s: %v", m.mnt, err) // aborted but busy: cleanup retries
			} else {
				m.unmounted = true
			}
		}
	}
}

// soakGrowth fails when memory or goroutines grew without bound: the
// average of the last quarter of the samples above twice the first
// quarter's plus some slack.
func soakGrowth(t *testing.T, samples []soakSample) {
	q := len(samples) / 4
	if q < 2 {
		t.Logf("only %d samples: too few to judge growth", len(samples))
		return
	}
	avg := func(ss []soakSample) (rss float64, g float64) {
		for _, s := range ss {
			rss += float64(s.rss)
			g += float64(s.goroutines)
		}
		return rss / float64(len(ss)), g / float64(len(ss))
	}
	r0, g0 := avg(samples[:q])
	r1, g1 := avg(samples[len(samples)-q:])
	const rssSlack, gSlack = 64 << 20, 50
	if r1 > 2*r0+rssSlack {
		t.Errorf("RSS grows without bound: last quarter %.1f MiB on average, first quarter %.1f MiB", r1/(1<<20), r0/(1<<20))
	}
	if g1 > 2*g0+gSlack {
		t.Errorf("goroutines grow without bound: last quarter %.0f on average, first quarter %.0f", g1, g0)
	}
}
