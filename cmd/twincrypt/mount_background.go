package main

// Background mounting. The parent validates everything a user can get wrong
// (mountpoint, config, passphrase) while it still has a terminal, then
// re-executes the binary with the hidden --internal-background-child flag:
//
//	stdin  a pipe carrying the exact passphrase bytes (never argv or the
//	       environment, which other users can read in /proc)
//	fd 3   the readiness pipe: the child writes "ok\n" once mounted, or
//	       "err <exit code> <message>\n", and the parent exits accordingly
//
// The child runs in its own session (setsid) in "/", with stdout and stderr
// on --log FILE or /dev/null, so it survives the parent's terminal.

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/fs"
	"github.com/twincrypt/twincrypt/measure/control"
)

// readyFD is the readiness pipe's descriptor in the child (ExtraFiles[0]).
const readyFD = 3

// childArgs is the command line of the background process. Paths are
// absolute: the child runs in "/".
func childArgs(f mountFlags, plan *mountPlan) []string {
	args := []string{"mount", "--" + childFlag}
	if f.passthrough {
		args = append(args, "--passthrough")
	}
	if f.kernelPassthrough {
		args = append(args, "--kernel-passthrough")
	}
	if f.sharedStorage {
		args = append(args, "--shared-storage")
	}
	if f.noXattr {
		args = append(args, "--noxattr")
	}
	if f.transport != "" && f.transport != fs.DaemonTransport {
		args = append(args, "--transport", f.transport)
	}
	if f.readdir != "" && f.readdir != fs.ReaddirPlus {
		args = append(args, "--readdir", f.readdir)
	}
	if f.uringDepth != 0 {
		args = append(args, "--uring-depth", strconv.Itoa(f.uringDepth))
	}
	if f.idle > 0 {
		args = append(args, "--idle", f.idle.String())
	}
	if o := plan.opts.String(); o != "" {
		args = append(args, "-o", o)
	}
	if f.quiet {
		args = append(args, "--quiet")
	}
	if f.mk.given() {
		args = append(args, "--masterkey") // read from the pipe on stdin
	}
	if f.allowWeakKDF {
		args = append(args, "--allow-weak-kdf")
	}
	args = append(args, plan.instr.args()...)
	return append(args, "--", plan.lower, plan.mnt)
}

// startBackground starts the child, hands it the passphrase and waits for
// its readiness line.
func startBackground(cmd *cobra.Command, f mountFlags, plan *mountPlan, pass []byte) error {
	if !f.instr.noStats {
		// The child would only log this where nobody may look.
		if err := control.CheckDir(); err != nil {
			fmt.Fprintf(cmd.ErrOrStderr(), "twincrypt: warning: %v\n", err)
		}
	}
	pid, _, err := startChild(childArgs(f, plan), f.logFile, pass, "background mount process exited before the mount was ready")
	if err != nil {
		return err
	}
	if !f.quiet {
		fmt.Fprintf(cmd.OutOrStdout(), "Mounted %s at %s (%s) in the background, pid %d.\n",
			plan.lower, plan.mnt, plan.describe(), pid)
	}
	return nil
}

// startChild starts this binary with args as a background process in its
// own session, output to logFile (or nowhere), hands it pass on stdin and
// waits for its readiness line on fd 3: "ok" (with an optional detail
// after a space) or "err <code> <message>". It returns the child's pid and
// the detail; failed says what to report when the child dies without a
// line.
func startChild(args []string, logFile string, pass []byte, failed string) (int, string, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, "", fmt.Errorf("background: find own executable: %w", err)
	}
	passR, passW, err := os.Pipe()
	if err != nil {
		return 0, "", fmt.Errorf("background: %w", err)
	}
	defer passR.Close()
	defer passW.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 0, "", fmt.Errorf("background: %w", err)
	}
	defer readyR.Close()
	defer readyW.Close()

	child := exec.Command(exe, args...)
	child.Dir = "/"
	child.Stdin = passR
	child.ExtraFiles = []*os.File{readyW}
	child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if logFile != "" {
		logOut, closeLog, err := openLog(logFile, nil)
		if err != nil {
			return 0, "", err
		}
		defer closeLog()
		child.Stdout, child.Stderr = logOut, logOut
	}
	if err := child.Start(); err != nil {
		return 0, "", fmt.Errorf("background: start %s: %w", exe, err)
	}
	// Drop the parent's copies of the child's ends, so that EOF on readyR
	// means the child is gone.
	passR.Close()
	readyW.Close()
	// A write error means the child died early; its status says why.
	_, _ = passW.Write(pass)
	passW.Close()

	line, _ := bufio.NewReader(io.LimitReader(readyR, 4096)).ReadString('\n')
	line = strings.TrimRight(line, "\n")
	if detail, ok := strings.CutPrefix(line, "ok "); ok || line == "ok" {
		pid := child.Process.Pid
		_ = child.Process.Release()
		return pid, detail, nil
	}
	waitErr := child.Wait()
	if code, msg, ok := parseChildError(line); ok {
		return 0, "", &codedError{code: code, msg: msg}
	}
	return 0, "", mountFailedErrorf("%s (%v)", failed, waitErr)
}

// parseChildError parses "err <code> <message>".
func parseChildError(line string) (int, string, bool) {
	rest, ok := strings.CutPrefix(line, "err ")
	if !ok {
		return 0, "", false
	}
	codeStr, msg, _ := strings.Cut(rest, " ")
	code, err := strconv.Atoi(codeStr)
	if err != nil || code <= 0 || code > 125 {
		return 0, "", false
	}
	return code, msg, true
}

// runMountChild is the background process: it validates again (cheap, and
// the child must not trust that nothing changed), unlocks with the
// passphrase from stdin, mounts and reports on fd 3.
func runMountChild(cmd *cobra.Command, f mountFlags, lowerArg, mntArg string) error {
	return runChild("mount --background", "background mount process ended without mounting", func(report func(string)) error {
		return mountChild(f, lowerArg, mntArg, func() { report("ok") })
	})
}

// runChild runs serve, the work of a background process that its parent
// started (what) with the readiness pipe as fd 3, and reports on the pipe
// once: the first line serve reports ("ok ..."), else serve's error as
// "err CODE MESSAGE", else that the process ended without doing its work
// (ended). A process started by hand with the internal flag and no pipe
// gets a usage error.
func runChild(what, ended string, serve func(report func(string)) error) error {
	var st unix.Stat_t
	if err := unix.Fstat(readyFD, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return usageErrorf("--%s is internal to '%s'", childFlag, what)
	}
	// Whatever the child execs (fusermount3) must not inherit the pipe, or
	// the parent would not see EOF if the child died.
	syscall.CloseOnExec(readyFD)
	ready := os.NewFile(readyFD, "readiness pipe")
	reported := false
	report := func(line string) {
		if !reported {
			reported = true
			fmt.Fprintln(ready, line)
			ready.Close()
		}
	}
	err := serve(report)
	if err != nil {
		report(fmt.Sprintf("err %d %s", exitCode(err), oneLine(err.Error())))
	}
	report("err 1 " + ended)
	return err
}

func mountChild(f mountFlags, lowerArg, mntArg string, ready func()) error {
	plan, err := planMount(f, lowerArg, mntArg)
	if err != nil {
		return err
	}
	var masterKey []byte
	if plan.cfg != nil && f.mk.given() {
		lk, err := plan.masterKey(f.mk, os.Stdin, io.Discard)
		if err != nil {
			return err
		}
		defer lk.Destroy()
		masterKey = lk.Bytes()
	} else if plan.cfg != nil {
		pass, err := readPassAll(os.Stdin)
		if err != nil {
			return fmt.Errorf("background: read passphrase from parent: %w", err)
		}
		lk, err := plan.unlock(pass)
		wipe(pass)
		if err != nil {
			return err
		}
		defer lk.Destroy()
		masterKey = lk.Bytes()
	}
	if devNull, err := os.Open(os.DevNull); err == nil {
		// Release the pipe; nothing else is read from stdin.
		_ = unix.Dup2(int(devNull.Fd()), 0)
		devNull.Close()
	}
	return serve(plan, masterKey, f, os.Stderr, newLogger(os.Stderr, plan.opts.debug), ready)
}
