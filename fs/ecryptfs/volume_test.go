package ecryptfs

import (
	"crypto/rand"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/fs"
)

func cheapConfig() config.Options {
	salt := make([]byte, 32)
	rand.Read(salt)
	return config.Options{KDF: kdf.Params{Algorithm: "argon2id", Salt: salt, Time: 1, MemoryKiB: 1024, Threads: 1}}
}

// The import writes a real twincrypt volume: mounted afresh with its own
// passphrase it shows the eCryptfs tree's plaintext, and its lower
// directory holds no plaintext name.
func TestImportVolume(t *testing.T) {
	requireFUSE(t)
	src, kr := lowerTree(t, true)
	vol := filepath.Join(t.TempDir(), "newvol")
	pass := []byte("new volume passphrase")
	rep, err := ImportVolume(src, kr, vol, VolumeOptions{Passphrase: pass, Config: cheapConfig(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatalf("import: %v %+v", err, rep)
	}
	if _, err := os.Stat(JournalPath(vol)); err != nil {
		t.Errorf("no journal: %v", err)
	}
	// A second run resumes (nothing left to do) rather than refusing.
	if rep, err := ImportVolume(src, kr, vol, VolumeOptions{Passphrase: pass, Log: zerolog.Nop()}); err != nil || rep.Bytes != 0 {
		t.Errorf("resume of a finished import: %v %+v", err, rep)
	}
	des, _ := os.ReadDir(vol)
	for _, de := range des {
		if de.Name() == "a.txt" || de.Name() == "dir" {
			t.Errorf("plaintext name %s in the new volume's lower directory", de.Name())
		}
	}
	cfg, err := config.Load(vol)
	if err != nil {
		t.Fatal(err)
	}
	master, err := cfg.Unlock(pass)
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	srv, err := fs.Mount(mnt, fs.Options{Lower: vol, Config: cfg, MasterKey: master, ReadOnly: true, Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unmount(srv) })
	if err := srv.WaitMount(); err != nil {
		t.Fatal(err)
	}
	checkImported(t, mnt)
	// An existing volume without a journal is refused.
	os.Remove(JournalPath(vol))
	if _, err := ImportVolume(src, kr, vol, VolumeOptions{Passphrase: pass, Log: zerolog.Nop()}); err == nil {
		t.Error("import into an existing volume without a journal was accepted")
	}
}
