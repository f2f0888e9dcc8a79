package ecryptfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
	"github.com/twincrypt/twincrypt/measure"
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

// A damaged lower file reads as EIO; a name of another key is left out;
// the rest of the tree is served.
func TestMountDamaged(t *testing.T) {
	requireFUSE(t)
	src, kr := lowerTree(t, false)
	big := filepath.Join(src, "dir", "big")
	fi, _ := os.Stat(big)
	must(t, os.Truncate(big, fi.Size()-4096))
	other, _ := ecryptfs.DeriveKey("another passphrase", ecryptfs.FNEKSalt)
	must(t, os.WriteFile(filepath.Join(src, ecryptfs.EncryptName("foreign", other, 16)), nil, 0o644))
	mnt := t.TempDir()
	srv, err := Mount(src, mnt, kr, MountOptions{Log: zerolog.Nop()})
	must(t, err)
	t.Cleanup(func() { unmount(srv) })
	must(t, srv.WaitMount())
	if _, err := os.ReadFile(filepath.Join(mnt, "dir", "big")); !errors.Is(err, syscall.EIO) {
		t.Errorf("truncated file: %v, want EIO", err)
	}
	if got, err := os.ReadFile(filepath.Join(mnt, "a.txt")); err != nil || string(got) != "hello\n" {
		t.Errorf("a.txt beside the damaged file: %q, %v", got, err)
	}
	des, err := os.ReadDir(mnt)
	must(t, err)
	for _, de := range des {
		if strings.HasPrefix(de.Name(), ecryptfs.FNEKPrefix) || de.Name() == "foreign" {
			t.Errorf("listed %s", de.Name())
		}
	}
}

// With a recorder the mount is measured like twincrypt's own: every
// lookup and read counted, the bytes read, decryption time apart.
func TestMountInstrument(t *testing.T) {
	requireFUSE(t)
	src, kr := lowerTree(t, true)
	mnt := t.TempDir()
	rec := measure.NewRecorder(mnt)
	srv, err := Mount(src, mnt, kr, MountOptions{Log: zerolog.Nop(), Recorder: rec})
	must(t, err)
	t.Cleanup(func() { unmount(srv) })
	must(t, srv.WaitMount())
	got, err := os.ReadFile(filepath.Join(mnt, "dir", "big"))
	must(t, err)
	ops := map[string]measure.Stats{}
	for _, s := range rec.Snapshot().Ops {
		ops[s.Op] = s
	}
	if ops["lookup"].Count < 2 || ops["read"].Count < 1 || ops["read"].Bytes != int64(len(got)) || ops["read"].CryptoNs <= 0 {
		t.Errorf("recorded ops %+v", ops)
	}
}
