package fs

import (
	"log"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// flushes mounts tm with go-fuse's debug log, writes a file and reads it
// back through five open/close pairs, and returns how many FLUSH requests
// reached the daemon.
func flushes(t *testing.T, tm *testMount) int {
	t.Helper()
	var dbg syncBuffer
	tm.mount(t, func(o *Options) {
		o.Debug = true
		o.DebugLog = log.New(&dbg, "", 0)
	})
	p := filepath.Join(tm.mnt, "f")
	must(t, os.WriteFile(p, []byte("closed six times\n"), 0644))
	for range 5 {
		got, err := os.ReadFile(p)
		must(t, err)
		if string(got) != "closed six times\n" {
			t.Fatalf("read %q", got)
		}
	}
	// Not the FLUSH of go-fuse's poll probe at mount (node ID -1).
	return len(regexp.MustCompile(`rx \d+: FLUSH n\d{1,19} `).FindAllString(strings.ReplaceAll(dbg.String(), "FLUSH n18446744073709551615", ""), -1))
}

// TestCloseSendsNoFlush checks that a file on a lower filesystem whose
// close(2) does nothing (closeIsNoop) is opened with FOPEN_NOFLUSH, so that
// its closes cost no round trip, and that a lower filesystem not known to
// be such (here a FUSE mount, whose close may report errors) still gets a
// FLUSH at every close.
func TestCloseSendsNoFlush(t *testing.T) {
	requireFUSE(t)
	probe := newVolume(t, variants[2])
	fd, err := openRoot(probe.lower)
	must(t, err)
	local := closeIsNoop(fd)
	closeFd(fd)
	if !local {
		t.Skipf("the test's temporary directory %s is on a filesystem closeIsNoop does not know: nothing to compare", probe.lower)
	}
	for _, v := range variants {
		if n := flushes(t, newVolume(t, v)); n != 0 {
			t.Errorf("%s: %d FLUSH requests for six closes on a local lower filesystem, want 0", v.name, n)
		}
	}

	// The lower directory inside a FUSE mount (the twin of probe).
	probe.mount(t)
	lower := filepath.Join(probe.mnt, "lower")
	must(t, os.Mkdir(lower, 0755))
	inner := &testMount{lower: lower, mnt: filepath.Join(t.TempDir(), "mnt"), log: &syncBuffer{}}
	must(t, os.Mkdir(inner.mnt, 0755))
	if n := flushes(t, inner); n != 6 {
		t.Errorf("twin over a FUSE lower: %d FLUSH requests for six closes, want 6", n)
	}
}
