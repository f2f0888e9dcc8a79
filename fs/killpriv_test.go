package fs

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/twincrypt/twincrypt/measure"
	"golang.org/x/sys/unix"
)

// TestKillPriv: with FUSE_HANDLE_KILLPRIV_V2 the daemon, not the kernel,
// clears set-user-ID and set-group-ID bits when an unprivileged user
// writes, truncates or opens with O_TRUNC. Every mount must leave the same
// mode as the native filesystem, whose behaviour is the oracle.
func TestKillPriv(t *testing.T) {
	onLowers(t, testKillPriv)
}

// onLowers runs f with otherUserDirsIn on a tmpfs and on the test's
// temporary directory (ext4 on the CI machine: `df -T /tmp` says which).
func onLowers(t *testing.T, f func(t *testing.T, dirs map[string]string)) {
	t.Run("tmpfs", func(t *testing.T) { f(t, otherUserDirsIn(t, tmpfsDir(t))) })
	t.Run("tempdir", func(t *testing.T) { f(t, otherUserDirsIn(t, "")) })
}

// tmpfsDir mounts a tmpfs for the test and returns its root.
func tmpfsDir(t *testing.T) string {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=64m,mode=0755"); err != nil {
		t.Skipf("cannot mount a tmpfs here: %v", err)
	}
	t.Cleanup(func() {
		// After the FUSE mounts on it are gone (cleanups run in reverse).
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount the tmpfs: %v", err)
			syscall.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir
}

func testKillPriv(t *testing.T, dirs map[string]string) {
	type change struct {
		name  string
		mode  os.FileMode // with the setid bits, as syscall mode bits
		asUsr bool
		cmd   string // shell command run on the file $F
		gid   int    // group of the file (default root)
	}
	changes := []change{
		{"write-suid-sgid-gx", 06777, true, `printf x >> "$F"`, 0},
		{"write-sgid-no-gx", 06767, true, `printf x >> "$F"`, 0},
		{"truncate", 06777, true, `truncate -s 1 "$F"`, 0},
		{"open-trunc", 06777, true, `: > "$F"`, 0},
		{"write-as-root", 06777, false, `printf x >> "$F"`, 0},
		{"write-plain", 0777, true, `printf x >> "$F"`, 0},
		{"write-sgid-in-group", 02767, true, `printf x >> "$F"`, 1000},
		// Issue 41 (3): fallocate modifies the file as a write does.
		{"fallocate", 06666, true, `fallocate -o 0 -l 8192 "$F"`, 0},
		{"fallocate-keep-size", 06666, true, `fallocate -n -o 0 -l 8192 "$F"`, 0},
		{"punch", 06666, true, `fallocate -p -o 0 -l 4096 "$F"`, 0},
		{"zero", 06666, true, `fallocate -z -o 0 -l 4096 "$F"`, 0},
		{"fallocate-as-root", 06666, false, `fallocate -o 0 -l 8192 "$F"`, 0},
		{"punch-sgid-in-group", 02666, true, `fallocate -p -o 0 -l 4096 "$F"`, 1000},
	}
	modes := map[string]map[string]uint32{}
	// A fallocate mode the lower lacks (tmpfs: zero range) fails
	// natively before the bits go; through FUSE the kernel removes them
	// before it asks the daemon (docs/differences.md).
	unsupported := map[string]bool{}
	for _, c := range changes {
		modes[c.name] = map[string]uint32{}
		for _, target := range []string{"native", "xts", "cbc", "twin"} {
			f := filepath.Join(dirs[target], c.name)
			must(t, os.WriteFile(f, []byte("content"), 0600))
			must(t, os.Chown(f, 0, c.gid))
			must(t, syscall.Chmod(f, uint32(c.mode)))
			var out []byte
			var err error
			if c.asUsr {
				out, err = asUser("env", "F="+f, "sh", "-c", c.cmd)
			} else {
				out, err = runSh("F="+f, c.cmd)
			}
			if err != nil {
				// What the lower cannot do (tmpfs: no zero range)
				// fails on every mount, and leaves the mode as is.
				if strings.Contains(string(out), "not supported") {
					t.Logf("%s on %s: %s", c.name, target, out)
					unsupported[c.name] = true
					err = nil
				} else {
					t.Fatalf("%s on %s: %v: %s", c.name, target, err, out)
				}
			}
			var st syscall.Stat_t
			must(t, syscall.Stat(f, &st))
			modes[c.name][target] = st.Mode & 07777
		}
	}
	for _, c := range changes {
		m := modes[c.name]
		for _, target := range []string{"xts", "cbc", "twin"} {
			if m[target] != m["native"] && !unsupported[c.name] {
				t.Errorf("%s: mode %04o on %s, %04o natively", c.name, m[target], target, m["native"])
			}
		}
	}
	// The oracle does what the kernel documents, so the comparison above
	// has teeth.
	if m := modes["write-suid-sgid-gx"]["native"]; m != 0777 {
		t.Errorf("native: a write by another user left mode %04o, want 0777", m)
	}
	if m := modes["write-sgid-no-gx"]["native"]; m != 0767 {
		// Not group-executable, but the writer is not in the group.
		t.Errorf("native: a write by another user left mode %04o, want 0767", m)
	}
	if m := modes["write-sgid-in-group"]["native"]; m != 02767 {
		t.Errorf("native: a write by a member of the file's group left mode %04o, want 2767", m)
	}
	if m := modes["punch"]["native"]; m != 0666 {
		t.Errorf("native: a hole punched by another user left mode %04o, want 0666", m)
	}
	if m := modes["write-as-root"]["native"]; m != 06777 {
		t.Errorf("native: a write by root left mode %04o, want 6777", m)
	}
}

// runSh runs a shell command with one extra environment variable, from /
// (never from a FUSE mount this process serves).
func runSh(env, cmd string) ([]byte, error) {
	c := exec.Command("env", env, "sh", "-c", cmd)
	c.Dir = "/"
	return c.CombinedOutput()
}

// TestNoCapabilityGetxattrPerWrite: the kernel no longer asks GETXATTR
// security.capability before every write (FUSE_HANDLE_KILLPRIV_V2).
func TestNoCapabilityGetxattrPerWrite(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			rec := measure.NewRecorder("test")
			tm.mount(t, func(o *Options) { o.Recorder = rec })
			f, err := os.Create(filepath.Join(tm.mnt, "f"))
			must(t, err)
			const writes = 200
			buf := bytes.Repeat([]byte("y"), 512)
			for i := 0; i < writes; i++ {
				_, err := f.Write(buf)
				must(t, err)
			}
			must(t, f.Close())
			snap := statsByOp(rec.Snapshot())
			if n := snap["write"].Count; n < writes {
				t.Fatalf("%d writes counted for %d write calls: the check would prove nothing", n, writes)
			}
			if n := snap["getxattr"].Count; n > 4 {
				t.Errorf("%d GETXATTR requests for %d writes: the kernel still asks security.capability per write", n, writes)
			}
			t.Logf("%s: %d writes, %d getxattr", v.name, snap["write"].Count, snap["getxattr"].Count)
		})
	}
}

// Found by make soak (seed 196007647581, worker s00, step 427): a file
// another user makes with open(O_CREAT|O_TRUNC, 04755) lost its
// set-user-ID bit. The kernel flags such a CREATE OPEN_KILL_SUIDGID (for
// O_TRUNC, whether or not the file exists), and killPriv cleared the bits
// of the new file; natively a file just made is not truncated and keeps
// them. (A CREATE that finds the file returns ESTALE: the kernel then
// opens it with OPEN, whose flag does apply: open-trunc of TestKillPriv.)
// The caller is a process of another user (the differential tester's
// setfsuid threads keep CAP_FSETID, and the kernel sets no flag for
// them); the link makes the kernel ask the mode again.
func TestKillPrivCreateTrunc(t *testing.T) {
	dirs := otherUserDirs(t)
	// The test binary, where the other user may run it.
	exe := filepath.Join(filepath.Dir(dirs["native"]), "helper")
	b, err := os.ReadFile(os.Args[0])
	must(t, err)
	must(t, os.WriteFile(exe, b, 0755))
	t.Cleanup(func() { os.Remove(exe) })
	modes := map[string]uint32{}
	for _, target := range []string{"native", "xts", "cbc", "twin"} {
		d := filepath.Join(dirs[target], "d")
		must(t, os.Mkdir(d, 0777))
		must(t, os.Chmod(d, 0777))
		f := filepath.Join(d, "f")
		if out, err := asUser("env", createTruncEnv+"="+f, exe, "-test.run=^TestKillPrivCreateTruncHelper$"); err != nil {
			t.Fatalf("create on %s: %v: %s", target, err, out)
		}
		must(t, os.Link(f, f+"2"))
		var st syscall.Stat_t
		must(t, syscall.Stat(f, &st))
		modes[target] = st.Mode & 07777
	}
	if modes["native"] != 04755 {
		t.Fatalf("native: open(O_CREAT|O_TRUNC, 04755) by another user made mode %04o, want 4755", modes["native"])
	}
	for _, target := range []string{"xts", "cbc", "twin"} {
		if modes[target] != modes["native"] {
			t.Errorf("open(O_CREAT|O_TRUNC, 04755) by another user: mode %04o on %s, %04o natively", modes[target], target, modes["native"])
		}
	}
}

const createTruncEnv = "TWINCRYPT_CREATE_TRUNC"

// TestKillPrivCreateTruncHelper is not a test: TestKillPrivCreateTrunc
// runs the test binary as another user with TWINCRYPT_CREATE_TRUNC=PATH,
// and it makes PATH with open(O_CREAT|O_TRUNC, 04755) under umask 022.
func TestKillPrivCreateTruncHelper(t *testing.T) {
	p := os.Getenv(createTruncEnv)
	if p == "" {
		t.Skip("helper process for TestKillPrivCreateTrunc")
	}
	syscall.Umask(022)
	fd, err := syscall.Open(p, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_TRUNC|syscall.O_CLOEXEC, 04755)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Close(fd)
}

// Issue 41 (2): a chown keeps a set-group-ID bit natively when the file is
// not group-executable and the caller is in the file's group or holds
// CAP_FSETID (setattr_should_drop_sgid); root chowning a file of a group
// it is not in kept it natively and lost it on the mount. The set-user-ID
// bit goes on every chown, root's too.
func TestKillPrivChown(t *testing.T) {
	onLowers(t, testKillPrivChown)
}

func testKillPrivChown(t *testing.T, dirs map[string]string) {
	type change struct {
		name  string
		mode  uint32
		asUsr bool
		cmd   string
	}
	changes := []change{
		{"root-chown", 06644, false, `chown 2000:2000 "$F"`},
		{"root-chown-gx", 06754, false, `chown 2000:2000 "$F"`},
		{"root-chown-same", 06644, false, `chown 1000:1000 "$F"`},
		{"root-chown-none", 06644, false, `perl -e 'chown -1, -1, $ENV{F} or die "$!"'`},
		{"owner-chown-none", 06644, true, `perl -e 'chown -1, -1, $ENV{F} or die "$!"'`},
		{"owner-chgrp-own-group", 06644, true, `chgrp 1000 "$F"`},
		{"owner-chgrp-gx", 06754, true, `chgrp 1000 "$F"`},
		// The rule looks at the group before the change: out of one
		// the owner is not in, the bit goes.
		{"owner-chgrp-from-foreign", 02644, true, `chgrp 1000 "$F"`},
	}
	modes := map[string]map[string]uint32{}
	for _, c := range changes {
		modes[c.name] = map[string]uint32{}
		for _, target := range []string{"native", "xts", "cbc", "twin"} {
			f := filepath.Join(dirs[target], c.name)
			must(t, os.WriteFile(f, []byte("content"), 0600))
			gid := 1000
			if c.name == "owner-chgrp-from-foreign" {
				gid = 2000
			}
			must(t, os.Chown(f, 1000, gid))
			must(t, syscall.Chmod(f, c.mode))
			var out []byte
			var err error
			if c.asUsr {
				out, err = asUser("env", "F="+f, "sh", "-c", c.cmd)
			} else {
				out, err = runSh("F="+f, c.cmd)
			}
			if err != nil {
				t.Fatalf("%s on %s: %v: %s", c.name, target, err, out)
			}
			var st syscall.Stat_t
			must(t, syscall.Stat(f, &st))
			modes[c.name][target] = st.Mode & 07777
		}
	}
	for _, c := range changes {
		m := modes[c.name]
		for _, target := range []string{"xts", "cbc", "twin"} {
			if m[target] != m["native"] {
				t.Errorf("%s: mode %04o on %s, %04o natively", c.name, m[target], target, m["native"])
			}
		}
	}
	if m := modes["root-chown"]["native"]; m != 02644 {
		t.Errorf("native: root's chown left mode %04o, want 2644 (set-group-ID kept: root holds CAP_FSETID)", m)
	}
	if m := modes["owner-chgrp-from-foreign"]["native"]; m != 0644 {
		t.Errorf("native: the owner's chgrp out of a group it is not in left mode %04o, want 0644", m)
	}
	if m := modes["root-chown-gx"]["native"]; m != 0754 {
		t.Errorf("native: root's chown of a group-executable file left mode %04o, want 0754", m)
	}
}
