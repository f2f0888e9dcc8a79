package integration

// Programs that depend on behaviour a FUSE filesystem easily gets wrong,
// run on a plain directory and on every variant, and compared: sparse
// copies (cp, tar --sparse, rsync -S walk a file with SEEK_DATA and
// SEEK_HOLE), POSIX ACLs (setfacl/getfacl), and the Go standard library's
// own os package tests with TMPDIR on the mount.

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// faithTargets are the directories the faithfulness tests run in: a plain
// directory (the reference) and a fresh mount of every variant, plaintext
// names included.
func faithTargets(t *testing.T) (names []string, dirs map[string]string) {
	t.Helper()
	RequireFUSE(t)
	dirs = map[string]string{"native": t.TempDir()}
	names = []string{"native"}
	vs := append(append([]Variant(nil), Variants...), Variant{Name: "plainnames", Cipher: "aes-xts", KeyBytes: 64, PlaintextNames: true})
	for _, v := range vs {
		vol := MountVariant(t, v)
		names = append(names, v.Name)
		dirs[v.Name] = vol.Mnt
	}
	return names, dirs
}

// sparseTimeout bounds one copy of the 24 MiB sparse file: it takes well
// under a second on a quiet machine, seconds on a loaded one; a copy that
// loops on SEEK_DATA/SEEK_HOLE never ends, and must fail.
const sparseTimeout = 2 * time.Minute

// sameFile fails the test unless the file at got holds want.
func sameFile(t *testing.T, what, got string, want []byte) {
	t.Helper()
	b, err := os.ReadFile(got)
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if bytes.Equal(b, want) {
		return
	}
	i := 0
	for i < len(b) && i < len(want) && b[i] == want[i] {
		i++
	}
	t.Errorf("%s: %d bytes, want %d; first difference at byte %d", what, len(b), len(want), i)
}

// makeSparse writes a 24 MiB file with three data regions and holes
// between them and at the end.
func makeSparse(t *testing.T, p string) []byte {
	t.Helper()
	const size = 24 << 20
	want := make([]byte, size)
	copy(want, randBytes(1, 100000))
	copy(want[8<<20+123:], randBytes(2, 5000))
	copy(want[16<<20:], randBytes(3, 4096))
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, r := range [][2]int{{0, 100000}, {8<<20 + 123, 5000}, {16 << 20, 4096}} {
		if _, err := f.WriteAt(want[r[0]:r[0]+r[1]], int64(r[0])); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	return want
}

// TestSparseCopies copies a sparse file into and out of each target with
// cp (plain and --sparse=always), tar --sparse and rsync -S, and checks
// every copy's content. These programs walk the file with SEEK_DATA and
// SEEK_HOLE: a wrong answer loses data or makes them loop (a hang fails
// after sparseTimeout).
func TestSparseCopies(t *testing.T) {
	needProgs(t, "cp")
	names, dirs := faithTargets(t)
	src := filepath.Join(t.TempDir(), "sparse")
	want := makeSparse(t, src)
	for _, name := range names {
		dir := dirs[name]
		t.Run(name, func(t *testing.T) {
			out := t.TempDir()
			run := func(t *testing.T, args ...string) bool {
				t.Helper()
				if _, _, err := run3Within(t, sparseTimeout, "/", nil, args[0], args[1:]...); err != nil {
					t.Error(err)
					return false
				}
				return true
			}
			t.Run("cp", func(t *testing.T) {
				in := filepath.Join(dir, "cp-in")
				if run(t, "cp", src, in) {
					sameFile(t, "cp into the target", in, want)
				}
				if run(t, "cp", in, filepath.Join(out, "cp-out")) {
					sameFile(t, "cp out of the target", filepath.Join(out, "cp-out"), want)
				}
			})
			t.Run("cp --sparse=always", func(t *testing.T) {
				in := filepath.Join(dir, "cps-in")
				if run(t, "cp", "--sparse=always", src, in) {
					sameFile(t, "cp --sparse=always into the target", in, want)
				}
				if run(t, "cp", "--sparse=always", in, filepath.Join(out, "cps-out")) {
					sameFile(t, "cp --sparse=always out of the target", filepath.Join(out, "cps-out"), want)
				}
			})
			t.Run("tar --sparse", func(t *testing.T) {
				needProgs(t, "tar")
				// Archive natively, extract into the target, archive
				// from there, extract natively.
				in := mustMkdir(t, filepath.Join(dir, "tar-in"))
				if !run(t, "tar", "--sparse", "-cf", filepath.Join(out, "a.tar"), "-C", filepath.Dir(src), "sparse") ||
					!run(t, "tar", "-xf", filepath.Join(out, "a.tar"), "-C", in) {
					return
				}
				sameFile(t, "tar --sparse extracted into the target", filepath.Join(in, "sparse"), want)
				back := mustMkdir(t, filepath.Join(out, "tar-back"))
				if run(t, "tar", "--sparse", "-cf", filepath.Join(out, "b.tar"), "-C", in, "sparse") &&
					run(t, "tar", "-xf", filepath.Join(out, "b.tar"), "-C", back) {
					sameFile(t, "tar --sparse archived from the target", filepath.Join(back, "sparse"), want)
				}
			})
			t.Run("rsync -S", func(t *testing.T) {
				needProgs(t, "rsync")
				in := filepath.Join(dir, "rsync-in")
				if run(t, "rsync", "-S", src, in) {
					sameFile(t, "rsync -S into the target", in, want)
				}
				if run(t, "rsync", "-S", in, filepath.Join(out, "rsync-out")) {
					sameFile(t, "rsync -S out of the target", filepath.Join(out, "rsync-out"), want)
				}
			})
		})
	}
}

// TestACLRoundTrip sets access and default ACLs with setfacl, creates
// files and directories under a default ACL (they inherit it, and the
// umask does not apply), removes entries, and compares getfacl's output
// and the modes on each target with the plain directory's.
func TestACLRoundTrip(t *testing.T) {
	needProgs(t, "setfacl", "getfacl")
	names, dirs := faithTargets(t)
	scenario := func(t *testing.T, dir string) string {
		var tr strings.Builder
		step := func(name string, args ...string) {
			stdout, stderr, err := run3(t, dir, nil, name, args...)
			fmt.Fprintf(&tr, "$ %s %s\n%s%s", name, strings.Join(args, " "), stdout, stderr)
			if err != nil {
				fmt.Fprintf(&tr, "failed: %s\n", regexp.MustCompile(`exit status \d+|signal: \w+`).FindString(err.Error()))
			}
		}
		modes := func() {
			for _, p := range []string{"d", "d/f", "d/new", "d/sub", "d/sub/deeper"} {
				var st unix.Stat_t
				err := unix.Lstat(filepath.Join(dir, p), &st)
				fmt.Fprintf(&tr, "mode %s: %#o %v\n", p, st.Mode, err)
			}
		}
		must := func(err error) {
			if err != nil {
				fmt.Fprintf(&tr, "error: %v\n", strings.ReplaceAll(err.Error(), dir, "DIR"))
			}
		}
		must(os.Mkdir(filepath.Join(dir, "d"), 0o755))
		must(os.WriteFile(filepath.Join(dir, "d", "f"), []byte("acl"), 0o640))
		step("setfacl", "-m", "u:1000:rw-,g:1000:r--,m::rw-", "d/f")
		step("setfacl", "-d", "-m", "u:1000:rwx,g::r-x,o::---", "d")
		step("setfacl", "-m", "u:1001:r-x", "d")
		// Created under the default ACL: they inherit it.
		must(os.WriteFile(filepath.Join(dir, "d", "new"), []byte("inherits"), 0o666))
		must(os.Mkdir(filepath.Join(dir, "d", "sub"), 0o777))
		must(os.Mkdir(filepath.Join(dir, "d", "sub", "deeper"), 0o700))
		step("getfacl", "-p", "-n", "d", "d/f", "d/new", "d/sub", "d/sub/deeper") // not -R: readdir order varies
		modes()
		step("setfacl", "-x", "u:1000", "d/f")
		step("setfacl", "-k", "d")
		step("setfacl", "-b", "d/sub")
		step("chmod", "0700", "d/new")
		step("getfacl", "-p", "-n", "d", "d/f", "d/new", "d/sub", "d/sub/deeper") // not -R: readdir order varies
		modes()
		step("setfacl", "-m", "u:nosuchuser:rw", "d/f")
		step("setfacl", "-d", "-m", "u:1000:rw", "d/f") // default ACL on a file: refused
		return tr.String()
	}
	ref := scenario(t, dirs["native"])
	if !strings.Contains(ref, "user:1000:rwx") || !strings.Contains(ref, "default:user:1000:rwx") {
		t.Fatalf("the plain directory does not keep ACLs (no ACL support on %s?):\n%s", dirs["native"], ref)
	}
	for _, name := range names[1:] {
		t.Run(name, func(t *testing.T) {
			got := scenario(t, dirs[name])
			if got != ref {
				t.Errorf("setfacl/getfacl on %s differ from the plain directory: %s\nnative:\n%s\n%s:\n%s", name, firstDiff(ref, got), ref, name, got)
			}
		})
	}
}

// goOSTests runs the os package's tests with TMPDIR=tmp and GOTMPDIR=tmp
// (t.TempDir is made there: the test binary is built and run there too)
// and returns the names of the tests that failed and go test's output.
func goOSTests(t *testing.T, tmp, run string) (map[string]bool, string) {
	t.Helper()
	cache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOCACHE: %v", err)
	}
	env := []string{"TMPDIR=" + tmp, "GOTMPDIR=" + tmp, "GOCACHE=" + strings.TrimSpace(string(cache)),
		"GOFLAGS=", "GOTOOLCHAIN=local"}
	args := []string{"test", "-count=1", "-v", "-timeout=8m"}
	if run != "" {
		args = append(args, "-run", run)
	}
	stdout, stderr, err := run3Within(t, 9*time.Minute, "/", env, "go", append(args, "os")...)
	failed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`).FindAllStringSubmatch(stdout, -1) {
		failed[m[1]] = true
	}
	if err != nil && len(failed) == 0 {
		t.Fatalf("go test os with TMPDIR=%s failed without a failing test (build error, panic or timeout): %v", tmp, err)
	}
	return failed, stdout + stderr
}

var flagGoOSAll = flag.Bool("goos.all", false, "TestGoOSPackage: run every test of the os package (over a minute per target), not only those that make files")

// goOSRun selects the os tests to run: every one with -goos.all, only
// TestRemoveAllLongPath with -short, else those that make files.
func goOSRun() string {
	if *flagGoOSAll {
		return ""
	}
	if testing.Short() {
		return "TestRemoveAllLongPath"
	}
	return "TestRemoveAll|TestMkdirAll|TestReadDir|TestReaddir|TestOpenFile|TestRename|TestSymlink|TestLink|TestHardLink|" +
		"TestChmod|TestTruncate|TestFTruncate|TestSeek|TestLongPath|TestLongSymlink|TestReadFile|TestWriteFile|TestCopyFS|" +
		"TestChtimes|TestReadAt|TestWriteAt|TestDirSeek|TestReadlink"
}

// goOSFUSE are the os tests that fail on any FUSE mount, for a reason
// the daemon cannot change (seen with -goos.all).
var goOSFUSE = map[string]string{
	"TestNonpollableDeadline": "the kernel gives every FUSE file a poll method, so epoll takes a regular file " +
		"and Go's SetDeadline succeeds instead of returning ErrNoDeadline",
}

// TestGoOSPackage runs the Go standard library's os package tests with
// TMPDIR on each mount, and with TMPDIR in a plain directory first: a
// test that fails natively too depends on the machine, not on us; one
// that fails only on a mount is a filesystem difference.
func TestGoOSPackage(t *testing.T) {
	needProgs(t, "go")
	names, dirs := faithTargets(t)
	run := goOSRun()
	nativeFailed, nativeOut := goOSTests(t, dirs["native"], run)
	if len(nativeFailed) > 0 {
		t.Logf("os tests that fail in a plain directory too (ignored on the mounts): %v", keys(nativeFailed))
	}
	if !strings.Contains(nativeOut, "--- PASS: TestRemoveAllLongPath") {
		t.Fatalf("TestRemoveAllLongPath did not pass natively:\n%s", clip(nativeOut))
	}
	for _, name := range names[1:] {
		t.Run(name, func(t *testing.T) {
			tmp := mustMkdir(t, filepath.Join(dirs[name], "tmp"))
			failed, out := goOSTests(t, tmp, run)
			var only []string
			for f := range failed {
				if why, ok := goOSFUSE[f]; ok {
					t.Logf("%s fails on %s as on any FUSE mount: %s", f, name, why)
					continue
				}
				if !nativeFailed[f] {
					only = append(only, f)
				}
			}
			sort.Strings(only)
			if len(only) > 0 {
				t.Errorf("os tests that fail with TMPDIR on %s but pass in a plain directory: %v\n%s", name, only, clip(failures(out)))
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// failures keeps the lines of go test -v output around failures.
func failures(out string) string {
	var b strings.Builder
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "=== RUN") || strings.HasPrefix(strings.TrimSpace(l), "--- PASS") ||
			strings.HasPrefix(strings.TrimSpace(l), "=== PAUSE") || strings.HasPrefix(strings.TrimSpace(l), "=== CONT") {
			continue
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}
