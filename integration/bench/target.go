package bench

// Targets drive everything from outside, the way a user would: the
// twincrypt binary for our own mounts, losetup/mkfs.ext4/mount for the
// kernel's filesystems, each peer's own command line. This file has what
// they share: running commands, finding and timing daemons, unmounting,
// loop devices and ext4 images.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// TargetOptions is what every target constructor gets.
type TargetOptions struct {
	// Exe is the twincrypt binary that mounts our filesystems
	// (os.Executable() in the CLI, a freshly built binary in tests).
	Exe string
	// Size scales the block-device images (see imageSize).
	Size Size
}

// benchPassphrase protects the throwaway volumes of a bench run. It is not
// a secret: the data is generated and removed again.
const benchPassphrase = "twincrypt bench passphrase"

// AllTargets returns every target the harness knows, in the order the
// runner interleaves them: the baseline first, then our twin and encrypted
// mounts, the block-level path and its control, then the peers.
func AllTargets(o TargetOptions) []Target {
	return append(DefaultTargets(o), PeerTargets(o)...)
}

// DefaultTargets are the targets that need nothing installed beyond
// FUSE, losetup and mkfs.ext4: native, twin, crypt-xts, crypt-cbc,
// ext4loop and dmcrypt (kernel or userspace, whichever this machine has);
// and the kernel's eCryptfs, which needs its module and ecryptfs-utils
// and is skipped (one line) where they are missing.
func DefaultTargets(o TargetOptions) []Target {
	return []Target{
		NewNative(),
		NewTwin(o),
		NewCrypt(o, "aes-xts"),
		NewCrypt(o, "aes-cbc"),
		NewExt4Loop(o),
		NewDMCrypt(o),
		NewEcryptfs(32),
	}
}

// QuickTargets are the targets of the first, quick bench: the baseline,
// the twin and the default encrypted mount (what FUSE costs and what the
// cipher adds), and, with peers, gocryptfs (skipped where it is not
// installed), the peer most like ours. The rest is --full.
func QuickTargets(o TargetOptions, peers bool) []Target {
	ts := []Target{NewNative(), NewTwin(o), NewCrypt(o, "aes-xts")}
	if peers {
		ts = append(ts, NewGocryptfs())
	}
	return ts
}

// ExtraTargets run only when named in --targets: variants of a default
// target (eCryptfs with its own default 128-bit key; the twin and
// crypt-xts pinned to /dev/fuse or to FUSE over io_uring; crypt-xts with
// --readdir auto and plain; the twin and crypt-xts with --noxattr;
// crypt-cbc-v1, aes-cbc of format version 1; dmcrypt-userspace where
// the default is dmcrypt-kernel).
func ExtraTargets(o TargetOptions) []Target {
	return append([]Target{NewEcryptfs(16),
		NewTransport(o, "", "dev"), NewTransport(o, "aes-xts", "dev"), NewTransport(o, "aes-cbc", "dev"),
		NewTransport(o, "", "uring"), NewTransport(o, "aes-xts", "uring"),
		NewReaddir(o, "aes-xts", "auto"), NewReaddir(o, "aes-xts", "plain"),
		NewNoXattr(o, ""), NewNoXattr(o, "aes-xts"),
		NewFormat(o, "aes-cbc", 1)}, otherDMCrypt(o)...)
}

// SelectableTargets is what --targets picks from: AllTargets, then
// ExtraTargets.
func SelectableTargets(o TargetOptions) []Target {
	return append(AllTargets(o), ExtraTargets(o)...)
}

// PeerTargets are the other encrypting filesystems, skipped where they are
// not installed.
func PeerTargets(o TargetOptions) []Target {
	return []Target{NewGocryptfs(), NewEncfs(), NewCryfs(), NewSecurefs(), NewFscrypt(o)}
}

// SelectTargets picks targets by name from all, in the order of all.
// "dmcrypt" selects whichever dmcrypt variant is present; "peers" selects
// every peer.
func SelectTargets(all []Target, names []string) ([]Target, error) {
	want := map[string]bool{}
	for _, n := range names {
		want[strings.TrimSpace(n)] = true
	}
	delete(want, "")
	var out []Target
	seen := map[string]bool{}
	for _, t := range all {
		n := t.Name()
		alias := ""
		switch {
		case strings.HasPrefix(n, "dmcrypt-"):
			alias = "dmcrypt"
		case isPeer(n):
			alias = "peers"
		}
		if want[n] || (alias != "" && want[alias]) {
			out = append(out, t)
			seen[n] = true
			if alias != "" {
				seen[alias] = true
			}
		}
	}
	var unknown []string
	for n := range want {
		if !seen[n] {
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		var known []string
		for _, t := range all {
			known = append(known, t.Name())
		}
		return nil, fmt.Errorf("unknown target(s) %s (known: %s, dmcrypt, peers)",
			strings.Join(unknown, ", "), strings.Join(known, ", "))
	}
	return out, nil
}

func isPeer(name string) bool {
	switch name {
	case "gocryptfs", "encfs", "cryfs", "securefs", "fscrypt":
		return true
	}
	return false
}

// imageSize is the size of the ext4 images (ext4loop, dmcrypt, fscrypt).
// The images are sparse: they cost only what the workloads write.
func imageSize(s Size) int64 {
	switch s {
	case SizeTiny:
		return 512 << 20
	case SizeSmall:
		return 2 << 30
	case SizeDefault:
		return 6 << 30
	}
	return 12 << 30
}

// run runs a program of a target and returns its combined output. Every
// program runs in its own process group, so that a Ctrl-C on the terminal
// reaches the bench (which then unmounts in order) and not a half-mounted
// daemon. A failure carries the program's output, folded into one line.
func run(ctx context.Context, env []string, stdin string, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	// A daemonising program may leave a child holding our pipe open;
	// do not wait for it beyond the program's own (successful) exit.
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if errors.Is(err, exec.ErrWaitDelay) {
		err = nil
	}
	if err != nil {
		msg := oneLine(out.String())
		if len(msg) > 400 {
			msg = msg[:400] + "…"
		}
		if msg != "" {
			return out.String(), fmt.Errorf("%s %s: %w: %s", filepath.Base(name), firstArg(args), err, msg)
		}
		return out.String(), fmt.Errorf("%s %s: %w", filepath.Base(name), firstArg(args), err)
	}
	return out.String(), nil
}

func firstArg(args []string) string {
	if len(args) == 0 {
		return ""
	}
	return args[0]
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// needProgs returns an error naming the first program not in $PATH.
func needProgs(progs ...string) error {
	for _, p := range progs {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%s is not installed", p)
		}
	}
	return nil
}

// needRoot returns an error saying what needs root.
func needRoot(what string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("%s needs root", what)
	}
	return nil
}

// needFUSE returns nil when this process can mount FUSE filesystems.
func needFUSE() error {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return errors.New("no /dev/fuse")
	}
	if os.Geteuid() != 0 {
		if err := needProgs("fusermount3"); err != nil {
			return errors.New("not root and fusermount3 is not installed")
		}
	}
	return nil
}

// needLoop returns nil when ext4 images can be attached and mounted.
func needLoop(what string) error {
	if err := needRoot(what); err != nil {
		return err
	}
	if err := needProgs("losetup", "mkfs.ext4"); err != nil {
		return err
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		return errors.New("no loop devices (/dev/loop-control)")
	}
	return nil
}

// mkdirs creates directories (and parents) with mode 0700.
func mkdirs(dirs ...string) error {
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
	}
	return nil
}

// realPath resolves symlinks, so that paths compare equal to what daemons
// put in their command lines and what /proc/self/mountinfo shows.
func realPath(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	return filepath.EvalSymlinks(abs)
}

// isMounted reports whether dir is a mount point.
func isMounted(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMount(f[4]) == dir {
			return true
		}
	}
	return false
}

// unescapeMount undoes the octal escapes of /proc/self/mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// unmountBusyBound is how long unmount retries a busy mount.
const unmountBusyBound = 30 * time.Second

// unmount unmounts dir, retrying while it is busy (a daemon that has just
// answered the last request, a process still closing a file), and detaches
// it lazily as a last resort so that the bench never leaves it behind. A
// dir that is not mounted is not an error. The retries go on for
// unmountBusyBound: on 2 cores at load 20 a mount stayed busy for more
// than the 2 s they used to last (gzip on the twin, twice in 240 runs),
// and a lazy detach costs that run its result.
func unmount(dir string) error {
	if !isMounted(dir) {
		return nil
	}
	var err error
	for deadline := time.Now().Add(unmountBusyBound); time.Now().Before(deadline); {
		if os.Geteuid() == 0 {
			err = unix.Unmount(dir, 0)
		} else {
			_, err = run(context.Background(), nil, "", "fusermount3", "-u", dir)
		}
		if err == nil || !isMounted(dir) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	if os.Geteuid() == 0 {
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	} else {
		_, _ = run(context.Background(), nil, "", "fusermount3", "-u", "-z", dir)
	}
	return fmt.Errorf("unmount %s: %v (detached lazily)", dir, err)
}

// findDaemon returns the pid of the process serving the mount at mnt: the
// one whose command line has mnt as an argument (every FUSE daemon is told
// its mount point), that holds /dev/fuse open, and that runs as this user
// (real, effective, saved and filesystem uid), or 0. Any local user can
// start a process with our mount point among its arguments; without the
// uid check the harness would time that process and wait for it to exit.
// Where the mount command reports its daemon's pid (ours does), that pid
// is used instead.
func findDaemon(mnt string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		for _, arg := range strings.Split(string(cmdline), "\x00") {
			if arg == mnt && ownProcess(pid) && holdsFUSE(pid) {
				return pid
			}
		}
	}
	return 0
}

// ownProcess reports whether every uid of pid (real, effective, saved,
// filesystem) is our effective uid.
func ownProcess(pid int) bool {
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(status), "\n") {
		if ids, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(ids)
			if len(f) != 4 {
				return false
			}
			for _, id := range f {
				if id != strconv.Itoa(os.Geteuid()) {
					return false
				}
			}
			return true
		}
	}
	return false
}

// holdsFUSE reports whether pid has /dev/fuse open.
func holdsFUSE(pid int) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		if target, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && target == "/dev/fuse" {
			return true
		}
	}
	return false
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times; Linux fixes it
// at 100 for userspace on every architecture we run on.
const clockTicks = 100

// procCPU returns the user+system CPU time of pid, or false when the
// process is gone.
func procCPU(pid int) (time.Duration, bool) {
	if pid <= 0 {
		return 0, false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// The command name (field 2) may contain spaces and parentheses: the
	// fields that follow start after the last ')'.
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, false
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(ut+st) * time.Second / clockTicks, true
}

// waitGone waits until pid has exited (zombies count as gone), at most d.
func waitGone(pid int, d time.Duration) bool {
	if pid <= 0 {
		return true
	}
	deadline := time.Now().Add(d)
	for {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		if s := string(data); strings.Contains(s[strings.LastIndexByte(s, ')')+1:], " Z ") {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// daemon tracks the process serving a FUSE mount: found after Mount,
// read for its CPU time while mounted, waited for after Unmount.
type daemon struct {
	pid     int
	lastCPU time.Duration
}

// attach finds the daemon of mnt (pid > 0 when the caller knows it).
func (d *daemon) attach(mnt string, pid int) {
	if pid <= 0 {
		pid = findDaemon(mnt)
	}
	d.pid, d.lastCPU = pid, 0
}

// cpu returns the daemon's CPU time so far; once it has exited, the last
// value read.
func (d *daemon) cpu() time.Duration {
	if c, ok := procCPU(d.pid); ok {
		d.lastCPU = c
	}
	return d.lastCPU
}

// detach unmounts mnt and waits for the daemon to exit, so that what it
// writes at exit (our --summary) is complete and nothing of this mount
// runs into the next one.
func (d *daemon) detach(mnt string) error {
	d.cpu()
	err := unmount(mnt)
	if !waitGone(d.pid, 15*time.Second) && err == nil {
		err = fmt.Errorf("daemon %d of %s did not exit after unmount", d.pid, mnt)
	}
	d.pid = 0
	return err
}

// loopAttach attaches file to a free loop device and returns the device.
func loopAttach(ctx context.Context, file string) (string, error) {
	out, err := run(ctx, nil, "", "losetup", "--find", "--show", file)
	if err != nil {
		return "", err
	}
	dev := strings.TrimSpace(out)
	if !strings.HasPrefix(dev, "/dev/") {
		return "", fmt.Errorf("losetup printed %q, not a device", dev)
	}
	return dev, nil
}

// loopDetach detaches dev; an empty dev is a no-op.
func loopDetach(dev string) error {
	if dev == "" {
		return nil
	}
	var err error
	for i := 0; i < 10; i++ {
		if _, err = run(context.Background(), nil, "", "losetup", "-d", dev); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// mkfsExt4 makes an ext4 filesystem on dev. Inode tables and journal are
// written now rather than by a kernel thread during the first runs, and
// nothing is discarded (a discard on an image file punches holes, on the
// userspace dm-crypt path it would reach the daemon).
func mkfsExt4(ctx context.Context, dev string, extra ...string) error {
	args := append([]string{"-q", "-F", "-E", "nodiscard,lazy_itable_init=0,lazy_journal_init=0"}, extra...)
	_, err := run(ctx, nil, "", "mkfs.ext4", append(args, dev)...)
	return err
}

// mountExt4 mounts the ext4 filesystem on dev at dir.
func mountExt4(dev, dir string) error {
	if err := unix.Mount(dev, dir, "ext4", 0, ""); err != nil {
		return fmt.Errorf("mount %s at %s: %w", dev, dir, err)
	}
	return nil
}

// sparseFile creates path as a sparse file of size bytes.
func sparseFile(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writePassfile writes the bench passphrase to dir/pass and returns the path.
func writePassfile(dir string) (string, error) {
	p := filepath.Join(dir, "pass")
	return p, os.WriteFile(p, []byte(benchPassphrase+"\n"), 0o600)
}
