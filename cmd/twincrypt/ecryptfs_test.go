package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
)

// ecryptfsHome writes what an encrypted home leaves on disk: a lower tree
// with encrypted names (cipher/ecryptfs's writer, checked against kernel
// output there) and a version-2 wrapped-passphrase file.
func ecryptfsHome(t *testing.T, login string) (lower, wrapped string) {
	t.Helper()
	const mountPass = "3f1c0e2a9b8d7c6e5f4a3b2c1d0e9f8a"
	dir := tempDir(t)
	lower = filepath.Join(dir, ".Private")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(lower, 0o700))
	key, _ := ecryptfs.DeriveKey(mountPass, ecryptfs.DefaultSalt)
	fnek, _ := ecryptfs.DeriveKey(mountPass, ecryptfs.FNEKSalt)
	for name, content := range map[string]string{"notes.txt": "my notes\n", "photo.raw": strings.Repeat("p", 10000)} {
		data, _, err := ecryptfs.EncryptFile([]byte(content), key, ecryptfs.DefaultSalt, ecryptfs.WriteOptions{})
		must(err)
		must(os.WriteFile(filepath.Join(lower, ecryptfs.EncryptName(name, fnek, 16)), data, 0o600))
	}
	w, err := ecryptfs.WrapPassphrase(mountPass, login, []byte("saltsalt"))
	must(err)
	wrapped = filepath.Join(dir, "wrapped-passphrase")
	must(os.WriteFile(wrapped, w, 0o600))
	return lower, wrapped
}

func TestEcryptfsImportCLI(t *testing.T) {
	requireFUSE(t)
	lower, wrapped := ecryptfsHome(t, "login secret")
	login := writePassfile(t, "login secret")
	newPass := filepath.Join(tempDir(t), "newpass")
	if err := os.WriteFile(newPass, []byte("new volume pass\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	vol := filepath.Join(tempDir(t), "vol")
	args := func(loginFile string) []string {
		return append(append([]string{"ecryptfs", "import", "--wrapped-passphrase", wrapped, "--login-passfile", loginFile, "--passfile", newPass}, cheapKDF...), lower, vol)
	}

	bad := writePassfile(t, "not the login")
	r := twincrypt(t, "", args(bad)...)
	r.expectExit(t, exitWrongPassphrase, "import with a wrong login passphrase")
	if _, err := os.Stat(vol); !os.IsNotExist(err) {
		t.Errorf("a failed unwrap created the volume: %v", err)
	}

	r = twincrypt(t, "", args(login)...)
	r.expectExit(t, 0, "import")
	if !strings.Contains(r.stdout, "Imported 2 files") {
		t.Errorf("report: %s", r.stdout)
	}
	// The volume opens with its new passphrase and shows the files.
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", newPass, vol, mnt).expectExit(t, 0, "mount the imported volume")
	got, err := os.ReadFile(filepath.Join(mnt, "notes.txt"))
	if err != nil || string(got) != "my notes\n" {
		t.Errorf("notes.txt in the new volume: %q, %v", got, err)
	}
	got, err = os.ReadFile(filepath.Join(mnt, "photo.raw"))
	if err != nil || len(got) != 10000 {
		t.Errorf("photo.raw in the new volume: %d bytes, %v", len(got), err)
	}
}

// A damaged file fails alone: exit 1, named in the output, the rest there.
func TestEcryptfsImportCLIDamaged(t *testing.T) {
	requireFUSE(t)
	lower, wrapped := ecryptfsHome(t, "pw")
	des, _ := os.ReadDir(lower)
	if err := os.Truncate(filepath.Join(lower, des[0].Name()), 100); err != nil {
		t.Fatal(err)
	}
	login := writePassfile(t, "pw")
	vol := filepath.Join(tempDir(t), "vol")
	r := twincrypt(t, "", append(append([]string{"ecryptfs", "import", "-q", "--wrapped-passphrase", wrapped, "--login-passfile", login, "--passfile", login}, cheapKDF...), lower, vol)...)
	r.expectExit(t, exitError, "import of a tree with a truncated file")
	if !strings.Contains(r.stdout, "FAILED") || !strings.Contains(r.stdout, "Imported 1 files") {
		t.Errorf("report: %s", r.stdout)
	}
}

// ecryptfs mount serves in the foreground until twincrypt umount.
func TestEcryptfsMountCLI(t *testing.T) {
	requireFUSE(t)
	lower, wrapped := ecryptfsHome(t, "pw")
	login := writePassfile(t, "pw")
	mnt := newMountpoint(t)
	cmd := exec.Command(binPath, "ecryptfs", "mount", "--wrapped-passphrase", wrapped, "--login-passfile", login, lower, mnt)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		if isMounted(t, mnt) {
			twincrypt(t, "", "umount", "--lazy", mnt)
		}
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for !isMounted(t, mnt) {
		select {
		case <-exited:
			t.Fatalf("ecryptfs mount exited: %v\n%s", waitErr, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not mounted after 60 s:\n%s", mnt, stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	got, err := os.ReadFile(filepath.Join(mnt, "notes.txt"))
	if err != nil || string(got) != "my notes\n" {
		t.Errorf("notes.txt: %q, %v", got, err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "new"), nil, 0o644); err == nil {
		t.Errorf("a file was created on the read-only mount")
	}
	// The instrument is on: twincrypt stats sees the reads.
	st := twincrypt(t, "", "stats", mnt)
	st.expectExit(t, 0, "stats of the eCryptfs mount")
	if !strings.Contains(st.stdout, "read") {
		t.Errorf("stats: %s", st.stdout)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	select {
	case <-exited:
		if waitErr != nil {
			t.Errorf("ecryptfs mount after umount: %v\n%s", waitErr, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Errorf("ecryptfs mount still running 60 s after umount")
	}
}
