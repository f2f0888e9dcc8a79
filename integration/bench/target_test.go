package bench

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestSelectTargets(t *testing.T) {
	all := AllTargets(TargetOptions{Exe: "/nonexistent", Size: SizeTiny})
	names := func(ts []Target) string {
		var n []string
		for _, t := range ts {
			n = append(n, t.Name())
		}
		return strings.Join(n, ",")
	}
	dm := NewDMCrypt(TargetOptions{}).Name()
	for _, tc := range []struct {
		sel  string
		want string
	}{
		{"crypt-cbc,native", "native,crypt-cbc"},
		{"dmcrypt,twin", "twin," + dm},
		{"peers", "gocryptfs,encfs,cryfs,securefs,fscrypt"},
		{dm, dm},
	} {
		got, err := SelectTargets(all, strings.Split(tc.sel, ","))
		if err != nil || names(got) != tc.want {
			t.Errorf("SelectTargets(%s) = %s, %v; want %s", tc.sel, names(got), err, tc.want)
		}
	}
	if _, err := SelectTargets(all, []string{"native", "zfs"}); err == nil || !strings.Contains(err.Error(), "zfs") {
		t.Errorf("unknown target: %v", err)
	}
	if d := names(DefaultTargets(TargetOptions{})); d != "native,twin,crypt-xts,crypt-cbc,ext4loop,"+dm+",ecryptfs" {
		t.Errorf("default targets %s", d)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/tmp/a\040b\011c`); got != "/tmp/a b\tc" {
		t.Errorf("got %q", got)
	}
}

// fakeDaemon starts a shell that holds /dev/fuse open (as fd 3, opened
// here: any user gets such a descriptor from fusermount3 for a mount of
// their own), has mark among its arguments and spins for 20 s, as uid
// when uid >= 0.
func fakeDaemon(t *testing.T, mark string, uid int) *exec.Cmd {
	t.Helper()
	fuse, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("a daemon is recognised by holding /dev/fuse open: %v", err)
	}
	defer fuse.Close()
	cmd := exec.Command("/bin/sh", "-c", `end=$(($(date +%s) + 120)); while [ $(date +%s) -lt $end ]; do :; done`, "sh", mark)
	cmd.Dir = "/"
	cmd.ExtraFiles = []*os.File{fuse}
	if uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)}}
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	return cmd
}

// TestFindDaemonOtherUser (issue #16 (7)): another local user starts a
// process with our mount point among its arguments (and /dev/fuse open)
// before our daemon; findDaemon must not pick it (the harness would time
// it and wait for it to exit), only ours.
func TestFindDaemonOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: to start a process as another user")
	}
	mark := filepath.Join(t.TempDir(), "mnt")
	theirs := fakeDaemon(t, mark, 65534)
	deadline := time.Now().Add(time.Minute)
	for !holdsFUSE(theirs.Process.Pid) {
		if time.Now().After(deadline) {
			t.Fatal("the other user's process never opened /dev/fuse")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if pid := findDaemon(mark); pid != 0 {
		t.Fatalf("findDaemon picked pid %d, a process of uid 65534", pid)
	}
	ours := fakeDaemon(t, mark, -1)
	var pid int
	for pid = findDaemon(mark); pid == 0 && time.Now().Before(deadline); pid = findDaemon(mark) {
		time.Sleep(20 * time.Millisecond)
	}
	if pid != ours.Process.Pid {
		t.Errorf("findDaemon = %d, want our process %d", pid, ours.Process.Pid)
	}
}

// A daemon is found by its mount point among its arguments, and its CPU
// time is read from /proc.
func TestFindDaemonAndCPU(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "mnt")
	cmd := fakeDaemon(t, mark, -1)
	var d daemon
	deadline := time.Now().Add(time.Minute)
	for d.pid == 0 && time.Now().Before(deadline) {
		d.attach(mark, 0)
	}
	if d.pid != cmd.Process.Pid {
		t.Fatalf("found pid %d, want %d", d.pid, cmd.Process.Pid)
	}
	for d.cpu() == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if d.cpu() == 0 {
		t.Fatal("a busy process shows no CPU time")
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if !waitGone(d.pid, time.Minute) {
		t.Error("waitGone: a reaped process still counts as running")
	}
	// The last value read stays.
	if d.cpu() == 0 {
		t.Error("CPU time forgotten once the daemon exited")
	}
}

func TestWorkspace(t *testing.T) {
	on := t.TempDir()
	w, err := NewWorkspace(on)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(w.Dir, on) || w.Desc == "" {
		t.Errorf("workspace %+v under %s", w, on)
	}
	os.WriteFile(filepath.Join(w.Dir, "f"), []byte("x"), 0o600)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", w.Dir, err)
	}

	if os.Geteuid() != 0 {
		t.Skip("the dedicated tmpfs needs root")
	}
	w, err = NewWorkspace("")
	if err != nil {
		t.Fatal(err)
	}
	if !isMounted(w.Dir) || !strings.HasPrefix(w.Desc, "tmpfs (dedicated") {
		t.Errorf("no tmpfs: %+v", w)
	}
	// A mount left below is detached, not reached through.
	inner := filepath.Join(w.Dir, "inner")
	os.Mkdir(inner, 0o700)
	if err := syscall.Mount("inner", inner, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err == nil || !strings.Contains(err.Error(), "still mounted") {
		t.Errorf("Close with a mount below: %v", err)
	}
	if isMounted(w.Dir) || isMounted(inner) {
		t.Error("left mounted")
	}
	if _, err := os.Stat(w.Dir); !os.IsNotExist(err) {
		t.Errorf("%s left behind: %v", w.Dir, err)
	}
}

// twincryptBinary builds the twincrypt command into a temporary directory
// ($TWINCRYPT_TEST_BIN names a binary to use instead).
func twincryptBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("TWINCRYPT_TEST_BIN"); p != "" {
		return p
	}
	bin := filepath.Join(t.TempDir(), "twincrypt")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/twincrypt/twincrypt/cmd/twincrypt").CombinedOutput()
	if err != nil {
		t.Fatalf("build twincrypt: %v\n%s", err, out)
	}
	return bin
}

// Every target this machine can run mounts, keeps a file across an
// unmount and a mount, and leaves nothing mounted.
func TestTargetsMountAndKeepData(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts real filesystems")
	}
	var exe string
	if err := needFUSE(); err == nil {
		exe = twincryptBinary(t)
	}
	for _, tg := range AllTargets(TargetOptions{Exe: exe, Size: SizeTiny}) {
		t.Run(tg.Name(), func(t *testing.T) {
			if err := tg.Available(); err != nil {
				t.Skipf("%s not available here: %v", tg.Name(), err)
			}
			if tg.Name() == "cryfs" && os.Getenv("TWINCRYPT_TEST_CRYFS") == "" {
				t.Skip("a CryFS mount takes minutes of scrypt; set TWINCRYPT_TEST_CRYFS=1 to test it")
			}
			work := t.TempDir()
			ctx := context.Background()
			defer func() {
				if err := tg.Cleanup(); err != nil {
					t.Errorf("cleanup: %v", err)
				}
				if m := mountsUnder(work); len(m) > 0 {
					t.Errorf("left mounted: %q", m)
					for _, x := range m {
						syscall.Unmount(x, syscall.MNT_DETACH)
					}
				}
			}()
			if err := tg.Setup(ctx, work); err != nil {
				t.Fatalf("setup: %v", err)
			}
			data := bytes.Repeat([]byte("twincrypt bench target test "), 10000)
			for round := 0; round < 2; round++ {
				mnt, err := tg.Mount(ctx)
				if err != nil {
					t.Fatalf("mount %d: %v", round, err)
				}
				f := filepath.Join(mnt, "f")
				if round == 0 {
					if err := os.WriteFile(f, data, 0o600); err != nil {
						t.Fatal(err)
					}
				} else if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, data) {
					t.Errorf("after remount: %d bytes, %v", len(got), err)
				}
				cpu := tg.DaemonCPU()
				if err := tg.Unmount(ctx); err != nil {
					t.Fatalf("unmount %d: %v", round, err)
				}
				if isMounted(mnt) {
					t.Errorf("%s still mounted", mnt)
				}
				t.Logf("round %d: daemon CPU %v, stats %v", round, cpu, tg.Stats() != nil)
			}
			switch tg.Name() {
			case "twin", "crypt-xts", "crypt-cbc", "dmcrypt-userspace":
				s := tg.Stats()
				if s == nil || len(s.Ops) == 0 {
					t.Errorf("no per-op statistics from our daemon: %+v", s)
				}
			}
			// The lower data is not the plaintext, for the encrypting ones.
			if tg.Name() != "native" && tg.Name() != "twin" && tg.Name() != "ext4loop" {
				if found := grepTree(t, work, data[:28]); found != "" {
					t.Errorf("plaintext found in %s", found)
				}
			}
		})
	}
}

// grepTree returns the first regular file under dir holding needle.
func grepTree(t *testing.T, dir string, needle []byte) string {
	var found string
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || found != "" || !fi.Mode().IsRegular() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, needle) {
			found = p
		}
		return nil
	})
	return found
}
