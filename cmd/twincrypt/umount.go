package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure/control"
)

func newUmountCmd() *cobra.Command {
	var lazy bool
	cmd := &cobra.Command{
		Use:     "umount [flags] MNT",
		Aliases: []string{"unmount"},
		Short:   "Unmount a twincrypt (or any FUSE) mount",
		Long: `Unmount the filesystem mounted at MNT. The mounting process, in the
foreground or in the background, then exits; umount waits for that (up to
30 seconds), so that when it returns LOWER is closed and the --summary file
written. (It finds the daemon through its live-stats socket: not for a
mount made with --no-stats, nor with --lazy.)

As root this calls umount(2) directly; otherwise, or when that is not
permitted, it runs 'fusermount3 -u' (or 'fusermount -u'). The kernel refuses
while files on the mount are open; --lazy detaches the mount now and lets
the kernel finish it when the last file is closed (umount -l, fusermount -z).`,
		Example: `  twincrypt umount ~/vault
  twincrypt umount --lazy ~/vault`,
		Args: exactArgs(1, "MNT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return unmountPath(args[0], lazy)
		},
	}
	cmd.Flags().BoolVarP(&lazy, "lazy", "z", false, "detach now, finish when no longer busy")
	return cmd
}

// unmountPath unmounts the mount at mntArg, refusing paths that are not
// mount points (a typo must not unmount the parent filesystem). Unless
// lazy, it then waits (up to daemonExitWait) for the daemon that served
// the mount to exit, when its stats socket names it: after the unmount
// the daemon still closes LOWER, ends the op log and writes the --summary
// file, and a script that unmounts LOWER's filesystem next, or reads the
// summary, must find that done.
func unmountPath(mntArg string, lazy bool) error {
	var d daemonProc
	if !lazy {
		d = servingDaemon(mntArg)
	}
	err := unmountOnly(mntArg, lazy)
	if err == nil {
		removeStaleSocket(mntArg)
		if d.pid != 0 && !d.waitExit(daemonExitWait) {
			fmt.Fprintf(os.Stderr, "twincrypt umount: unmounted %s; its daemon (pid %d) has not exited after %v\n", mntArg, d.pid, daemonExitWait)
		}
	}
	return err
}

// daemonExitWait bounds how long umount waits for the daemon to exit.
const daemonExitWait = 30 * time.Second

// daemonProc is a process, named by its PID and its start time (so that
// a PID reused meanwhile is not taken for it); pid 0 is none.
type daemonProc struct {
	pid   int
	start string
}

// servingDaemon is the daemon serving the mount at mnt (the process
// listening on its stats socket), if there is one and it is not this
// process (a daemon unmounts its own mount after a signal).
func servingDaemon(mnt string) daemonProc {
	if m, err := cleanMountPath(mnt); err == nil {
		mnt = m
	}
	pid, err := control.ServerPID(mnt)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return daemonProc{}
	}
	start, alive := procStart(pid)
	if !alive {
		return daemonProc{}
	}
	return daemonProc{pid: pid, start: start}
}

// waitExit waits up to limit for d to exit, and reports whether it did.
func (d daemonProc) waitExit(limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for {
		start, alive := procStart(d.pid)
		if !alive || start != d.start {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// procStart returns the start time of process pid (field 22 of
// /proc/PID/stat) and whether it is alive: neither gone nor a zombie.
func procStart(pid int) (string, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it start after the last ')'.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(string(b[i+1:]))
	// f[0] is field 3 (the state), so field 22 is f[19].
	if len(f) < 20 || f[0] == "Z" || f[0] == "X" {
		return "", false
	}
	return f[19], true
}

// removeStaleSocket removes the stats socket of the mount at mnt when no
// daemon answers on it (one killed with SIGKILL could not remove it). A
// live daemon removes its own when it exits.
func removeStaleSocket(mnt string) {
	if m, err := cleanMountPath(mnt); err == nil {
		mnt = m
	}
	control.RemoveStale(mnt)
}

func unmountOnly(mntArg string, lazy bool) error {
	mnt, err := cleanMountPath(mntArg)
	if err != nil {
		return mountpointErrorf("%s: %w", mntArg, err)
	}
	_, mounted, err := findMount(mnt)
	if err != nil {
		return err
	}
	if !mounted {
		return mountpointErrorf("%s is not a mount point", mnt)
	}
	if os.Geteuid() == 0 {
		// A symlink planted at the last element would be followed: the
		// mount at mnt is the one findMount found.
		flags := unix.UMOUNT_NOFOLLOW
		if lazy {
			flags |= unix.MNT_DETACH
		}
		err := unix.Unmount(mnt, flags)
		if err == nil {
			return nil
		}
		if errors.Is(err, unix.EBUSY) {
			return busyError{mnt}
		}
		if !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("unmount %s: %w", mnt, err)
		}
		// EPERM as root happens in user namespaces; fusermount may still work.
	}
	return fusermountUnmount(mnt, lazy)
}

// fusermountUnmount runs fusermount3 -u (or fusermount -u), which lets the
// user who mounted a FUSE filesystem unmount it without privileges.
func fusermountUnmount(mnt string, lazy bool) error {
	bin, err := exec.LookPath("fusermount3")
	if err != nil {
		if bin, err = exec.LookPath("fusermount"); err != nil {
			return fmt.Errorf("unmount %s: not root and neither fusermount3 nor fusermount is installed", mnt)
		}
	}
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	var out bytes.Buffer
	c := exec.Command(bin, append(args, mnt)...)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		if msg := oneLine(out.String()); msg != "" {
			return fmt.Errorf("unmount %s: %s", mnt, msg)
		}
		return fmt.Errorf("unmount %s: %s: %w", mnt, bin, err)
	}
	return nil
}

// busyError is an unmount the kernel refused because the mount is in use
// (EBUSY): errors.Is(err, unix.EBUSY) tells it from the others.
type busyError struct{ mnt string }

func (e busyError) Error() string {
	return fmt.Sprintf("unmount %s: target is busy (close the files that use it, or use --lazy)", e.mnt)
}

func (busyError) Unwrap() error { return unix.EBUSY }
