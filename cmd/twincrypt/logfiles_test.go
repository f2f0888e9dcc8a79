package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestMountRefusesPlantedLogFiles (issue #16 (5)): in a directory open to
// all, like /tmp, another user (uid 65534) has put a symlink to a file of
// the victim's, or a world-readable file of their own, where the victim's
// --log, --oplog or --summary will go. The mount is refused with a
// message that says why, nothing is mounted, and the planted file and the
// symlink's target are left as they were. A log file of one's own that is
// world-readable is made 0600.
func TestMountRefusesPlantedLogFiles(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: to plant files of another user")
	}
	pf := writePassfile(t, "log file passphrase")
	lower := initVolume(t, pf)
	shared := tempDir(t)
	if err := os.Chmod(shared, 0o1777); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(tempDir(t), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, flag := range []string{"--log", "--oplog", "--summary"} {
		for _, plant := range []string{"symlink", "file"} {
			t.Run(flag[2:]+"-"+plant, func(t *testing.T) {
				p := filepath.Join(shared, flag[2:]+"-"+plant)
				want := "belongs to uid 65534"
				if plant == "symlink" {
					want = "is a symlink"
					if err := os.Symlink(victim, p); err != nil {
						t.Fatal(err)
					}
					os.Lchown(p, 65534, 65534)
				} else {
					if err := os.WriteFile(p, []byte("theirs"), 0o644); err != nil {
						t.Fatal(err)
					}
					os.Chmod(p, 0o644)
					if err := os.Chown(p, 65534, 65534); err != nil {
						t.Fatal(err)
					}
				}
				mnt := newMountpoint(t)
				unmountOnCleanup(t, mnt)
				args := []string{"mount", "-b", "-q", "--passfile", pf, flag, p}
				if flag == "--log" {
					args = append(args, "-o", "debug")
				}
				r := twincrypt(t, "", append(args, lower, mnt)...)
				r.expectExit(t, 1, "mount "+flag+" to a planted "+plant)
				if !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, p) {
					t.Errorf("message %q does not say %q of %s", r.stderr, want, p)
				}
				if _, mounted, _ := findMount(mnt); mounted {
					t.Errorf("%s is mounted", mnt)
				}
				if b, _ := os.ReadFile(victim); string(b) != "precious" {
					t.Errorf("symlink target changed: %q", b)
				}
				if plant == "file" {
					st, _ := os.Stat(p)
					if b, _ := os.ReadFile(p); string(b) != "theirs" || st.Mode().Perm() != 0o644 {
						t.Errorf("planted file changed: %q, mode %v", b, st.Mode().Perm())
					}
				}
			})
		}
	}
	t.Run("own-world-readable", func(t *testing.T) {
		p := filepath.Join(shared, "own.log")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o644)
		mnt := newMountpoint(t)
		unmountOnCleanup(t, mnt)
		twincrypt(t, "", "mount", "-b", "-q", "--passfile", pf, "--log", p, "-o", "debug", lower, mnt).expectExit(t, 0, "mount with own log")
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("own log: %v, mode %v, want 0600", err, st.Mode().Perm())
		}
		twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	})
}
