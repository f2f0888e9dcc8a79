package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestHelperMountArgs(t *testing.T) {
	tests := []struct {
		in   []string
		want []string // nil: a usage error
	}{
		// What mount.fuse3 passes for "mount -t fuse.twincrypt L M -o passfile=/etc/x,allow_other,ro".
		{[]string{"L", "M", "-o", "passfile=/etc/x,allow_other,ro,dev,suid"},
			[]string{"mount", "--background", "--quiet", "--passfile", "/etc/x", "-o", "allow_other,ro", "--", "L", "M"}},
		// fstab conventions are tolerated; users implies noexec, which is kept.
		{[]string{"L", "M", "-o", "rw,noauto,_netdev,nofail,x-systemd.automount,users,user=bob,noexec,nosuid,nodev,defaults,comment=x"},
			[]string{"mount", "--background", "--quiet", "-o", "noexec", "--", "L", "M"}},
		{[]string{"L", "M", "-o", "ro,rw,noexec,exec"}, []string{"mount", "--background", "--quiet", "--", "L", "M"}},
		{[]string{"L", "M"}, []string{"mount", "--background", "--quiet", "--", "L", "M"}},
		{[]string{"L", "M", "-opassthrough,oplog=/var/log/o,log=/var/log/l,summary=/s.json", "-o", "nonempty,debug"},
			[]string{"mount", "--background", "--quiet", "--passthrough", "--oplog", "/var/log/o", "--log", "/var/log/l",
				"--summary", "/s.json", "-o", "nonempty,debug", "--", "L", "M"}},
		{[]string{"L", "M", "-o", "shared_storage,ro"},
			[]string{"mount", "--background", "--quiet", "--shared-storage", "-o", "ro", "--", "L", "M"}},
		{[]string{"L", "M", "-o", "shared_storage=1"}, nil},
		{[]string{"L", "M", "-o", "noxattr,ro"},
			[]string{"mount", "--background", "--quiet", "--noxattr", "-o", "ro", "--", "L", "M"}},
		{[]string{"L", "M", "-o", "noxattr=1"}, nil},
		{[]string{"L", "M", "-o", "extpass=/usr/bin/systemd-ask-password --timeout=0,ro"},
			[]string{"mount", "--background", "--quiet", "--extpass", "/usr/bin/systemd-ask-password --timeout=0", "-o", "ro", "--", "L", "M"}},
		{[]string{"L", "M", "-o", "extpass="}, nil},
		{[]string{"L", "M", "-o", "readdir=auto,ro"},
			[]string{"mount", "--background", "--quiet", "--readdir", "auto", "-o", "ro", "--", "L", "M"}},
		{[]string{"L", "M", "-o", "idle=30m,ro"},
			[]string{"mount", "--background", "--quiet", "--idle", "30m", "-o", "ro", "--", "L", "M"}},
		// Issue 41: the atime family goes to the mount; suid and dev only
		// as allow_suid, allow_dev (mount.fuse3 adds suid,dev to every line).
		{[]string{"L", "M", "-o", "noatime,nodiratime,relatime,strictatime,lazytime,dev,suid"},
			[]string{"mount", "--background", "--quiet", "-o", "noatime,nodiratime,relatime,strictatime,lazytime", "--", "L", "M"}},
		{[]string{"L", "M", "-o", "allow_suid,allow_dev,dev,suid"},
			[]string{"mount", "--background", "--quiet", "-o", "suid,dev", "--", "L", "M"}},
		{[]string{"L", "M", "-o", "noatime=1"}, nil},
		{[]string{"L", "M", "-o", "bogus"}, nil},
		{[]string{"L", "M", "-o", "passfile="}, nil},
		{[]string{"L", "M", "-o", "ro=1"}, nil},
		{[]string{"L", "M", "-f"}, nil},
		{[]string{"L", "M", "extra"}, nil},
	}
	for _, tt := range tests {
		got, err := helperMountArgs(tt.in)
		if tt.want == nil {
			if err == nil || exitCode(err) != exitUsage {
				t.Errorf("helperMountArgs(%q) = %q, %v; want a usage error", tt.in, got, err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("helperMountArgs(%q) = %q, %v;\nwant %q", tt.in, got, err, tt.want)
		}
	}
}

// TestHelperFormNeedsDirectory: a first argument that is neither a command
// nor a directory is still an unknown command.
// TestHelperRemount: "mount -o remount,..." reaches the helper with the
// mount's options from mountinfo, then the new ones; the later wins.
func TestHelperRemount(t *testing.T) {
	const keep = syscall.MS_REMOUNT | syscall.MS_NOSUID | syscall.MS_NODEV
	tests := []struct {
		opts  string
		flags uintptr
		ok    bool
	}{
		{"ro,nosuid,nodev,relatime,remount,noatime,user_id=0,group_id=0,default_permissions,max_read=1048576",
			keep | syscall.MS_RDONLY | syscall.MS_NOATIME, true},
		{"ro,nosuid,nodev,noatime,remount,rw,relatime,user_id=0", keep | syscall.MS_RELATIME, true},
		{"rw,nosuid,nodev,noexec,remount,nodiratime,lazytime", keep | syscall.MS_NOEXEC | syscall.MS_NODIRATIME | 1<<25, true},
		{"rw,passfile=/x,dev,suid", syscall.MS_REMOUNT, false},
	}
	for _, tt := range tests {
		mnt, flags, ok, err := helperRemount([]string{"L", "M", "-o", tt.opts})
		if err != nil || mnt != "M" || ok != tt.ok || ok && flags != tt.flags {
			t.Errorf("helperRemount(-o %s) = %q, %#x, %v, %v; want M, %#x, %v", tt.opts, mnt, flags, ok, err, tt.flags, tt.ok)
		}
	}
}

func TestHelperFormNeedsDirectory(t *testing.T) {
	dir := tempDir(t)
	twincrypt(t, "", "mout", dir, dir).expectExit(t, exitUsage, "a mistyped command")
	r := twincrypt(t, "", dir, dir, "-o", "bogus")
	r.expectExit(t, exitUsage, "helper form, unknown option")
	if !strings.Contains(r.stderr, `unknown mount option "bogus"`) {
		t.Errorf("stderr %q does not name the option", r.stderr)
	}
}

// TestMountHelperFstab mounts for real through mount(8) and fuse3's
// mount.fuse3, as a user and systemd do: "mount -t fuse.twincrypt" and
// "mount MNT" from an fstab (mount -T FILE) with noauto,
// x-systemd.automount, _netdev, nofail and users among the options, then
// umount(8); for aes-xts, aes-cbc, plaintext names and the passthrough
// twin. mount(8) runs helpers without PATH, so mount.fuse3's /bin/sh finds
// twincrypt in its default search path: each case runs in a private mount
// namespace (unshare) where the freshly built binary is bind-mounted over
// /usr/local/sbin, the first directory of that path; nothing outside the
// namespace changes.
func TestMountHelperFstab(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: mount -t and a private mount namespace need root")
	}
	if _, err := os.Stat("/sbin/mount.fuse3"); err != nil {
		t.Skip("skipping: /sbin/mount.fuse3 missing (Debian package fuse3)")
	}
	for _, tool := range []string{"unshare", "mount", "umount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s missing (Debian packages util-linux, mount)", tool)
		}
	}
	for _, c := range []struct {
		name string
		init []string // nil: the twin
		// extpass: the passphrase comes from a program (extpass=)
		// instead of passfile=.
		extpass bool
	}{
		{"xts", []string{"--cipher", "aes-xts"}, false},
		{"cbc", []string{"--cipher", "aes-cbc"}, false},
		{"plainnames", []string{"--plaintext-names"}, false},
		{"twin", nil, false},
		{"xts-extpass", []string{"--cipher", "aes-xts"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			pf := writePassfile(t, "fstab pass "+c.name)
			var lower, auth string
			if c.init != nil {
				lower = initVolume(t, pf, c.init...)
				auth = "passfile=" + pf
				if c.extpass {
					prog := filepath.Join(tempDir(t), "askpass")
					if err := os.WriteFile(prog, []byte("#!/bin/sh\nprintf '%s\\n' 'fstab pass "+c.name+"'\n"), 0o700); err != nil {
						t.Fatal(err)
					}
					auth = "extpass=" + prog
				}
			} else {
				lower = filepath.Join(tempDir(t), "plain")
				if err := os.Mkdir(lower, 0o755); err != nil {
					t.Fatal(err)
				}
				auth = "passthrough"
			}
			mnt := newMountpoint(t)
			t.Cleanup(func() { killHelperDaemons(t, mnt) })
			fstab := filepath.Join(tempDir(t), "fstab")
			line := lower + " " + mnt + " fuse.twincrypt " + auth + ",ro,noauto,x-systemd.automount,_netdev,nofail,users 0 0\n"
			if err := os.WriteFile(fstab, []byte("# test fstab\n"+line), 0o644); err != nil {
				t.Fatal(err)
			}
			const content = "written through mount -t fuse.twincrypt"
			script := `set -eu
trap 'umount -l "$MNT" 2>/dev/null || true' EXIT
mount --bind "$BINDIR" /usr/local/sbin
mount -t fuse.twincrypt "$LOWER" "$MNT" -o "$AUTH,allow_other,noatime,nodiratime"
echo "mountinfo1: $(grep " $MNT " /proc/self/mountinfo)"
printf '%s' "$CONTENT" > "$MNT/file.txt"
echo "read1: $(cat "$MNT/file.txt")"
mount -o remount,ro "$MNT"
echo "remount ro: $(grep " $MNT " /proc/self/mountinfo)"
if (echo x > "$MNT/other") 2>/dev/null; then echo "write ro: allowed"; else echo "write ro: refused"; fi
mount -o remount,rw,relatime "$MNT"
echo "remount rw: $(grep " $MNT " /proc/self/mountinfo)"
if (echo x > "$MNT/other") 2>/dev/null; then echo "write rw: allowed"; else echo "write rw: refused"; fi
rm -f "$MNT/other"
umount "$MNT"
echo "after umount1: $(grep -c " $MNT " /proc/self/mountinfo || true)"
mount -T "$FSTAB" "$MNT"
echo "mountinfo2: $(grep " $MNT " /proc/self/mountinfo)"
echo "read2: $(cat "$MNT/file.txt")"
if (echo x > "$MNT/other") 2>/dev/null; then echo "write2: allowed"; else echo "write2: refused"; fi
umount "$MNT"
if mount -t fuse.twincrypt "$LOWER" "$MNT" -o "$AUTH,bogus" 2>"$ERRFILE"; then echo "bogus: mounted"; umount "$MNT"; fi
echo "bogus stderr: $(cat "$ERRFILE")"
echo done
`
			cmd := exec.Command("unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script)
			cmd.Env = append(os.Environ(), "BINDIR="+filepath.Dir(binPath), "LOWER="+lower, "MNT="+mnt, "AUTH="+auth,
				"FSTAB="+fstab, "CONTENT="+content, "ERRFILE="+filepath.Join(tempDir(t), "err"))
			cmd.Dir = "/"
			out, err := cmd.CombinedOutput()
			t.Logf("namespace script output:\n%s", out)
			if err != nil {
				t.Fatalf("script: %v", err)
			}
			lines := map[string]string{}
			for _, l := range strings.Split(string(out), "\n") {
				if k, v, ok := strings.Cut(l, ": "); ok {
					lines[k] = v
				}
			}
			mi1 := strings.Fields(lines["mountinfo1"])
			mi2 := strings.Fields(lines["mountinfo2"])
			// mountinfo: ... mount-options - fstype source super-options
			if len(mi1) < 10 || mi1[len(mi1)-3] != "fuse.twincrypt" || !strings.Contains(mi1[len(mi1)-1], "allow_other") {
				t.Errorf("mount -t: mountinfo %q; want a fuse.twincrypt mount with allow_other", lines["mountinfo1"])
			}
			// Issue 41: the atime flags reach the mount, and remount
			// switches read-only and back keeping nosuid,nodev.
			if len(mi1) < 10 || !strings.Contains(mi1[5], "noatime") || !strings.Contains(mi1[5], "nodiratime") || !strings.Contains(mi1[5], "nosuid,nodev") {
				t.Errorf("mount -o noatime,nodiratime: mountinfo %q; want noatime,nodiratime and nosuid,nodev", lines["mountinfo1"])
			}
			ro, rw := strings.Fields(lines["remount ro"]), strings.Fields(lines["remount rw"])
			if len(ro) < 10 || !strings.HasPrefix(ro[5], "ro,") || !strings.Contains(ro[5], "nosuid,nodev") || lines["write ro"] != "refused" {
				t.Errorf("mount -o remount,ro: mountinfo %q, write %q; want ro, nosuid,nodev, refused", lines["remount ro"], lines["write ro"])
			}
			if len(rw) < 10 || !strings.HasPrefix(rw[5], "rw,") || !strings.Contains(rw[5], "nosuid,nodev") || !strings.Contains(rw[5], "relatime") ||
				lines["write rw"] != "allowed" {
				t.Errorf("mount -o remount,rw,relatime: mountinfo %q, write %q; want rw, nosuid,nodev, relatime, allowed", lines["remount rw"], lines["write rw"])
			}
			if lines["read1"] != content || lines["read2"] != content {
				t.Errorf("read back %q and %q; want %q", lines["read1"], lines["read2"], content)
			}
			if lines["after umount1"] != "0" {
				t.Errorf("still mounted after umount(8): %q", lines["after umount1"])
			}
			if len(mi2) < 10 || mi2[len(mi2)-3] != "fuse.twincrypt" || !strings.HasPrefix(mi2[len(mi2)-1], "ro,") ||
				!strings.Contains(mi2[5], "noexec") || strings.Contains(mi2[len(mi2)-1], "allow_other") {
				t.Errorf("fstab mount: mountinfo %q; want fuse.twincrypt, ro, noexec (from users), no allow_other", lines["mountinfo2"])
			}
			if lines["write2"] != "refused" {
				t.Errorf("write on the ro fstab mount: %q", lines["write2"])
			}
			if lines["bogus"] == "mounted" || !strings.Contains(lines["bogus stderr"], `twincrypt: unknown mount option "bogus"`) {
				t.Errorf("mount -o bogus: %q, stderr %q; want a refusal that names the option", lines["bogus"], lines["bogus stderr"])
			}
			if lines["done"] != "" || !strings.Contains(string(out), "\ndone\n") {
				t.Errorf("script did not finish")
			}
			// The daemons exited with their mounts (umount(8) alone stops them).
			deadline := time.Now().Add(60 * time.Second)
			for len(helperDaemons(mnt)) > 0 && time.Now().Before(deadline) {
				time.Sleep(50 * time.Millisecond)
			}
			if pids := helperDaemons(mnt); len(pids) > 0 {
				t.Errorf("daemons %v still serve %s after umount", pids, mnt)
			}
			switch c.name {
			case "xts", "cbc", "xts-extpass":
				assertNoPlaintext(t, lower, "file.txt", []byte(content))
			case "plainnames":
				if got, err := os.ReadFile(filepath.Join(lower, "file.txt")); err != nil || bytes.Contains(got, []byte(content)) {
					t.Errorf("plaintext-names LOWER file.txt: %v, plaintext content: %v", err, bytes.Contains(got, []byte(content)))
				}
			default:
				if got, err := os.ReadFile(filepath.Join(lower, "file.txt")); err != nil || string(got) != content {
					t.Errorf("twin LOWER file.txt = %q, %v", got, err)
				}
			}
		})
	}
}

// helperDaemons lists background mount processes of mnt, whatever path
// they were started from (inside the test's namespace the binary is
// /usr/local/sbin/twincrypt).
func helperDaemons(mnt string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(cmdline, []byte("--"+childFlag)) && bytes.Contains(cmdline, []byte("\x00"+mnt+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killHelperDaemons kills (by pid) the daemons this test started for mnt
// that are still running: their mounts live in a namespace the test can
// no longer reach.
func killHelperDaemons(t *testing.T, mnt string) {
	for _, pid := range helperDaemons(mnt) {
		t.Errorf("killing leftover daemon %d of %s", pid, mnt)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

// TestMountMirrorRefusesFilledVolume: 'mount --mirror' with an empty
// mirror directory over a volume that has files is a usage error that
// says why, and mounts nothing; with a copy of the plaintext it mounts.
func TestMountMirrorRefusesFilledVolume(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "mirror pass")
	lower := initVolume(t, pf)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	if err := os.WriteFile(filepath.Join(mnt, "old.txt"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)

	empty := tempDir(t)
	r := twincrypt(t, "", "mount", "-b", "--passfile", pf, "--mirror", empty, lower, mnt)
	r.expectExit(t, exitUsage, "mount --mirror EMPTY over a volume with files")
	if !strings.Contains(r.stderr, `the volume has "old.txt" that the mirror lacks`) || !strings.Contains(r.stderr, "cp -a MNT/.") {
		t.Errorf("stderr %q does not say what is wrong and what to do", r.stderr)
	}
	if isMounted(t, mnt) {
		t.Fatalf("%s mounted despite the refusal", mnt)
	}
	if err := os.WriteFile(filepath.Join(empty, "old.txt"), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf, "--mirror", empty, lower, mnt).expectExit(t, 0, "mount --mirror COPY")
	if err := os.WriteFile(filepath.Join(mnt, "old.txt"), []byte("new\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(empty, "old.txt")); err != nil || string(got) != "new\n" {
		t.Errorf("mirror old.txt = %q, %v; want the write mirrored", got, err)
	}
}
