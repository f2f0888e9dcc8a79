package bench

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEcryptfsOptions: the mount options answer every question
// mount.ecryptfs would ask (key, cipher, key size, filename encryption and
// its key, passthrough, sig cache), for both key sizes; bad input is
// refused rather than passed to mount.
func TestEcryptfsOptions(t *testing.T) {
	for _, kb := range []int{16, 32} {
		got, err := ecryptfsOptions(kb, "0123456789abcdef", "/w/ecryptfs/passwd")
		if err != nil {
			t.Fatal(err)
		}
		want := "key=passphrase:passphrase_passwd_file=/w/ecryptfs/passwd,ecryptfs_cipher=aes," +
			"ecryptfs_key_bytes=" + map[int]string{16: "16", 32: "32"}[kb] +
			",ecryptfs_enable_filename_crypto=y,ecryptfs_fnek_sig=0123456789abcdef,ecryptfs_passthrough=n,no_sig_cache"
		if got != want {
			t.Errorf("key bytes %d:\n got %s\nwant %s", kb, got, want)
		}
	}
	for _, bad := range []struct {
		kb        int
		sig, file string
		complaint string
	}{
		{20, "0123456789abcdef", "/p", "20 bytes"},
		{32, "0123456789ABCDEF", "/p", "hex"},
		{32, "0123456789abcde", "/p", "hex"},
		{32, "0123456789abcdef,x", "/p", "hex"},
		{32, "0123456789abcdef", "rel/p", "absolute"},
		{32, "0123456789abcdef", "/a,ecryptfs_passthrough=y", "absolute"},
		{32, "0123456789abcdef", "/a b", "absolute"},
	} {
		if _, err := ecryptfsOptions(bad.kb, bad.sig, bad.file); err == nil || !strings.Contains(err.Error(), bad.complaint) {
			t.Errorf("ecryptfsOptions(%d, %q, %q) = %v, want an error about %s", bad.kb, bad.sig, bad.file, err, bad.complaint)
		}
	}
}

// TestParseAddPassphrase: both signatures of `ecryptfs-add-passphrase
// --fnek` are taken in order; fewer than two is an error.
func TestParseAddPassphrase(t *testing.T) {
	out := "Inserted auth tok with sig [d395309aaad4de06] into the user session keyring\n" +
		"Inserted auth tok with sig [9c5e7e9e2ef2a1b3] into the user session keyring\n"
	sig, fnek, err := parseAddPassphrase(out)
	if err != nil || sig != "d395309aaad4de06" || fnek != "9c5e7e9e2ef2a1b3" {
		t.Errorf("got %q %q %v", sig, fnek, err)
	}
	if _, _, err := parseAddPassphrase(strings.SplitN(out, "\n", 2)[0]); err == nil {
		t.Error("one signature accepted")
	}
}

// TestEcryptfsSkip: a kernel whose /proc/filesystems lacks ecryptfs skips
// the target with one line saying so (modprobe cannot add it: the list is
// a file of the test's); one that lists it goes on to ecryptfs-utils.
func TestEcryptfsSkip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the root check comes first")
	}
	if !ecryptfsInKernel("nodev\tsysfs\nnodev\tecryptfs\n\text4\n") || ecryptfsInKernel("nodev\tsysfs\n\text4\nnodev\tecryptfs2\n") {
		t.Error("ecryptfsInKernel misreads /proc/filesystems")
	}
	dir := t.TempDir()
	list := filepath.Join(dir, "filesystems")
	old := procFilesystems
	procFilesystems = list
	t.Cleanup(func() { procFilesystems = old })

	os.WriteFile(list, []byte("nodev\tsysfs\nnodev\ttmpfs\n\text4\n"), 0o600)
	for _, tg := range []Target{NewEcryptfs(32), NewEcryptfs(16)} {
		err := tg.Available()
		if !errors.Is(err, errNoEcryptfs) || err.Error() != "no ecryptfs in this kernel" {
			t.Errorf("%s without ecryptfs in the kernel: %v", tg.Name(), err)
		}
	}

	os.WriteFile(list, []byte("nodev\tsysfs\nnodev\tecryptfs\n"), 0o600)
	t.Setenv("PATH", dir) // no ecryptfs-utils
	if err := NewEcryptfs(32).Available(); err == nil || !strings.Contains(err.Error(), "ecryptfs-utils") {
		t.Errorf("without ecryptfs-utils: %v", err)
	}
	for _, p := range []string{"ecryptfs-add-passphrase", "mount.ecryptfs"} {
		os.WriteFile(filepath.Join(dir, p), []byte("#!/bin/sh\n"), 0o700)
	}
	if err := NewEcryptfs(32).Available(); err != nil {
		t.Errorf("with ecryptfs in the kernel and ecryptfs-utils: %v", err)
	}
	if n := NewEcryptfs(16).Name(); n != "ecryptfs-aes128" {
		t.Errorf("16-byte target named %q", n)
	}
	if !strings.Contains(NewEcryptfs(32).(Noter).Note(), "kernel's eCryptfs") {
		t.Error("note does not name the kernel's driver")
	}
}

// TestSelectEcryptfs: ecryptfs is a default target, ecryptfs-aes128 only
// when named.
func TestSelectEcryptfs(t *testing.T) {
	o := TargetOptions{}
	got, err := SelectTargets(SelectableTargets(o), []string{"ecryptfs-aes128", "ecryptfs"})
	if err != nil || len(got) != 2 || got[0].Name() != "ecryptfs" || got[1].Name() != "ecryptfs-aes128" {
		t.Errorf("SelectTargets: %v %v", got, err)
	}
	for _, tg := range AllTargets(o) {
		if tg.Name() == "ecryptfs-aes128" {
			t.Error("ecryptfs-aes128 runs unasked")
		}
	}
}
