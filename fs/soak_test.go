package fs

// TestSoak runs the differential generator of diff_test.go as 16
// concurrent clients, each on its own subtree of one set of mounts
// (aes-xts and aes-cbc, each served by its own daemon process, and a plain
// directory), plus writers and readers sharing files, for -soak (make
// soak). It fails on any difference, on daemon memory or goroutines that
// grow without bound (or, in a run of half an hour or more, daemon RSS at
// the end above 1.2x its RSS at 10 minutes, or daemon goroutines not back
// to their number at the start), and on a client that makes no progress
// for a minute (a deadlock: every goroutine is printed, the daemons' too).

import (
	"bufio"
	"flag"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
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
	// soakHistory is the length of a client's generation: after that
	// many ops it checks its subtree, removes it everywhere and starts
	// afresh, so that the history it keeps for reports and replays (all
	// of the generation's ops) stays bounded: an hour's history must not
	// look like a leak (at 20,000 ops it did: it grew for the whole hour).
	soakHistory = 1000
)

var flagSoakProfile = flag.String("soak.profile", "", "TestSoak: write heap and goroutine profiles of the test and of each daemon into this directory every tenth of the run (at least a minute apart) and at its end")

// soakSample is one reading of the test process and of the daemons (d,
// summed over them).
type soakSample struct {
	at         time.Duration
	rss        int64 // bytes
	goroutines int
	heap       uint64 // HeapInuse
	d          daemonStats
}

// soakProfile writes the heap (after a GC) and goroutine profiles of this
// moment into -soak.profile.
func soakProfile(t *testing.T, tag string) {
	if *flagSoakProfile == "" {
		return
	}
	must(t, os.MkdirAll(*flagSoakProfile, 0755))
	runtime.GC()
	for _, p := range []string{"heap", "goroutine"} {
		f, err := os.Create(filepath.Join(*flagSoakProfile, "test-"+p+"-"+tag+".pprof"))
		must(t, err)
		must(t, pprof.Lookup(p).WriteTo(f, 0))
		must(t, f.Close())
	}
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
	worker string
	seed   int64
	f      *diffFailure
	ops    []diffOp
}

func TestSoak(t *testing.T) {
	if *flagSoak <= 0 {
		t.Skip("soak test: runs only with -soak=DURATION (make soak: go test -run 'TestDifferential|TestSoak' -timeout 2h ./fs -args -soak=1h)")
	}
	requireFUSE(t)
	seed := diffSeed()
	t.Logf("seed %d, %d clients for %v", seed, soakClients, *flagSoak)
	env, daemons := newSoakEnv(t, variants[0], variants[1])
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
	// Sample every 10 s (more often for short runs, so that quarters mean
	// something), watch for stalls every second.
	interval := min(10*time.Second, max(time.Second, *flagSoak/30))
	var samples []soakSample
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		s := soakSample{at: time.Since(start), rss: vmRSS(), goroutines: runtime.NumGoroutine(), heap: ms.HeapInuse}
		for _, d := range daemons {
			ds, err := d.stats()
			if err != nil {
				t.Errorf("daemon stats: %v", err)
			}
			s.d.add(ds)
		}
		samples = append(samples, s)
	}
	profile := func(tag string) {
		if *flagSoakProfile == "" {
			return
		}
		soakProfile(t, tag)
		for _, d := range daemons {
			if res := d.profile(*flagSoakProfile, tag); res != "ok" {
				t.Errorf("profile of daemon %s: %s", d.name, res)
			}
		}
	}
	sample()
	profile("0s")
	profEvery := max(*flagSoak/10, time.Minute)
	nextProf := start.Add(profEvery)

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
			if !now.Before(nextProf) {
				profile(now.Sub(start).Round(time.Second).String())
				nextProf = nextProf.Add(profEvery)
			}
			if !stalled {
				for _, w := range workers {
					if idle := now.Sub(time.Unix(0, w.last.Load())); idle > soakStall {
						stalled, stalledAt = true, now
						soakWatchdog(t, env, daemons, w, idle)
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
	// The daemons at rest: the clients' descriptors are closed, the
	// kernel has released what it will.
	time.Sleep(2 * time.Second)
	sample()
	profile("end")

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
	var trace strings.Builder
	for _, s := range samples {
		fmt.Fprintf(&trace, "\t%8v  daemons: RSS %7.1f MiB  heap %6.1f MiB  goroutines %4d  nodes %6d (dir IVs %5d, lower names %6d, open files %3d, dirs %3d)  test: RSS %7.1f MiB  heap %6.1f MiB  goroutines %4d\n",
			s.at.Round(time.Second), mib(s.d.rss), mib(s.d.heap), s.d.goroutines, s.d.nodes, s.d.dirIVs, s.d.lowerNames, s.d.files, s.d.dirHandles,
			mib(s.rss), mib(int64(s.heap)), s.goroutines)
	}
	daemonRSS := func(s soakSample) int64 { return s.d.rss }
	testRSS := func(s soakSample) int64 { return s.rss }
	// The figures: at start (mounted, before any load), at 10 minutes
	// and at the end of the load (means over a minute, RSS moves with
	// each GC cycle), at rest after the load.
	load := samples[:len(samples)-1]
	at10 := 10 * time.Minute
	if elapsed < 20*time.Minute {
		at10 = elapsed / 2 // a short run: its middle
	}
	first, last := samples[0], samples[len(samples)-1]
	d10, dEnd := meanRSS(load, at10-30*time.Second, at10+30*time.Second, daemonRSS), meanRSS(load, elapsed-time.Minute, elapsed, daemonRSS)
	t10, tEnd := meanRSS(load, at10-30*time.Second, at10+30*time.Second, testRSS), meanRSS(load, elapsed-time.Minute, elapsed, testRSS)
	t.Logf("samples:\n%s", trace.String())
	t.Logf("SOAK SUMMARY: %v, %d workers, %d ops (%.0f/s), %.2f GiB compared, %d failures; daemons (%d, summed) RSS start %.1f MiB, at %v %.1f MiB, at the end %.1f MiB (end/%v %.2f), at rest %.1f MiB, goroutines start %d, end %d, nodes at rest %d; test process RSS start %.1f MiB, at %v %.1f MiB, at the end %.1f MiB, goroutines start %d, end %d",
		elapsed.Round(time.Second), len(workers), ops, float64(ops)/elapsed.Seconds(), float64(env.compared.Load())/(1<<30), nFail.Load(),
		len(daemons), mib(first.d.rss), at10.Round(time.Second), d10, dEnd, at10.Round(time.Second), dEnd/d10, mib(last.d.rss),
		first.d.goroutines, last.d.goroutines, last.d.nodes,
		mib(first.rss), at10.Round(time.Second), t10, tEnd, first.goroutines, last.goroutines)

	soakGrowth(t, "daemon", load, daemonRSS, func(s soakSample) int { return s.d.goroutines })
	soakGrowth(t, "test process", load, testRSS, func(s soakSample) int { return s.goroutines })
	if elapsed >= 30*time.Minute && !stalled {
		if dEnd > 1.2*d10 {
			t.Errorf("daemon RSS at the end %.1f MiB > 1.2 x its RSS at %v, %.1f MiB", dEnd, at10, d10)
		}
	}
	// go-fuse reads requests with up to min(max(GOMAXPROCS, 2), 16)
	// goroutines, as the load had them, and once one was started its
	// Serve waits for them instead of reading itself (the goroutine
	// profiles of a 20-minute run at start and at rest differ by exactly
	// that): up to that many more than at the start is not a leak.
	readers := min(max(runtime.GOMAXPROCS(0), 2), 16)
	if !stalled && last.d.goroutines > first.d.goroutines+readers*len(daemons) {
		t.Errorf("daemon goroutines at rest after the load: %d, at the start %d (FUSE readers: up to %d more per daemon)", last.d.goroutines, first.d.goroutines, readers)
	}

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
		if k >= 3 || stalled {
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

// newSoakEnv is newDiffEnv with a plain directory as the reference and
// each of vs mounted by its own daemon process.
func newSoakEnv(t *testing.T, vs ...variant) (*diffEnv, []*soakDaemon) {
	e := &diffEnv{t: t, stats: &diffStats{}}
	dir := t.TempDir()
	must(t, os.Chmod(dir, 0755)) // as a mount's root: other users may enter
	e.names = append(e.names, "native")
	e.mounts = append(e.mounts, &testMount{lower: dir, mnt: dir, unmounted: true})
	var daemons []*soakDaemon
	for _, v := range vs {
		tm, d := mountSoakDaemon(t, v)
		e.names = append(e.names, v.name)
		e.mounts = append(e.mounts, tm)
		daemons = append(daemons, d)
	}
	e.mmap = startMmapHelper(t)
	return e, daemons
}

// soakClient runs one generator on subtree w.name until stop, a failure or
// the end of its generation (soakHistory ops); after a failure or at the
// end of a generation the subtree is removed everywhere and it returns
// true to start afresh, false when it cannot go on.
func soakClient(env *diffEnv, w *soakWorker, seed int64, stopped func() bool, fail func(soakFailure)) bool {
	c := newDiffClient(env, w.name, 1<<20)
	c.maxAlloc = 16 << 20
	defer c.closeFds()
	rng := rand.New(rand.NewSource(seed))
	every := max(*flagDiffEvery, 1) * 2
	var f *diffFailure
	for step := 0; f == nil; step++ {
		var o diffOp
		switch {
		case step == 0:
			o = diffOp{kind: dMkdir, path: w.name, mode: 0755}
		case stopped(), step >= soakHistory, step%every == 0:
			o = diffOp{kind: dCheck}
		default:
			o = c.gen(rng)
		}
		w.doing(o.String())
		f = c.apply(o)
		w.done()
		if f == nil && o.kind == dCheck && stopped() {
			return false
		}
		if f == nil && o.kind == dCheck && step >= soakHistory {
			// The end of a generation: start afresh.
			c.closeFds()
			w.doing("removing the subtree at the end of a generation")
			return soakReset(env, w, seed, fail)
		}
	}
	c.closeFds()
	fail(soakFailure{worker: w.name, seed: seed, f: f, ops: append([]diffOp(nil), c.ops...)})
	w.doing("removing the subtree after a difference")
	return soakReset(env, w, seed, fail)
}

// soakReset removes the subtree of w on every mount; false if it cannot.
// Each entry of the subtree removed counts as progress for the watchdog:
// a generation's tree, deep chains included, can take a while to remove
// on a loaded machine.
func soakReset(env *diffEnv, w *soakWorker, seed int64, fail func(soakFailure)) bool {
	for i := range env.mounts {
		top := env.abs(i, w.name)
		ents, _ := os.ReadDir(top)
		var err error
		for _, e := range ents {
			if err = os.RemoveAll(filepath.Join(top, e.Name())); err != nil {
				break
			}
			w.done()
		}
		if err == nil {
			err = os.RemoveAll(top)
		}
		if err != nil {
			fail(soakFailure{worker: w.name, seed: seed, f: &diffFailure{sig: "reset", msg: fmt.Sprintf("cannot reset subtree %s on %s: %v", w.name, env.names[i], err)}})
			return false
		}
		w.done()
	}
	return true
}

// soakWatchdog reports a stalled worker with every goroutine's stack, then
// kills the daemons with SIGQUIT (which prints theirs) and aborts the FUSE
// connections (a forced unmount of a FUSE mount aborts it), so that the
// stuck system calls return and the test can end.
func soakWatchdog(t *testing.T, env *diffEnv, daemons []*soakDaemon, w *soakWorker, idle time.Duration) {
	buf := make([]byte, 64<<20)
	n := runtime.Stack(buf, true)
	cur, _ := w.cur.Load().(string)
	t.Errorf("WATCHDOG: worker %s made no progress for %v, in: %s\nall goroutines (the daemons' follow on stderr):\n%s", w.name, idle.Round(time.Second), cur, buf[:n])
	for _, d := range daemons {
		d.abort()
	}
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

func mib[T int64 | uint64](b T) float64 { return float64(b) / (1 << 20) }

// meanRSS is the mean of rss over the samples taken from from to to (the
// sample nearest to from if none is).
func meanRSS(samples []soakSample, from, to time.Duration, rss func(soakSample) int64) float64 {
	var sum float64
	n := 0
	for _, s := range samples {
		if s.at >= from && s.at <= to {
			sum += float64(rss(s))
			n++
		}
	}
	if n == 0 {
		best := samples[0]
		for _, s := range samples {
			if (s.at - from).Abs() < (best.at - from).Abs() {
				best = s
			}
		}
		return mib(rss(best))
	}
	return sum / float64(n) / (1 << 20)
}

// soakGrowth fails when memory or goroutines grew without bound: the
// average of the last quarter of the samples above twice the first
// quarter's plus some slack.
func soakGrowth(t *testing.T, who string, samples []soakSample, rss func(soakSample) int64, goroutines func(soakSample) int) {
	q := len(samples) / 4
	if q < 2 {
		t.Logf("only %d samples: too few to judge growth", len(samples))
		return
	}
	avg := func(ss []soakSample) (r float64, g float64) {
		for _, s := range ss {
			r += float64(rss(s))
			g += float64(goroutines(s))
		}
		return r / float64(len(ss)), g / float64(len(ss))
	}
	r0, g0 := avg(samples[:q])
	r1, g1 := avg(samples[len(samples)-q:])
	const rssSlack, gSlack = 64 << 20, 50
	if r1 > 2*r0+rssSlack {
		t.Errorf("%s RSS grows without bound: last quarter %.1f MiB on average, first quarter %.1f MiB", who, r1/(1<<20), r0/(1<<20))
	}
	if g1 > 2*g0+gSlack {
		t.Errorf("%s goroutines grow without bound: last quarter %.0f on average, first quarter %.0f", who, g1, g0)
	}
}
