package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestInfo(t *testing.T) {
	lower := initVolume(t, writePassfile(t, "pw"), "--cipher", "aes-cbc", "--key-bytes", "16")

	// No passphrase is asked: stdin is empty and must not be read.
	r := twincrypt(t, "", "info", lower)
	r.expectExit(t, exitOK, "info")
	for _, want := range []string{
		"lower:     " + lower,
		"creator:   twincrypt ",
		"version:   3",
		"cipher:    aes-cbc (aes-cbc-essiv:sha256/512), 128-bit key, AES-128-CBC-ESSIV",
		"names:     encrypted",
		"kdf:       argon2id (t=5, m=7 MiB, p=1), 32-byte salt",
		"contents:  0 directories, 0 files, 0 symlinks, 0 other",
		"metadata:  1 directory IV, 0 long-name sidecars",
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("info lacks %q:\n%s", want, r.stdout)
		}
	}

	r = twincrypt(t, "", "info", "--json", lower)
	r.expectExit(t, exitOK, "info --json")
	var v volumeInfo
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	if v.Cipher != "aes-cbc" || v.KeyBytes != 16 || v.KeyBits != 128 || v.Version != 3 || v.PlaintextNames ||
		v.KDF.Algorithm != "argon2id" || v.KDF.MemoryKiB != 7168 || v.KDF.SaltBytes != 32 || v.Contents == nil {
		t.Errorf("info --json: %+v", v)
	}
	if strings.Contains(r.stdout, "wrapped_key") || strings.Contains(r.stdout, `"salt"`) {
		t.Errorf("info --json prints the wrapped key or the salt:\n%s", r.stdout)
	}

	twincrypt(t, "", "info", tempDir(t)).expectExit(t, exitConfigMissing, "info without config")
	if err := os.WriteFile(filepath.Join(lower, "twincrypt.conf"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "info", lower).expectExit(t, exitConfigInvalid, "info with a corrupt config")
}

func TestInfoCounts(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "pw")
	lower := initVolume(t, pf, "--plaintext-names")
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	if err := os.MkdirAll(filepath.Join(mnt, "a", "b"), 0o700); err != nil {
		t.Fatal(err)
	}
	for name, size := range map[string]int{"a/one": 1, "a/b/big": 10000, "empty": 0} {
		if err := os.WriteFile(filepath.Join(mnt, name), make([]byte, size), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("a/one", filepath.Join(mnt, "link")); err != nil {
		t.Fatal(err)
	}
	r := twincrypt(t, "", "info", "--json", lower)
	r.expectExit(t, exitOK, "info --json of a mounted volume")
	var v volumeInfo
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatal(err)
	}
	c := v.Contents
	if c.Dirs != 2 || c.Files != 3 || c.Symlinks != 1 || c.PlainBytes != 10001 || c.LowerBytes != 10001+2*48 || c.TornFiles != 0 {
		t.Errorf("counts: %+v", c)
	}
	if v.MountedAt != mnt || !v.PlaintextNames {
		t.Errorf("mounted_at %q, plaintext_names %v", v.MountedAt, v.PlaintextNames)
	}
}

func TestHumanSize(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 5 << 30: "5.0 GiB"} {
		if got := humanSize(n); got != want {
			t.Errorf("humanSize(%d) = %q, want %q", n, got, want)
		}
	}
}
