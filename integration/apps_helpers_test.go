package integration

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/cipher/names"
)

// cmdTimeout bounds every program the tests run: a filesystem that hangs
// must fail the test, not stall it.
const cmdTimeout = 3 * time.Minute

// needProgs skips the test when one of the programs is not installed.
func needProgs(t *testing.T, progs ...string) {
	t.Helper()
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed on this machine: skipping this application test", p)
		}
	}
}

// baseEnv is the environment of the programs the tests run: this
// process's, without GIT_* variables, in the C locale and UTC, with HOME
// in a fresh temporary directory.
func baseEnv(t *testing.T) []string {
	t.Helper()
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GIT_") || strings.HasPrefix(kv, "HOME=") || strings.HasPrefix(kv, "LC_") ||
			strings.HasPrefix(kv, "LANG=") || strings.HasPrefix(kv, "TZ=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+t.TempDir(), "LC_ALL=C", "TZ=UTC")
}

// runIn runs name with args in dir, with baseEnv plus env, and returns
// its standard output. Any failure (exit status, timeout) fails the test
// with the command, its output and its error output.
func runIn(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	out, err := tryRun(t, dir, env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// runStderr is runIn that returns the standard error output instead.
func runStderr(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	_, stderr, err := run3(t, dir, env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	return stderr
}

// tryRun is runIn that returns the failure instead.
func tryRun(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	stdout, _, err := run3(t, dir, env, name, args...)
	return stdout, err
}

// run3 runs the command and returns its standard output, its error output
// and a descriptive error.
func run3(t *testing.T, dir string, env []string, name string, args ...string) (string, string, error) {
	t.Helper()
	return run3Within(t, cmdTimeout, dir, env, name, args...)
}

// run3Within is run3 with its own time bound: a program that loops on a
// filesystem answer fails after timeout.
func run3Within(t *testing.T, timeout time.Duration, dir string, env []string, name string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Never let this process's fork touch the mount: Go starts children
	// with vfork, so the parent thread stays stopped until the child has
	// exec'd. A child that does chdir(dir) or execs a program on a mount
	// this very process serves then waits for the FUSE server while the
	// parent may be waiting for that thread to stop the world for the
	// GC: a deadlock (seen as a child stuck in fuse_access from chdir).
	// So the child is always /bin/sh started in "/", and sh (a separate
	// process) changes into dir and execs the program.
	shArgs := append([]string{"-c", `cd "$1" || exit 126; shift; exec "$@"`, "sh", dir, name}, args...)
	cmd := exec.CommandContext(ctx, "/bin/sh", shArgs...)
	cmd.Dir = "/"
	cmd.Env = append(baseEnv(t), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%v: killed after the time bound of %v (a hang)", err, timeout)
	}
	if err != nil {
		err = fmt.Errorf("%s %s (in %s, after %v): %v\nstdout:\n%s\nstderr:\n%s",
			name, strings.Join(args, " "), dir, time.Since(start).Round(time.Millisecond), err,
			clip(stdout.String()), clip(stderr.String()))
	}
	return stdout.String(), stderr.String(), err
}

func clip(s string) string {
	const max = 4000
	if len(s) > max {
		return s[:max/2] + "\n[...]\n" + s[len(s)-max/2:]
	}
	return s
}

// randBytes returns n pseudo-random bytes, the same for the same seed.
func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for k := 0; k < 8; k++ {
			b[i+k] = byte(v >> (8 * k))
		}
	}
	return b[:n]
}

func mustWrite(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func mustMkdir(t *testing.T, path string) string {
	t.Helper()
	if err := os.MkdirAll(path, 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// firstDiff describes where two outputs first differ.
func firstDiff(a, b string) string {
	la, lb := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := 0; i < len(la) || i < len(lb); i++ {
		var x, y string
		if i < len(la) {
			x = la[i]
		}
		if i < len(lb) {
			y = lb[i]
		}
		if x != y {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, x, y)
		}
	}
	return "no difference"
}

// lowerNames returns every name (path component) in vol's lower directory.
func lowerNames(t *testing.T, vol *Volume) map[string]bool {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(vol.Lower, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		seen[d.Name()] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return seen
}

// checkNamesHidden asserts, while the files still exist, that none of the
// plaintext names appears in the lower directory of an encrypted-names
// volume. On the twin the same names must all be there: that shows the
// check looks at the right place.
func checkNamesHidden(t *testing.T, vol *Volume, plain ...string) {
	t.Helper()
	seen := lowerNames(t, vol)
	for _, n := range plain {
		switch {
		case vol.Variant.EncryptedNames() && seen[n]:
			t.Errorf("plaintext name %q is visible in the lower directory %s: names are not encrypted", n, vol.Lower)
		case !vol.Variant.Crypt() && !seen[n]:
			t.Errorf("twin: name %q is not in the lower directory %s, but the twin stores names as they are", n, vol.Lower)
		}
	}
}

// checkContentHidden asserts that no lower file of a crypt volume contains
// needle; on the twin some lower file must.
func checkContentHidden(t *testing.T, vol *Volume, needle []byte) {
	t.Helper()
	found := ""
	err := filepath.WalkDir(vol.Lower, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || found != "" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, needle) {
			found = p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case vol.Variant.Crypt() && found != "":
		t.Errorf("plaintext %q found in the lower file %s: content is not encrypted", needle, found)
	case !vol.Variant.Crypt() && found == "":
		t.Errorf("twin: no lower file contains %q, but the twin stores content as it is", needle)
	}
}

// checkLowerConsistent compares the lower directory with the mounted
// view: every long-name entry has its sidecar and every sidecar its entry,
// every lower directory of an encrypted-names volume has its IV, and there
// are exactly as many lower entries as the mount shows (no leftovers of
// removed files).
func checkLowerConsistent(t *testing.T, vol *Volume) {
	t.Helper()
	var view int
	err := filepath.WalkDir(vol.Mnt, func(p string, d fs.DirEntry, err error) error {
		if err == nil && p != vol.Mnt {
			view++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var lower int
	err = filepath.WalkDir(vol.Lower, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == vol.Lower {
			return err
		}
		rel, _ := filepath.Rel(vol.Lower, p)
		dir, base := filepath.Split(p)
		switch {
		case isLowerMeta(rel):
			if names.IsSidecar(base) {
				if _, err := os.Lstat(filepath.Join(dir, strings.TrimSuffix(base, names.LongSuffix))); err != nil {
					t.Errorf("orphan long-name sidecar %s", rel)
				}
			}
			return nil
		case names.IsLong(base) && vol.Variant.EncryptedNames():
			if _, err := os.Lstat(p + names.LongSuffix); err != nil {
				t.Errorf("long-name entry %s has no sidecar", rel)
			}
		}
		if d.IsDir() && vol.Variant.EncryptedNames() {
			if _, err := os.Lstat(filepath.Join(p, names.DirIVFile)); err != nil {
				t.Errorf("lower directory %s has no %s", rel, names.DirIVFile)
			}
		}
		lower++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if lower != view {
		t.Errorf("the lower directory holds %d entries besides metadata, the mount shows %d", lower, view)
	}
}
