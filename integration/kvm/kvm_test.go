package kvm

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	kernelOnce sync.Once
	kernel     *Kernel
	kernelErr  error
)

// testKernel returns the cached kernel, preparing it once per test binary;
// it skips only where qemu or the kernel package is truly missing.
func testKernel(t *testing.T) *Kernel {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the kernel VM needs root (9p as root, the kernel cache in /var/cache)")
	}
	if err := Available(); err != nil {
		t.Skip(err)
	}
	kernelOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		kernel, kernelErr = PrepareKernel(ctx, os.Getenv("TWINCRYPT_VM_CACHE"))
	})
	if errors.Is(kernelErr, ErrNoKernel) {
		t.Skip(kernelErr)
	}
	if kernelErr != nil {
		t.Fatal(kernelErr)
	}
	return kernel
}

// consoleLog passes the console to the test log when -v.
type consoleLog struct{ t *testing.T }

func (c consoleLog) Write(p []byte) (int, error) {
	if testing.Verbose() {
		c.t.Log(strings.TrimRight(string(p), "\r\n"))
	}
	return len(p), nil
}

// TestRunCommand boots the VM once and checks what the kernel paths need:
// the guest kernel (not the host's), the modules, the host's binaries
// through the read-only root, the writable share both ways, a disk, and the
// command's exit status.
func TestRunCommand(t *testing.T) {
	k := testKernel(t)
	share := t.TempDir()
	if err := os.WriteFile(share+"/in", []byte("from the host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `set -e
uname -r
cat in
grep -w -e ecryptfs -e fuse -e 9p -e ext4 /proc/filesystems | awk '{print $NF}' | sort | tr '\n' ' '; echo
test -c /dev/mapper/control && echo dm-control
cryptsetup --version >/dev/null && echo cryptsetup-runs
if touch /usr/twincrypt-vm-rw-probe 2>/dev/null; then echo host-root-writable; fi
echo out >out
echo "disk $DISK0 scratch $SCRATCH"
test -b "$SCRATCH" && echo scratch-is-block
exit 7
`
	disk := share + "/disk.img"
	if err := sparse(disk, 4<<20); err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), k, script, Options{Share: share, Disks: []string{disk}, ScratchMiB: 16, Console: consoleLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("accel %s, boot %v, whole run %v, guest %s", res.Accel, res.Boot.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond), res.Release)
	if res.ExitStatus != 7 {
		t.Errorf("exit status %d, want 7; output:\n%s", res.ExitStatus, res.Output)
	}
	for _, want := range []string{k.Release + "\n", "from the host", "9p ecryptfs ext4 fuse", "dm-control", "cryptsetup-runs",
		"disk /dev/vda scratch /dev/vdb", "scratch-is-block"} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("output lacks %q:\n%s", want, res.Output)
		}
	}
	if strings.Contains(res.Output, "host-root-writable") {
		t.Error("the guest could write into the host's root")
	}
	if b, err := os.ReadFile(share + "/out"); err != nil || string(b) != "out\n" {
		t.Errorf("the guest's file in the share: %q, %v", b, err)
	}
}
