package control

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/twincrypt/twincrypt/measure"
)

func TestQuery(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	mnt := t.TempDir()
	rec := measure.NewRecorder("m")
	rec.Start(measure.OpRead, 1).End(0)
	srv, err := Listen(mnt, rec.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	snap, err := Query(mnt)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Ops) != 1 || snap.Ops[0].Op != "read" || snap.Ops[0].Count != 1 {
		t.Fatalf("snapshot %+v", snap.Ops)
	}
	st, err := os.Stat(srv.Path())
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0600 {
		t.Errorf("socket mode %v, want 0600", st.Mode().Perm())
	}
	dst, _ := os.Stat(filepath.Dir(srv.Path()))
	if dst.Mode().Perm() != 0700 {
		t.Errorf("socket directory mode %v, want 0700", dst.Mode().Perm())
	}
	// A second daemon for the same mount point is refused.
	if _, err := Listen(mnt, rec.Snapshot); err == nil {
		t.Error("second server on the same mount point accepted")
	}
	srv.Close()
	if _, err := Query(mnt); !errors.Is(err, ErrNoDaemon) {
		t.Errorf("query after close: %v", err)
	}
	// A socket left behind by a killed daemon does not block a new one.
	srv2, err := Listen(mnt, rec.Snapshot)
	if err != nil {
		t.Fatalf("listen after close: %v", err)
	}
	srv2.Close()
}

// TestOtherUserRefused connects as user nobody: the 0700 directory and
// the 0600 socket must keep it out.
func TestOtherUserRefused(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to act as another user")
	}
	setpriv, err1 := exec.LookPath("setpriv")
	python, err2 := exec.LookPath("python3")
	if err1 != nil || err2 != nil {
		t.Skip("needs setpriv and python3 to connect as another user")
	}
	dir, err := os.MkdirTemp("/tmp", "tc-control-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0755) // nobody may reach the directory, not the socket
	t.Setenv("XDG_RUNTIME_DIR", dir)
	mnt := t.TempDir()
	rec := measure.NewRecorder("m")
	srv, err := Listen(mnt, rec.Snapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	script := "import socket,sys\ns=socket.socket(socket.AF_UNIX)\ns.connect(sys.argv[1])\ns.sendall(b'stats\\n')\nd=s.recv(100)\nsys.exit(0 if d else 3)"
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", python, "-c", script, srv.Path())
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("user nobody read the stats socket: %s", out)
	}
	t.Logf("nobody refused as expected: %v", err)
	// The same connection as the owner works.
	if _, err := Query(mnt); err != nil {
		t.Fatal(err)
	}
}
