package fs

import (
	"bytes"
	"log"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"golang.org/x/sys/unix"
)

// countOps mounts v with go-fuse's debug log and returns how many READ and
// WRITE requests reached the daemon while a file was written and read.
func countOps(t *testing.T, v variant, kernelPassthrough bool) (reads, writes int) {
	tm := newVolume(t, v)
	var dbg syncBuffer
	tm.mount(t, func(o *Options) {
		o.Debug = true
		o.DebugLog = log.New(&dbg, "", 0)
		o.KernelPassthrough = kernelPassthrough
	})
	p := filepath.Join(tm.mnt, "f")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	must(t, os.WriteFile(p, data, 0644))
	// The page cache still holds what was written (it is kept across
	// opens): drop it, so that the reads go to the filesystem.
	f, err := os.Open(p)
	must(t, err)
	must(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
	f.Close()
	got, err := os.ReadFile(p)
	must(t, err)
	if !bytes.Equal(got, data) {
		t.Fatal("content differs")
	}
	log := dbg.String()
	reads = len(regexp.MustCompile(`rx \d+: READ `).FindAllString(log, -1))
	writes = len(regexp.MustCompile(`rx \d+: WRITE `).FindAllString(log, -1))
	return reads, writes
}

// TestIOReachesDaemon checks that kernel passthrough is off on both mounts:
// every READ and WRITE is served, and so timed, by the daemon. With
// --kernel-passthrough the twin's data requests bypass it, which shows the
// check can tell the difference.
func TestIOReachesDaemon(t *testing.T) {
	requireFUSE(t)
	for _, v := range variants {
		r, w := countOps(t, v, false)
		if r == 0 || w == 0 {
			t.Errorf("%s: %d READ and %d WRITE requests reached the daemon, want both > 0", v.name, r, w)
		}
	}
	if os.Geteuid() == 0 {
		r, w := countOps(t, variants[2], true)
		t.Logf("twin with kernel passthrough: %d READ, %d WRITE requests in the daemon", r, w)
		if r+w != 0 {
			t.Logf("kernel refused passthrough here (needs CAP_SYS_ADMIN and FUSE_PASSTHROUGH)")
		}
	}
}
