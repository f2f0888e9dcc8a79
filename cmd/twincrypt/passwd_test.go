package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
)

func readConfig(t *testing.T, lower string) (*config.Config, []byte) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(lower, config.FileName))
	if err != nil {
		t.Fatal(err)
	}
	var c config.Config
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	return &c, data
}

func noBackup(t *testing.T, lower string) {
	t.Helper()
	if _, err := os.Lstat(filepath.Join(lower, config.BackupName)); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", config.BackupName, err)
	}
}

func TestPasswdChangesPassphrase(t *testing.T) {
	oldPF, newPF := writePassfile(t, "old secret"), writePassfile(t, "new secret")
	lower := initVolume(t, oldPF)
	before, beforeData := readConfig(t, lower)

	r := twincrypt(t, "", "passwd", "--passfile", oldPF, "--new-passfile", newPF, lower)
	r.expectExit(t, exitOK, "passwd")
	if !strings.Contains(r.stdout, "Changed the passphrase of "+lower) {
		t.Errorf("stdout: %q", r.stdout)
	}
	after, afterData := readConfig(t, lower)
	noBackup(t, lower)
	if bytes.Equal(beforeData, afterData) || bytes.Equal(before.KDF.Salt, after.KDF.Salt) || bytes.Equal(before.WrappedKey, after.WrappedKey) {
		t.Error("the config, its salt or its wrapped key did not change")
	}
	if after.KDF.Algorithm != "argon2id" || after.KDF.Time != 5 || after.KDF.MemoryKiB != 7168 || after.KDF.Threads != 1 {
		t.Errorf("the KDF costs changed without flags: %+v", after.KDF)
	}
	if after.Cipher != before.Cipher || after.KeyBytes != before.KeyBytes || after.Creator != before.Creator {
		t.Errorf("passwd changed more than the wrapping: %+v", after)
	}

	// The old passphrase is refused, the new one unlocks (fsck needs no
	// FUSE to tell).
	twincrypt(t, "", "fsck", "--quick", "--passfile", oldPF, lower).expectExit(t, exitWrongPassphrase, "fsck with the old passphrase")
	twincrypt(t, "", "fsck", "--quick", "--passfile", newPF, lower).expectExit(t, exitOK, "fsck with the new passphrase")
}

func TestPasswdMountsWithNewPassphrase(t *testing.T) {
	requireFUSE(t)
	oldPF, newPF := writePassfile(t, "old secret"), writePassfile(t, "new secret")
	lower := initVolume(t, oldPF)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", oldPF, lower, mnt).expectExit(t, 0, "mount")
	if err := os.WriteFile(filepath.Join(mnt, "kept.txt"), []byte("survives passwd"), 0o600); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)

	twincrypt(t, "", "passwd", "--quiet", "--passfile", oldPF, "--new-passfile", newPF, lower).expectExit(t, 0, "passwd")
	twincrypt(t, "", "mount", "--background", "--passfile", oldPF, lower, mnt).expectExit(t, exitWrongPassphrase, "mount with the old passphrase")
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", newPF, lower, mnt).expectExit(t, 0, "mount with the new passphrase")
	if got, err := os.ReadFile(filepath.Join(mnt, "kept.txt")); err != nil || string(got) != "survives passwd" {
		t.Errorf("after passwd: %q, %v", got, err)
	}
}

func TestPasswdWrongOldPassphrase(t *testing.T) {
	pf := writePassfile(t, "right")
	lower := initVolume(t, pf)
	_, before := readConfig(t, lower)
	for _, run := range []func() cliResult{
		func() cliResult {
			return twincrypt(t, "", "passwd", "--passfile", writePassfile(t, "wrong"), "--new-passfile", writePassfile(t, "new"), lower)
		},
		func() cliResult { return twincrypt(t, "wrong\nnew\n", "passwd", lower) },
	} {
		r := run()
		r.expectExit(t, exitWrongPassphrase, "passwd with a wrong old passphrase")
		if !strings.Contains(r.stderr, "wrong passphrase") {
			t.Errorf("stderr: %q", r.stderr)
		}
		if _, after := readConfig(t, lower); !bytes.Equal(before, after) {
			t.Fatal("the config changed after a wrong old passphrase")
		}
		noBackup(t, lower)
	}
}

func TestPasswdStdinAndKDFFlags(t *testing.T) {
	lower := initVolume(t, writePassfile(t, "one"))

	// Both passphrases on stdin, one line each; another KDF, below the
	// minimums: refused, then allowed by the flag.
	r := twincrypt(t, "one\ntwo\n", "passwd", "--quiet", "--kdf", "scrypt", "--scrypt-logn", "10", lower)
	r.expectExit(t, exitUsage, "passwd --kdf scrypt --scrypt-logn 10")
	if !strings.Contains(r.stderr, "below the minimum") || !strings.Contains(r.stderr, "--allow-weak-kdf") {
		t.Errorf("a weak --scrypt-logn: %q", r.stderr)
	}
	twincrypt(t, "one\ntwo\n", "passwd", "--quiet", "--allow-weak-kdf", "--kdf", "scrypt", "--scrypt-logn", "10", lower).expectExit(t, 0, "passwd --kdf scrypt")
	c, _ := readConfig(t, lower)
	if c.KDF.Algorithm != "scrypt" || c.KDF.LogN != 10 || c.KDF.R != kdf.DefaultScryptR || c.KDF.P != kdf.DefaultScryptP || c.KDF.Time != 0 {
		t.Errorf("kdf after --kdf scrypt: %+v", c.KDF)
	}

	// A cost flag alone changes that cost of the current function.
	twincrypt(t, "two\nthree\n", "passwd", "--quiet", "--allow-weak-kdf", "--scrypt-logn", "11", lower).expectExit(t, 0, "passwd --scrypt-logn")
	c, data := readConfig(t, lower)
	if c.KDF.Algorithm != "scrypt" || c.KDF.LogN != 11 {
		t.Errorf("kdf after --scrypt-logn 11: %+v", c.KDF)
	}

	// Bad flags are usage errors, found before any passphrase is read.
	for _, args := range [][]string{
		{"--kdf-time", "2"},
		{"--kdf", "rot13"},
		{"--kdf", "argon2id", "--kdf-memory", "1"},
	} {
		r := twincrypt(t, "three\nfour\n", append(append([]string{"passwd", "--allow-weak-kdf"}, args...), lower)...)
		r.expectExit(t, exitUsage, "passwd "+strings.Join(args, " "))
		if _, after := readConfig(t, lower); !bytes.Equal(data, after) {
			t.Fatalf("passwd %v changed the config", args)
		}
	}
	// The weak config itself is refused (exit 11) by every command that
	// would unlock it, before a passphrase is read, unless the flag says so.
	for _, args := range [][]string{{"passwd"}, {"fsck", "--quick"}, {"path"}, {"mount", "--passfile", writePassfile(t, "three")}} {
		args = append(args, lower)
		switch args[0] {
		case "mount":
			args = append(args, newMountpoint(t))
		case "path":
			args = append(args, "f")
		}
		r := twincrypt(t, "three\nfour\n", args...)
		r.expectExit(t, exitConfigInvalid, strings.Join(args[:1], " ")+" of a config below the minimums")
		if !strings.Contains(r.stderr, "scrypt 128*r*N = 2097152 bytes") || !strings.Contains(r.stderr, "--allow-weak-kdf") ||
			!strings.Contains(r.stderr, "the config was altered by someone who can write LOWER") {
			t.Errorf("%s of a weak config: %q", args[0], r.stderr)
		}
	}
	twincrypt(t, "three\n", "passwd", "--allow-weak-kdf", lower).expectExit(t, exitError, "passwd without a new passphrase")
	twincrypt(t, "three\nfour\n", "passwd", "--quick", lower).expectExit(t, exitUsage, "passwd with an unknown flag")
	twincrypt(t, "three\nfour\n", "passwd", "--allow-weak-kdf", "--passfile", writePassfile(t, "four"), lower).expectExit(t, exitWrongPassphrase, "old from file")
	// Without KDF flags, a passphrase change raises weak costs to the
	// defaults of the same function.
	r = twincrypt(t, "four\n", "passwd", "--allow-weak-kdf", "--passfile", writePassfile(t, "three"), lower)
	r.expectExit(t, exitOK, "old from file, new from stdin")
	if c, _ := readConfig(t, lower); c.KDF.Algorithm != "scrypt" || c.KDF.LogN != kdf.DefaultScryptLogN || !strings.Contains(r.stdout, "now has the default costs") {
		t.Errorf("passwd of a weak config: %+v\n%s", c.KDF, r.stdout)
	}
	twincrypt(t, "", "fsck", "--quick", "--passfile", writePassfile(t, "four"), lower).expectExit(t, exitOK, "fsck with the latest passphrase")
}

func TestPasswdKDFDefaults(t *testing.T) {
	cur := kdf.Params{Algorithm: "pbkdf2", Salt: make([]byte, 32), Iterations: 300000, Hash: "sha512"}
	none := func(string) bool { return false }
	p, raised, err := passwdKDF(cur, initFlags{}, none, false)
	if err != nil || raised || p.Algorithm != "pbkdf2" || p.Iterations != 300000 || p.Hash != "sha512" || p.Salt != nil {
		t.Errorf("no flags: %+v, %v; want the current costs without salt", p, err)
	}
	weak := cur
	weak.Iterations = 1000
	p, raised, err = passwdKDF(weak, initFlags{}, none, true)
	if err != nil || !raised || p.Algorithm != "pbkdf2" || p.Iterations != kdf.DefaultPBKDF2Iter || p.Hash != "sha256" {
		t.Errorf("no flags, current costs below the minimums: %+v, %v; want pbkdf2's defaults", p, err)
	}
	only := func(names ...string) func(string) bool {
		return func(n string) bool {
			for _, m := range names {
				if n == m {
					return true
				}
			}
			return false
		}
	}
	p, _, err = passwdKDF(cur, initFlags{pbkdf2Iter: 250000}, only("pbkdf2-iter"), false)
	if err != nil || p.Iterations != 250000 || p.Hash != "sha512" || p.Salt != nil {
		t.Errorf("--pbkdf2-iter: %+v, %v; want the hash kept", p, err)
	}
	if _, _, err = passwdKDF(cur, initFlags{pbkdf2Iter: 5000}, only("pbkdf2-iter"), false); !isUsage(err) || !errors.Is(err, kdf.ErrWeak) {
		t.Errorf("--pbkdf2-iter 5000: %v, want a usage error wrapping kdf.ErrWeak", err)
	}
	if p, _, err = passwdKDF(cur, initFlags{pbkdf2Iter: 5000}, only("pbkdf2-iter"), true); err != nil || p.Iterations != 5000 {
		t.Errorf("--pbkdf2-iter 5000 --allow-weak-kdf: %+v, %v", p, err)
	}
	p, _, err = passwdKDF(cur, initFlags{kdf: "argon2id"}, only("kdf"), false)
	if err != nil || p.Algorithm != "argon2id" || p.Time != kdf.DefaultArgon2Time || p.Iterations != 0 {
		t.Errorf("--kdf argon2id: %+v, %v; want its defaults", p, err)
	}
}
