package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/names"
	"github.com/twincrypt/twincrypt/fs/fsck"
)

func TestFsckExitCodes(t *testing.T) {
	pf := writePassfile(t, "fsck pass")
	lower := initVolume(t, pf)

	r := twincrypt(t, "", "fsck", "--passfile", pf, lower)
	r.expectExit(t, exitOK, "fsck of a new volume")
	if !strings.Contains(r.stdout, "No problems found.") {
		t.Errorf("fsck of a clean volume says:\n%s", r.stdout)
	}

	// A stray file: its name does not decrypt and its size is torn.
	stray := filepath.Join(lower, "stray.txt")
	if err := os.WriteFile(stray, []byte("xyz"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = twincrypt(t, "", "fsck", "--passfile", pf, lower)
	r.expectExit(t, exitFsckProblems, "fsck with a stray file")
	for _, want := range []string{"name-undecryptable: " + stray, "torn-size: " + stray, "--repair: would move it to /lost+found"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, r.stdout)
		}
	}

	r = twincrypt(t, "", "fsck", "--json", "--passfile", pf, lower)
	r.expectExit(t, exitFsckProblems, "fsck --json")
	var rep fsck.Report
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("--json output: %v\n%s", err, r.stdout)
	}
	if rep.Found != 2 || len(rep.Problems) != 2 || rep.Problems[0].Lower != "stray.txt" || rep.Problems[0].Action != fsck.MoveAside {
		t.Errorf("--json report: %+v", rep)
	}

	// Passphrase and config errors keep their codes.
	twincrypt(t, "", "fsck", "--passfile", writePassfile(t, "wrong"), lower).expectExit(t, exitWrongPassphrase, "fsck, wrong passphrase")
	twincrypt(t, "", "fsck", "--passfile", pf, tempDir(t)).expectExit(t, exitConfigMissing, "fsck without config")
	twincrypt(t, "", "fsck", lower, lower).expectExit(t, exitUsage, "fsck with two arguments")

	r = twincrypt(t, "fsck pass\n", "fsck", "--repair", lower)
	r.expectExit(t, exitFsckRepaired, "fsck --repair, passphrase on stdin")
	if !strings.Contains(r.stdout, "repaired: moved to /lost+found/stray.txt") {
		t.Errorf("repair report:\n%s", r.stdout)
	}
	if _, err := os.Lstat(stray); !os.IsNotExist(err) {
		t.Errorf("stray file still in LOWER: %v", err)
	}
	r = twincrypt(t, "", "fsck", "--passfile", pf, lower)
	r.expectExit(t, exitOK, "fsck after repair")
	if !strings.Contains(r.stdout, "1 entry with damaged content in /lost+found") {
		t.Errorf("fsck after repair does not mention the quarantined entry:\n%s", r.stdout)
	}

	// What cannot be repaired keeps the "problems" code after --repair.
	sub := filepath.Join(lower, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "x"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	r = twincrypt(t, "", "fsck", "--repair", "--passfile", pf, lower)
	r.expectExit(t, exitFsckProblems, "fsck --repair with a lost IV")
	if !strings.Contains(r.stderr, "2 problems found, 1 repaired, 1 not") {
		t.Errorf("stderr: %q", r.stderr)
	}
}

// The mount shows what fsck moved aside; --repair is refused on a mounted
// volume, a check is not.
func TestFsckRepairThroughMount(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "fsck pass")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	if err := os.WriteFile(filepath.Join(mnt, "doc.txt"), []byte("some text"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := twincrypt(t, "", "fsck", "--repair", "--passfile", pf, lower)
	r.expectExit(t, exitError, "fsck --repair of a mounted volume")
	if !strings.Contains(r.stderr, "mounted at "+mnt) {
		t.Errorf("stderr: %q", r.stderr)
	}
	r = twincrypt(t, "", "fsck", "--passfile", pf, lower)
	r.expectExit(t, exitOK, "fsck of a mounted volume")
	if !strings.Contains(r.stdout, "mounted at "+mnt) {
		t.Errorf("no note that the volume is mounted:\n%s", r.stdout)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)

	var file string
	entries, err := os.ReadDir(lower)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name() != config.FileName && e.Name() != names.DirIVFile {
			file = filepath.Join(lower, e.Name())
		}
	}
	if err := os.Truncate(file, 40); err != nil {
		t.Fatal(err)
	}
	r = twincrypt(t, "", "fsck", "--repair", "--passfile", pf, lower)
	r.expectExit(t, exitFsckRepaired, "fsck --repair")
	if !strings.Contains(r.stdout, "torn-size: "+file) || !strings.Contains(r.stdout, "plaintext: /doc.txt") {
		t.Errorf("report:\n%s", r.stdout)
	}

	twincrypt(t, "", "mount", "--background", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "remount")
	if _, err := os.Lstat(filepath.Join(mnt, "lost+found", "doc.txt")); err != nil {
		t.Errorf("/lost+found/doc.txt: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(mnt, "doc.txt")); !os.IsNotExist(err) {
		t.Errorf("/doc.txt still there: %v", err)
	}
}

func TestFsckExitCodeMapping(t *testing.T) {
	if got := exitCode(fsckResult("/l", &fsck.Report{})); got != exitOK {
		t.Errorf("clean: %d", got)
	}
	if got := exitCode(fsckResult("/l", &fsck.Report{Found: 2, Repaired: 1, Repair: true})); got != exitFsckProblems {
		t.Errorf("partly repaired: %d", got)
	}
	err := fsckResult("/l", &fsck.Report{Found: 2, Repaired: 2, Repair: true})
	if got := exitCode(err); got != exitFsckRepaired || !errors.Is(err, errFsckRepaired) {
		t.Errorf("repaired: %d", got)
	}
}
