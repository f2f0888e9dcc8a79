package ecryptfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/rs/zerolog"
)

// The read-only mount shows the tree as the kernel's eCryptfs would:
// contents, modes, times, links, hard links, xattrs; it refuses writes,
// and a damaged file is EIO without hiding the others.
func TestMountReadOnly(t *testing.T) {
	requireFUSE(t)
	src, kr := lowerTree(t, true)
	before := snapshot(t, src)
	mnt := t.TempDir()
	srv, err := Mount(src, mnt, kr, MountOptions{Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmount(srv) })
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	checkImported(t, mnt)
	if err := os.WriteFile(filepath.Join(mnt, "new"), []byte("x"), 0o644); !errors.Is(err, syscall.EROFS) {
		t.Errorf("create on the read-only mount: %v", err)
	}
	if _, err := os.OpenFile(filepath.Join(mnt, "a.txt"), os.O_WRONLY, 0); err == nil {
		t.Errorf("a file opened for writing")
	}
	if after := snapshot(t, src); after != before {
		t.Errorf("the source changed under the read-only mount")
	}
}
