package fs

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// Fixed here (issue #39, finding 8): every lower name that does not
// decrypt was logged at every listing, so whoever can write LOWER could
// fill the daemon's log (5,000 junk names: 1.37 MB for three ls). Now the
// first few per directory are logged and the rest counted: the test plants
// 5,000 junk names in one directory and 3 in another, lists them three
// times with ls (on a mount with shared storage, where every listing
// reaches the daemon), and checks that the log holds a handful of lines in which
// every hidden entry is accounted for, logged or counted.
func TestJunkNamesLogLimited(t *testing.T) {
	const junk, listings = 5000, 3
	for _, tr := range []string{TransportDev, TransportUring} {
		t.Run(tr, func(t *testing.T) {
			if tr == TransportUring {
				requireUringKernel(t)
			}
			tm := newVolume(t, variants[0])
			// Shared storage, as a sync folder LOWER is: every listing
			// reaches the daemon (no listing kept by the kernel).
			tm.mount(t, func(o *Options) { o.Transport = tr; o.SharedStorage = true })
			if info := TransportOf(tm.srv); info.Name != tr {
				t.Fatalf("asked for %s, runs on %s", tr, info)
			}
			counts := map[string]int{"big": junk, "small": 3}
			for dir, n := range counts {
				must(t, os.Mkdir(filepath.Join(tm.mnt, dir), 0755))
				must(t, os.WriteFile(filepath.Join(tm.mnt, dir, "real"), nil, 0644))
				lowerDir := lowerPath(t, tm, dir)
				for i := range n {
					must(t, os.WriteFile(filepath.Join(lowerDir, fmt.Sprintf("junk%05d", i)), nil, 0644))
				}
			}
			for range listings {
				for dir := range counts {
					out, err := exec.Command("ls", "-1", filepath.Join(tm.mnt, dir)).CombinedOutput()
					if err != nil || strings.TrimSpace(string(out)) != "real" {
						t.Fatalf("ls %s: %v: %q", dir, err, out)
					}
				}
			}
			tm.unmountNow(t) // the count still held is logged at the end
			var lines, logged, counted int
			for _, line := range strings.Split(tm.log.String(), "\n") {
				var e struct {
					Message    string `json:"message"`
					Suppressed int    `json:"suppressed"`
				}
				if json.Unmarshal([]byte(line), &e) != nil {
					continue
				}
				switch {
				case strings.Contains(e.Message, "entry hidden"):
					lines++
					logged++
				case e.Suppressed > 0:
					lines++
					counted += e.Suppressed
				}
			}
			want := listings * (counts["big"] + counts["small"])
			if logged+counted != want {
				t.Errorf("%d hidden entries logged and %d counted, want %d in all", logged, counted, want)
			}
			// At most the allowance of one window per listing (a slow
			// machine may spread them over windows) and a summary each.
			if max := listings * (nameWarnTotal + 1); lines > max {
				t.Errorf("%d log lines about hidden entries, want at most %d", lines, max)
			}
			if logged < 2 {
				t.Errorf("%d hidden entries logged: the first of each directory must be", logged)
			}
			t.Logf("%d lines: %d entries logged, %d counted", lines, logged, counted)
		})
	}
}

// TestWarnLimiterWindowEnd: the count of what a window suppressed is
// logged when the window ends, with no later warning to bring it out, and
// the next window logs afresh.
func TestWarnLimiterWindowEnd(t *testing.T) {
	var buf syncBuffer
	l := newWarnLimiter(zerolog.New(&buf), "test warnings")
	l.window = 10 * time.Millisecond
	allowed := 0
	for range nameWarnPerDir + 7 {
		if l.allow("d") {
			allowed++
		}
	}
	if allowed != nameWarnPerDir {
		t.Fatalf("%d of %d allowed in one window, want %d", allowed, nameWarnPerDir+7, nameWarnPerDir)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(buf.String(), `"suppressed":7`) {
		if time.Now().After(deadline) {
			t.Fatalf("no summary of 7 suppressed after the window: %q", buf.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !l.allow("d") {
		t.Error("a new window does not log afresh")
	}
}
