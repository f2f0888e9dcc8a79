package integration

import (
	"bytes"
	"context"
	"encoding/csv"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/integration/bench"
)

// TestBenchEndToEnd runs the harness as a user does, through the binary,
// at the tiny size on our own targets and the dm-crypt path, and checks
// that every workload ran and verified its data on every target, that the
// outputs are complete, and that nothing is left mounted or attached.
func TestBenchEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the whole bench at the tiny size (about a minute)")
	}
	if os.Geteuid() != 0 {
		t.Skip("the bench end-to-end test needs root (tmpfs, loop devices, drop_caches)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine: the bench cannot mount its FUSE targets")
	}
	bin := filepath.Join(t.TempDir(), "twincrypt")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/twincrypt/twincrypt/cmd/twincrypt").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	// The bench makes its work directory in $TMPDIR: a directory of this
	// test's own, so that what it leaves behind can be told apart from
	// what other tests running at the same time have mounted.
	tmp := t.TempDir()
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "bench", "--size", "tiny", "--repeat", "1",
		"--targets", "native,twin,crypt-xts,crypt-cbc,dmcrypt", "--workloads", "all", "--out", out)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("bench ran %v\n%s", time.Since(start).Round(time.Second), stdout.String())
	if err != nil {
		t.Fatalf("bench: %v\nstderr:\n%s", err, stderr.String())
	}

	res, err := bench.ReadResults(filepath.Join(out, bench.JSONFile))
	if err != nil {
		t.Fatal(err)
	}
	// The dm-crypt path is there, under its variant's name, or skipped
	// with the reason its Available gave.
	targets := []string{"native", "twin", "crypt-xts", "crypt-cbc"}
	dm := ""
	for _, tg := range res.Targets {
		if strings.HasPrefix(tg.Name, "dmcrypt-") {
			dm = tg.Name
		}
	}
	for _, s := range res.Skipped {
		if strings.HasPrefix(s.Name, "dmcrypt") {
			t.Logf("dm-crypt skipped here: %s", s.Reason)
			if s.Reason == "" {
				t.Error("dm-crypt skipped without a reason")
			}
		} else {
			t.Errorf("target %s skipped: %s", s.Name, s.Reason)
		}
	}
	switch dm {
	case "dmcrypt-kernel", "dmcrypt-userspace":
		targets = append(targets, dm)
	case "":
		if len(res.Skipped) == 0 {
			t.Error("dm-crypt neither ran nor was skipped")
		}
	default:
		t.Errorf("dm-crypt target labelled %q", dm)
	}
	var got []string
	for _, tg := range res.Targets {
		got = append(got, tg.Name)
		if tg.SetupError != "" {
			t.Errorf("setup of %s failed: %s", tg.Name, tg.SetupError)
		}
	}
	if strings.Join(got, ",") != strings.Join(targets, ",") {
		t.Errorf("targets %q, want %q", got, targets)
	}

	// Every workload on every target: completed and verified. A workload
	// this machine cannot run at all (ErrSkipped) must be skipped alike
	// on every target.
	workloads := bench.Workloads()
	if len(res.Workloads) != len(workloads) || len(res.Runs) != len(workloads)*len(targets) {
		t.Fatalf("%d workloads and %d runs, want %d and %d", len(res.Workloads), len(res.Runs), len(workloads), len(workloads)*len(targets))
	}
	skipped := map[string]int{}
	for _, r := range res.Runs {
		switch {
		case r.Skipped:
			skipped[r.Workload]++
		case !r.OK():
			t.Errorf("%s on %s failed: %s", r.Workload, r.Target, r.Error)
		case !r.Verified:
			t.Errorf("%s on %s did not verify its data", r.Workload, r.Target)
		case r.WallS <= 0:
			t.Errorf("%s on %s: wall time %v", r.Workload, r.Target, r.WallS)
		}
		fuse := r.Target == "twin" || strings.HasPrefix(r.Target, "crypt-") || r.Target == "dmcrypt-userspace"
		if fuse && r.OK() && (r.Stats == nil || len(r.Stats.Ops) == 0) {
			t.Errorf("%s on %s: no per-op statistics from the daemon", r.Workload, r.Target)
		}
	}
	for w, n := range skipped {
		if n != len(targets) {
			t.Errorf("%s skipped on %d of %d targets", w, n, len(targets))
		} else {
			t.Logf("%s skipped on this machine", w)
		}
	}

	// The terminal table: a column per target, a row per workload.
	table := stdout.String()
	for _, want := range append([]string{"Results: median", "Cost relative to native", "Cost relative to twin",
		"Daemon CPU seconds per GiB", "Per-operation latency"}, targets...) {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	for _, w := range workloads {
		if !strings.Contains(table, "\n"+w.Name()+" ") {
			t.Errorf("table has no row for %s", w.Name())
		}
	}

	report, err := os.ReadFile(filepath.Join(out, bench.ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"## Machine", "AES-NI", "Kernel: Linux", "## Set-up", "Size: tiny; repeats: 1",
		"## Results", "### Cost relative to native", "## Charts", "## Failures"} {
		if !bytes.Contains(report, []byte(want)) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	if dm != "" && !bytes.Contains(report, []byte("dm-crypt: "+dm)) {
		t.Errorf("report.md does not say which dm-crypt ran (%s)", dm)
	}
	f, err := os.Open(filepath.Join(out, bench.CSVFile))
	if err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(f).ReadAll()
	f.Close()
	if err != nil || len(rows) != 1+len(res.Runs) || strings.Join(rows[0], ",") != strings.Join(bench.CSVHeader, ",") {
		t.Errorf("results.csv: %d rows, %v", len(rows), err)
	}
	for _, name := range []string{bench.OverheadPNG, bench.LatencyPNG} {
		f, err := os.Open(filepath.Join(out, name))
		if err != nil {
			t.Error(err)
			continue
		}
		if _, err := png.Decode(f); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		f.Close()
	}

	// Nothing left behind: no mount, no loop device, no file.
	if m := linesWith(t, tmp, "cat", "/proc/self/mounts"); m != "" {
		t.Errorf("mounts left behind:\n%s", m)
	}
	if l := linesWith(t, tmp, "losetup", "-a"); l != "" {
		t.Errorf("loop devices left behind:\n%s", l)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("%d entries left in the bench's TMPDIR", len(left))
	}
}

// linesWith returns the lines of a command's output that mention dir.
func linesWith(t *testing.T, dir string, name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Logf("%s: %v", name, err)
	}
	var mine []string
	for _, l := range strings.Split(string(out), "\n") {
		if strings.Contains(l, dir) {
			mine = append(mine, l)
		}
	}
	return strings.Join(mine, "\n")
}
