package bench

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// TestGoSrcDirWithoutRuntimeGOROOT: Go's source tree is found from the go
// command on PATH (a symlink to it, GOROOT unset) and from GOROOT alone
// (no go on PATH), as a bench binary copied to another machine must.
func TestGoSrcDirWithoutRuntimeGOROOT(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipping: no go command on PATH")
	}
	out, err := exec.Command(goBin, "env", "GOROOT").Output()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Clean(string(out[:len(out)-1]))
	want := filepath.Join(root, "src")

	bin := t.TempDir()
	if err := os.Symlink(goBin, filepath.Join(bin, "go")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	t.Setenv("GOROOT", "")
	if got := goSrcDir(); got != want {
		t.Errorf("go on PATH: goSrcDir() = %q, want %q", got, want)
	}

	t.Setenv("PATH", t.TempDir())
	t.Setenv("GOROOT", root)
	if got := goSrcDir(); got != want {
		t.Errorf("GOROOT only: goSrcDir() = %q, want %q", got, want)
	}

	t.Setenv("GOROOT", "")
	if got := goSrcDir(); got != "" {
		t.Errorf("neither: goSrcDir() = %q, want \"\"", got)
	}
}
