// Package bench is twincrypt's harness: it runs real workloads on every
// layer — the plain directory, the passthrough twin, the encrypted mounts,
// the dm-crypt path, ext4 on a loop device, and peer filesystems when
// installed — interleaved and repeated, and reports what each layer costs.
//
// A Target is one layer: it sets itself up under a work directory, mounts,
// gives the directory where workloads run, and unmounts. A Workload is one
// job (a real program or a faithful Go implementation) that runs in such a
// directory and verifies the data it wrote. The Runner interleaves targets
// per repeat (A B C A B C …) so that drift on a noisy machine hits all of
// them alike.
package bench

import (
	"context"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// Size scales every workload.
type Size string

const (
	SizeTiny    Size = "tiny"    // seconds in all: for tests
	SizeSmall   Size = "small"   // the default run: about 3 minutes on 2 cores
	SizeDefault Size = "default" // closer to the articles' sizes
	SizeLarge   Size = "large"   // the articles' sizes (1 GiB files, Go's whole src)
)

// Env is what a workload may use besides its directory.
type Env struct {
	Size Size
	// Cache is a directory outside every target where workloads keep
	// inputs they build once (a source tarball, a WAV file) and reuse.
	Cache string
	// DropCaches empties the page cache (as root: sync + drop_caches);
	// workloads that measure cold reads call it between writing and
	// reading. It returns an error where that is impossible; the workload
	// then records that its read was warm.
	DropCaches func() error
}

// Result is one run of one workload on one target.
type Result struct {
	// Wall is the time of the measured part.
	Wall time.Duration
	// Bytes moved (read + written) by the measured part, for MiB/s and
	// CPU seconds per GiB; 0 where it does not apply.
	Bytes int64
	// Ops counts the workload's operations (files, transactions, I/Os).
	Ops int64
	// WorkloadCPU is the user+system CPU time of the workload itself
	// (child processes included).
	WorkloadCPU time.Duration
	// Metrics are extra numbers by name ("read_iops", "read_p99_us",
	// "write_MiBps", ...).
	Metrics map[string]float64
	// Verified is true when the workload checked everything it wrote and
	// found it intact. A workload that cannot verify returns an error.
	Verified bool
	// Note says how the run differs from the plan ("warm read: could not
	// drop caches", "fio not installed: Go implementation").
	Note string
}

// Workload is one job of the harness.
type Workload interface {
	// Name is short and stable ("seqwrite", "untar", ...): it keys
	// results and the --workloads flag.
	Name() string
	// Describe is one line for the report.
	Describe() string
	// Prepare builds shared inputs in env.Cache once per bench run.
	Prepare(ctx context.Context, env *Env) error
	// Run runs the workload in dir (empty, on the target) and verifies
	// what it wrote. It leaves dir empty again when it can.
	Run(ctx context.Context, dir string, env *Env) (Result, error)
}

// Target is one layer under test.
type Target interface {
	// Name labels results ("native", "twin", "crypt-xts", "crypt-cbc",
	// "dmcrypt-kernel" or "dmcrypt-userspace", "ext4loop", "gocryptfs", …).
	Name() string
	// Available returns nil, or one line saying why the target is skipped
	// (a missing program, no root, no /dev/fuse).
	Available() error
	// Setup creates the target's state under work (lower directories,
	// volumes, images); called once per bench run.
	Setup(ctx context.Context, work string) error
	// Mount makes the target ready and returns the directory workloads
	// run in. Called once per workload run, so that every run starts cold.
	Mount(ctx context.Context) (string, error)
	// Unmount undoes Mount.
	Unmount(ctx context.Context) error
	// Cleanup removes everything Setup made; safe to call after a failure.
	Cleanup() error
	// DaemonCPU returns the CPU time used so far by the process serving
	// the target (our FUSE daemon, a peer's daemon); 0 for kernel targets.
	DaemonCPU() time.Duration
	// Stats returns the per-operation latency of the target's last Mount
	// (our FUSE targets), or nil.
	Stats() *measure.Snapshot
}
