package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/integration"
)

// TestInitRefusesWeakKDF: the costs the review found init accepting
// (PBKDF2 x 1, argon2id 8 KiB x 1 pass) and one step below each minimum
// are usage errors that name the minimums and write nothing; the flag
// lets a throwaway volume have them, and that volume is then refused by
// fsck (exit 11) until the flag is given there too.
func TestInitRefusesWeakKDF(t *testing.T) {
	pf := writePassfile(t, "pw")
	for _, flags := range [][]string{
		{"--kdf", "pbkdf2", "--pbkdf2-iter", "1"},
		{"--kdf", "pbkdf2", "--pbkdf2-iter", "599999"},
		{"--kdf", "argon2id", "--kdf-time", "1", "--kdf-memory", "8", "--kdf-threads", "1"},
		{"--kdf", "argon2id", "--kdf-time", "2", "--kdf-memory", "19455", "--kdf-threads", "1"},
		{"--kdf", "scrypt", "--scrypt-logn", "16"},
	} {
		dir := filepath.Join(tempDir(t), "lower")
		r := twincrypt(t, "", append(append([]string{"init", "--quiet", "--passfile", pf}, flags...), dir)...)
		r.expectExit(t, exitUsage, "init "+strings.Join(flags, " "))
		if !strings.Contains(r.stderr, "below the minimum") || !strings.Contains(r.stderr, "minimums: argon2id 46 MiB x 1 pass") {
			t.Errorf("init %v: %q", flags, r.stderr)
		}
		if _, err := os.Lstat(dir); err == nil {
			t.Errorf("init %v made %s", flags, dir)
		}
	}
	lower := filepath.Join(tempDir(t), "weak")
	twincrypt(t, "", "init", "--quiet", "--passfile", pf, "--allow-weak-kdf", "--kdf", "pbkdf2", "--pbkdf2-iter", "1", lower).
		expectExit(t, exitOK, "init --allow-weak-kdf")
	r := twincrypt(t, "", "fsck", "--quick", "--passfile", pf, lower)
	r.expectExit(t, exitConfigInvalid, "fsck of a volume made with --allow-weak-kdf")
	if !strings.Contains(r.stderr, "pbkdf2-sha256 with 1 iterations") {
		t.Errorf("fsck of a weak volume: %q", r.stderr)
	}
	twincrypt(t, "", "fsck", "--quick", "--allow-weak-kdf", "--passfile", pf, lower).expectExit(t, exitOK, "fsck --allow-weak-kdf")

	// A background mount hands the flag to its child, which checks again.
	requireFUSE(t)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "-q", "--passfile", pf, lower, mnt).expectExit(t, exitConfigInvalid, "mount -b of a weak volume")
	twincrypt(t, "", "mount", "-b", "-q", "--allow-weak-kdf", "--passfile", pf, lower, mnt).expectExit(t, exitOK, "mount -b --allow-weak-kdf")
	twincrypt(t, "", "umount", mnt).expectExit(t, exitOK, "umount")
	waitDaemonGone(t, mnt)
}

// TestExampleVolumesNeedAllowWeakKDF: the frozen example volumes
// (argon2id 1 MiB x 1 pass, from before the minimums) keep opening, with
// --allow-weak-kdf, and say how without it.
func TestExampleVolumesNeedAllowWeakKDF(t *testing.T) {
	pf := writePassfile(t, integration.ExamplePassphrase)
	for _, name := range []string{"example-xts", "example-cbc", "example-cbc-v2", "example-xts-plainnames"} {
		lower := filepath.Join(tempDir(t), name)
		if out, err := exec.Command("cp", "-r", filepath.Join("../../testdata", name), lower).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v: %s", name, err, out)
		}
		r := twincrypt(t, "", "fsck", "--quick", "--passfile", pf, lower)
		r.expectExit(t, exitConfigInvalid, "fsck of "+name)
		if !strings.Contains(r.stderr, "add --allow-weak-kdf") {
			t.Errorf("%s: %q", name, r.stderr)
		}
		twincrypt(t, "", "fsck", "--quick", "--allow-weak-kdf", "--passfile", pf, lower).expectExit(t, exitOK, "fsck --allow-weak-kdf of "+name)
	}
}
