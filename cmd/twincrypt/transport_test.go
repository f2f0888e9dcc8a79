package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/measure"
)

// transportArgs is the --transport of the mounts the crash tests make:
// TWINCRYPT_TEST_TRANSPORT=uring runs them over FUSE over io_uring.
func transportArgs() []string {
	if tr := os.Getenv("TWINCRYPT_TEST_TRANSPORT"); tr != "" {
		return []string{"--transport", tr}
	}
	return nil
}

// mountTransport asks the daemon at mnt which transport it runs on.
func mountTransport(t *testing.T, mnt string) string {
	t.Helper()
	r := twincrypt(t, "", "stats", "--json", mnt)
	r.expectExit(t, 0, "stats --json")
	var s measure.Snapshot
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil {
		t.Fatalf("stats --json: %v\n%s", err, r.stdout)
	}
	return s.Transport
}

// requireTestTransport skips, saying why, when the run asked for the ring
// and the mount at mnt got /dev/fuse: a uring run must not pass on
// /dev/fuse.
func requireTestTransport(t *testing.T, mnt string) {
	t.Helper()
	if os.Getenv("TWINCRYPT_TEST_TRANSPORT") != "uring" {
		return
	}
	if tr := mountTransport(t, mnt); !strings.HasPrefix(tr, "uring") {
		t.Skipf("TWINCRYPT_TEST_TRANSPORT=uring but the mount runs on %s", tr)
	}
}

// TestMountTransport: --transport uring mounts over the ring where the
// kernel has it (stats and the log say so); a mount that names no
// transport (the daemon's default, auto) does where enable_uring is on,
// and otherwise runs on /dev/fuse saying why, without switching it on;
// dev mounts over /dev/fuse, and an unknown transport is a usage error.
func TestMountTransport(t *testing.T) {
	requireFUSE(t)
	r := twincrypt(t, "", "mount", "--passthrough", "--transport", "carrier-pigeon", t.TempDir(), newMountpoint(t))
	r.expectExit(t, exitUsage, "mount --transport carrier-pigeon")
	if !strings.Contains(r.stderr, "carrier-pigeon") {
		t.Errorf("usage error does not name the value: %q", r.stderr)
	}
	for _, tr := range []string{"dev", "uring", ""} {
		lower, mnt := t.TempDir(), newMountpoint(t)
		unmountOnCleanup(t, mnt)
		log := t.TempDir() + "/log"
		args := []string{"mount", "-b", "--passthrough", "--log", log, lower, mnt}
		if tr != "" {
			args = append(args, "--transport", tr)
		}
		twincrypt(t, "", args...).expectExit(t, 0, "mount")
		got := mountTransport(t, mnt)
		// auto leaves enable_uring as the administrator set it (off):
		// /dev/fuse, saying why.
		autoOff := tr == "" && strings.Contains(got, "administrator's setting")
		if tr != "dev" && !autoOff && !strings.HasPrefix(got, "uring") {
			if _, err := os.Stat("/sys/module/fuse/parameters/enable_uring"); err != nil || os.Geteuid() != 0 {
				t.Logf("no ring here (%s)", got)
			} else {
				t.Errorf("--transport %q: stats says %q", tr, got)
			}
		}
		if tr == "dev" && got != "dev" {
			t.Errorf("--transport dev: stats says %q", got)
		}
		twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
		waitDaemonGone(t, mnt)
		b, _ := os.ReadFile(log)
		if !strings.Contains(string(b), "transport "+got) {
			t.Errorf("log does not name the transport %q: %s", got, b)
		}
		if tr == "" && strings.Contains(string(b), "switched /sys/module/fuse/parameters/enable_uring") {
			t.Errorf("auto switched enable_uring: %s", b)
		}
	}
}
