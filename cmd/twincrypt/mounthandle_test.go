package main

import (
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Fixed here (issue #39, finding 3): the daemon unmounted by path. The
// vault's mount point is top/p/sub/mnt, p owned by uid 1000; once the
// vault is mounted, uid 1000 renames p/sub to p/sub2 and plants a symlink
// p/sub -> a directory whose mnt is another filesystem (a tmpfs). On
// SIGTERM (what systemctl stop sends) and on --idle, the daemon took the
// tmpfs away and left the vault mounted. Now it unmounts its own mount,
// wherever it has moved, and leaves the other alone; on both transports.
func TestDaemonUnmountsItsOwnMount(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: to act as another user, and to mount the decoy tmpfs")
	}
	for _, how := range []string{"sigterm", "idle"} {
		for _, tr := range []string{"dev", "uring"} {
			t.Run(how+"-"+tr, func(t *testing.T) {
				top := tempDir(t)
				for p := top; p != "/" && p != os.TempDir(); p = path.Dir(p) {
					if err := os.Chmod(p, 0o755); err != nil {
						t.Fatal(err)
					}
				}
				p := filepath.Join(top, "p")
				mnt := filepath.Join(p, "sub", "mnt")
				moved := filepath.Join(p, "sub2", "mnt")
				noErr(t, os.MkdirAll(mnt, 0o755))
				noErr(t, os.Chown(p, 1000, 1000))
				decoySub := filepath.Join(top, "decoy")
				decoy := filepath.Join(decoySub, "mnt")
				noErr(t, os.MkdirAll(decoy, 0o755))
				noErr(t, unix.Mount("tmpfs", decoy, "tmpfs", 0, "size=1m"))
				t.Cleanup(func() {
					if isMounted(t, decoy) {
						unix.Unmount(decoy, unix.MNT_DETACH)
					}
				})
				noErr(t, os.WriteFile(filepath.Join(decoy, "decoy"), nil, 0o644))

				args := []string{"mount", "--background", "--quiet", "--passthrough", "--transport", tr}
				if how == "idle" {
					args = append(args, "--idle", "1s")
				}
				twincrypt(t, "", append(args, tempDir(t), mnt)...).expectExit(t, 0, "mount")
				unmountOnCleanup(t, moved)
				unmountOnCleanup(t, mnt)
				pids := daemonPIDs(t, mnt)
				if len(pids) != 1 {
					t.Fatalf("daemons serving %s: %v", mnt, pids)
				}
				if got := mountTransport(t, mnt); !strings.HasPrefix(got, tr) {
					t.Fatalf("--transport %s: the mount runs on %s", tr, got)
				}
				start, _ := procStart(pids[0])
				daemon := daemonProc{pid: pids[0], start: start}

				// The attack, as the owner of p.
				attack := exec.Command("sh", "-c", `mv "$1/sub" "$1/sub2" && ln -s "$2" "$1/sub"`, "sh", p, decoySub)
				attack.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}
				if out, err := attack.CombinedOutput(); err != nil {
					t.Fatalf("rename and symlink as uid 1000: %v: %s", err, out)
				}
				if _, err := os.Stat(filepath.Join(mnt, "decoy")); err != nil {
					t.Fatalf("%s does not lead to the decoy after the attack: %v", mnt, err)
				}

				if how == "sigterm" {
					noErr(t, syscall.Kill(daemon.pid, syscall.SIGTERM))
				}
				// Until the daemon exits or the decoy is gone.
				for deadline := time.Now().Add(60 * time.Second); isMounted(t, decoy) && !daemon.waitExit(0); {
					if time.Now().After(deadline) {
						t.Fatalf("daemon (pid %d) still running 60 s after the %s", daemon.pid, how)
					}
					time.Sleep(20 * time.Millisecond)
				}
				if !isMounted(t, decoy) {
					t.Fatalf("the daemon unmounted the other filesystem (%s)", decoy)
				}
				if isMounted(t, moved) {
					t.Errorf("the vault is still mounted (at %s) after the daemon exited", moved)
				}
			})
		}
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
