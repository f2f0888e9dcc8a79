package crashsim

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var (
	flagStates = flag.Int("crash.states", 4, "crash states per workload and variant checked by TestCrashStates")
	flagOnly   = flag.String("crash.only", "", "run only workload/variant pairs containing this substring")
	flagSeed   = flag.Int64("crash.seed", 1, "seed of the crash-state sampling")
	flagKeep   = flag.String("crash.keep", "", "directory that receives every state with a violation")
)

// TestCrashStates runs every workload on every variant and checks a few
// of their crash states (make crash-states checks many more).
func TestCrashStates(t *testing.T) {
	requireRecorder(t, "sqlite3", "git", "tar")
	res, err := Run(t.TempDir(), Workloads, Options{
		MaxStates: *flagStates, Subsets: 2, Seed: *flagSeed, Out: testWriter{t}, KeepDir: *flagKeep,
		Only: func(w, v string) bool { return *flagOnly == "" || strings.Contains(w+"/"+v, *flagOnly) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range res.Violations {
		t.Errorf("%s", v)
	}
	t.Log(res.Summary())
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func TestDumpLog(t *testing.T) {
	if os.Getenv("CRASHSIM_DUMP") == "" {
		t.Skip()
	}
	var w Workload
	for _, x := range Workloads {
		if x.Name == os.Getenv("CRASHSIM_DUMP") {
			w = x
		}
	}
	v := Variants[0]
	for _, x := range Variants {
		if x.Name == os.Getenv("CRASHSIM_VARIANT") {
			v = x
		}
	}
	r, err := record(t.TempDir(), w, v)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range r.ops {
		t.Logf("%d %s", i, o)
	}
}
