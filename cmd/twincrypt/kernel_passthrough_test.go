package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/measure"
)

// TestKernelPassthroughLabelled: a twin mounted with --kernel-passthrough
// says so where its figures are read, since the kernel serves its reads
// and writes without the daemon: in mount's message, in stats and in
// stats --json. A twin without it carries no such label.
func TestKernelPassthroughLabelled(t *testing.T) {
	requireFUSE(t)
	for _, kernel := range []bool{true, false} {
		lower := tempDir(t)
		mnt := newMountpoint(t)
		unmountOnCleanup(t, mnt)
		args := []string{"mount", "--background", "--passthrough"}
		if kernel {
			args = append(args, "--kernel-passthrough")
		}
		r := twincrypt(t, "", append(args, lower, mnt)...)
		r.expectExit(t, 0, strings.Join(args, " "))
		if got := strings.Contains(r.stdout, measure.KernelPassthroughNote); got != kernel {
			t.Errorf("kernel passthrough %v: mount printed %q", kernel, r.stdout)
		}
		if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("data"), 0o600); err != nil {
			t.Fatal(err)
		}
		r = twincrypt(t, "", "stats", mnt)
		r.expectExit(t, 0, "stats")
		if got := strings.Contains(r.stdout, measure.KernelPassthroughNote); got != kernel {
			t.Errorf("kernel passthrough %v: stats printed %q", kernel, r.stdout)
		}
		r = twincrypt(t, "", "stats", "--json", mnt)
		r.expectExit(t, 0, "stats --json")
		var snap measure.Snapshot
		if err := json.Unmarshal([]byte(r.stdout), &snap); err != nil {
			t.Fatalf("stats --json: %v: %q", err, r.stdout)
		}
		if snap.KernelPassthrough != kernel {
			t.Errorf("kernel passthrough %v: stats --json says %v", kernel, snap.KernelPassthrough)
		}
		twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
		waitDaemonGone(t, mnt)
	}
}
