package kvm

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/integration/bench"
)

// vmBenchTargets are the targets the VM runs by default: the kernel's
// dm-crypt and eCryptfs, which this host kernel lacks, beside our mounts.
// dmcrypt-userspace runs in the host's own bench; in the VM (a loop device
// on a FUSE file, all under TCG) it costs minutes per run, so it is run
// there only when asked: $TWINCRYPT_VM_BENCH_TARGETS and
// $TWINCRYPT_VM_BENCH_WORKLOADS (comma separated, "all": every workload)
// override the defaults, $TWINCRYPT_VM_BENCH_MINUTES the time bound.
var (
	vmBenchTargets   = []string{"native", "dmcrypt-kernel", "crypt-xts", "twin", "ecryptfs"}
	vmBenchWorkloads = []string{"seqwrite", "copytree"}
)

func envList(name string, def []string) []string {
	if v := os.Getenv(name); v != "" {
		return strings.Split(v, ",")
	}
	return def
}

// buildTwincrypt builds the binary into dir (the share: the guest runs it).
func buildTwincrypt(t *testing.T, dir string) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go toolchain to build twincrypt for the VM")
	}
	exe := filepath.Join(dir, "twincrypt")
	out, err := exec.Command("go", "build", "-o", exe, "github.com/twincrypt/twincrypt/cmd/twincrypt").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return exe
}

// TestBenchInVM runs `twincrypt bench --size tiny` with the kernel
// targets in the VM, on an ext4 scratch disk, and checks that every target
// ran every workload without a failure: the kernel targets are code that
// has run. $TWINCRYPT_VM_BENCH_OUT keeps the report there.
func TestBenchInVM(t *testing.T) {
	k := testKernel(t)
	share := t.TempDir()
	buildTwincrypt(t, share)
	targets := envList("TWINCRYPT_VM_BENCH_TARGETS", vmBenchTargets)
	workloads := "--workloads " + strings.Join(envList("TWINCRYPT_VM_BENCH_WORKLOADS", vmBenchWorkloads), ",")
	if workloads == "--workloads all" {
		workloads = ""
	}
	minutes := 14
	if m, err := strconv.Atoi(os.Getenv("TWINCRYPT_VM_BENCH_MINUTES")); err == nil && m > 0 {
		minutes = m
	}
	script := `set -e
mkfs.ext4 -q "$SCRATCH"
mkdir -p /tmp/disk
mount "$SCRATCH" /tmp/disk
./twincrypt bench --size tiny --repeat 1 --peers=false --targets ` + strings.Join(targets, ",") + ` ` + workloads + ` --on /tmp/disk --out "$SHARE/report"
umount /tmp/disk
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(minutes+1)*time.Minute)
	defer cancel()
	res, err := Run(ctx, k, script, Options{Share: share, ScratchMiB: 2048, MemMiB: 1536, Timeout: time.Duration(minutes) * time.Minute, Console: consoleLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest %s under %s: boot %v, whole run %v", res.Release, res.Accel, res.Boot.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond))
	t.Logf("bench output:\n%s", res.Output)
	if res.ExitStatus != 0 {
		t.Fatalf("twincrypt bench in the VM: exit status %d", res.ExitStatus)
	}
	if out := os.Getenv("TWINCRYPT_VM_BENCH_OUT"); out != "" {
		if b, err := exec.Command("cp", "-r", filepath.Join(share, "report"), out).CombinedOutput(); err != nil {
			t.Errorf("keep the report: %v %s", err, b)
		}
	}
	data, err := os.ReadFile(filepath.Join(share, "report", "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r bench.Results
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	for _, s := range r.Skipped {
		t.Errorf("target %s skipped in the VM: %s", s.Name, s.Reason)
	}
	if !strings.Contains(strings.ToLower(r.Machine.Kernel), res.Accel) {
		t.Errorf("the report's kernel line %q does not name the accelerator %s", r.Machine.Kernel, res.Accel)
	}
	ran := map[string]int{}
	for _, run := range r.Runs {
		if run.Error != "" {
			t.Errorf("%s on %s: %s", run.Workload, run.Target, run.Error)
			continue
		}
		ran[run.Target]++
	}
	for _, tg := range targets {
		if ran[tg] == 0 {
			t.Errorf("no successful run on %s", tg)
		}
	}
}
