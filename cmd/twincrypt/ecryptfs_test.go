package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
