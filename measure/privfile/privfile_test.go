package privfile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// otherUser is the uid that plants files in the tests.
const otherUser = 65534

// plantedDir is a shared directory like /tmp (sticky, open to all).
func plantedDir(t *testing.T) string {
	if os.Geteuid() != 0 {
		t.Skip("needs root: to plant files of another user")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestOpenRefusesPlantedSymlink (issue #16 (5)): a symlink planted where
// the log will be is not followed; its target is left as it was.
func TestOpenRefusesPlantedSymlink(t *testing.T) {
	dir := plantedDir(t)
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(dir, "twincrypt.log")
	if err := os.Symlink(victim, log); err != nil {
		t.Fatal(err)
	}
	os.Lchown(log, otherUser, otherUser)
	for _, trunc := range []bool{false, true} {
		f, err := Open(log, trunc)
		if err == nil {
			f.Close()
			t.Fatalf("Open(trunc=%v) of a planted symlink succeeded", trunc)
		}
		if !errors.Is(err, ErrNotOurs) {
			t.Errorf("Open(trunc=%v): %v, want ErrNotOurs", trunc, err)
		}
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Errorf("symlink target changed: %q", b)
	}
}

// TestOpenRefusesOtherUsersFile: a world-readable file another user made
// under the log's name is refused with a message naming its owner, and
// neither written nor emptied; our own world-readable file becomes 0600.
func TestOpenRefusesOtherUsersFile(t *testing.T) {
	dir := plantedDir(t)
	log := filepath.Join(dir, "ops.log")
	if err := os.WriteFile(log, []byte("theirs"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(log, 0o666); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(log, otherUser, otherUser); err != nil {
		t.Fatal(err)
	}
	for _, trunc := range []bool{false, true} {
		f, err := Open(log, trunc)
		if err == nil {
			f.Close()
			t.Fatalf("Open(trunc=%v) of another user's file succeeded", trunc)
		}
		if !errors.Is(err, ErrNotOurs) || !contains(err.Error(), "belongs to uid 65534") {
			t.Errorf("Open(trunc=%v): %v, want ErrNotOurs naming the owner", trunc, err)
		}
	}
	if b, _ := os.ReadFile(log); string(b) != "theirs" {
		t.Errorf("another user's file changed: %q", b)
	}

	own := filepath.Join(dir, "own.log")
	if err := os.WriteFile(own, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	os.Chmod(own, 0o644)
	f, err := Open(own, false)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("new\n")
	f.Close()
	st, _ := os.Stat(own)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("own log has mode %v, want 0600", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(own); string(b) != "old\nnew\n" {
		t.Errorf("append: %q", b)
	}
	if err := WriteFile(own, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(own); string(b) != "x" {
		t.Errorf("WriteFile: %q", b)
	}
	// A second name for a file (here one of our own) is refused.
	if err := os.Link(own, own+".2"); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(own+".2", true); !errors.Is(err, ErrNotOurs) {
		t.Errorf("file with two links: %v, want ErrNotOurs", err)
	}
	// A device is written as it is.
	if f, err := Open("/dev/null", false); err != nil {
		t.Errorf("/dev/null: %v", err)
	} else {
		f.Close()
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
