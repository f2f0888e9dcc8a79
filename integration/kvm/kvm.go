// Package kvm runs a command on a real distribution kernel in a virtual
// machine, for the kernel paths this machine's own kernel lacks:
// device-mapper (cryptsetup open, the kernel's dm-crypt) and eCryptfs.
//
// The guest is Debian's packaged kernel (linux-image-amd64, 6.1 on
// bookworm), fetched with `apt-get download` and extracted into a cache
// directory, never installed into the host's /boot. It boots under
// qemu-system-x86_64 with a small initramfs built here (busybox-static and
// the modules for virtio, 9p, ext4, loop, dm-crypt, eCryptfs and FUSE, with
// the crypto modules they load on demand), which mounts the host's root
// read-only over 9p and runs the command chrooted into it: the host's own
// cryptsetup, mkfs, ecryptfs-utils and test binaries run on the guest
// kernel. A second, writable 9p share (Options.Share, at GuestShare in the
// guest) carries inputs in and results out; /run and /tmp are tmpfs; raw
// image files are attached as virtio disks (/dev/vda, /dev/vdb, ...).
//
//	k, _ := kvm.PrepareKernel(ctx, "")
//	res, _ := kvm.Run(ctx, k, "cryptsetup --version", kvm.Options{Share: dir})
//	fmt.Print(res.Output, res.ExitStatus, res.Accel)
//
// KVM is used where it works. On machines where KVM is itself nested
// virtualization the guest can stop right after the kernel's decompressor:
// Run gives KVM a bounded time to reach init (a marker line on the serial
// console) and otherwise boots again under TCG, qemu's emulator, which is
// 10-50 times slower. Result.Accel says which ran: figures measured under
// TCG are functional, not performance.
package kvm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// EnvAccel forces an accelerator ("kvm" or "tcg") instead of probing.
const EnvAccel = "TWINCRYPT_VM_ACCEL"

// ErrNoQEMU means qemu-system-x86_64 is not installed.
var ErrNoQEMU = errors.New("kvm: qemu-system-x86_64 not found (apt install qemu-system-x86)")

// errKVMStalled is a KVM boot that printed no init marker in time.
var errKVMStalled = errors.New("kvm: the KVM guest did not reach init")

// Options configure one run.
type Options struct {
	// Share is a host directory mounted read-write at GuestShare; the
	// command starts there. Required: Run keeps its control files in
	// Share/.twincrypt-vm.
	Share string
	// Disks are raw image files attached in order as /dev/vda, /dev/vdb...
	// The command sees their guest names in $DISK0, $DISK1, ...
	Disks []string
	// ScratchMiB > 0 adds a sparse scratch disk of that size after Disks,
	// named in $SCRATCH; it is deleted after the run.
	ScratchMiB int
	// Env is added to the command's environment ("KEY=value").
	Env []string
	// MemMiB and CPUs size the guest (1024 MiB and 2 by default).
	MemMiB, CPUs int
	// Accel is AccelKVM or AccelTCG; empty chooses (see Accel).
	Accel string
	// Timeout bounds the whole run (10 minutes by default).
	Timeout time.Duration
	// KVMProbe bounds how long a KVM boot may take to reach init before
	// Run falls back to TCG (20 s by default).
	KVMProbe time.Duration
	// Console receives the serial console as it comes: kernel messages,
	// init's markers and the command's output.
	Console io.Writer
}

// Result is a finished run.
type Result struct {
	Output     string // the command's stdout and stderr, interleaved
	ExitStatus int
	Accel      string        // the accelerator that ran it
	Boot       time.Duration // from starting qemu to the command starting
	Elapsed    time.Duration // the whole run, qemu start to exit
	Release    string        // the guest kernel's release
}

// Available returns nil when Run can work here: qemu is installed. The
// kernel's availability is PrepareKernel's error.
func Available() error {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return ErrNoQEMU
	}
	return nil
}

// Run boots k, runs script with /bin/sh in the guest, and returns its
// output and exit status. An error means the VM itself failed (qemu, the
// boot, a timeout), not the command.
func Run(ctx context.Context, k *Kernel, script string, o Options) (*Result, error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.Share == "" {
		return nil, errors.New("kvm: Options.Share is required")
	}
	// qemu's option syntax splits at commas.
	if strings.Contains(o.Share, ",") {
		return nil, fmt.Errorf("kvm: share path %q contains a comma", o.Share)
	}
	if o.MemMiB == 0 {
		o.MemMiB = 1024
	}
	if o.CPUs == 0 {
		o.CPUs = 2
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Minute
	}
	if o.KVMProbe == 0 {
		o.KVMProbe = 20 * time.Second
	}
	ctl := filepath.Join(o.Share, controlDir)
	if err := os.RemoveAll(ctl); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(ctl, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(ctl)
	disks := append([]string(nil), o.Disks...)
	env := append([]string(nil), o.Env...)
	for i := range o.Disks {
		env = append(env, fmt.Sprintf("DISK%d=/dev/vd%c", i, 'a'+i))
	}
	if o.ScratchMiB > 0 {
		scratch := filepath.Join(ctl, "scratch.img")
		if err := sparse(scratch, int64(o.ScratchMiB)<<20); err != nil {
			return nil, err
		}
		env = append(env, fmt.Sprintf("SCRATCH=/dev/vd%c", 'a'+len(disks)))
		disks = append(disks, scratch)
	}
	if len(disks) > 24 {
		return nil, fmt.Errorf("kvm: %d disks, at most 24", len(disks))
	}
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("kvm: environment entry %q is not KEY=value", kv)
		}
	}
	for name, data := range map[string]string{"cmd.sh": cmdWrapper, "script.sh": script} {
		if err := os.WriteFile(filepath.Join(ctl, name), []byte(data), 0o644); err != nil {
			return nil, err
		}
	}
	// The command learns its accelerator from $TWINCRYPT_VM: what it
	// measures under TCG is function, not performance.
	writeEnv := func(accel string) error {
		var b strings.Builder
		for _, kv := range append(env, "TWINCRYPT_VM="+accel) {
			k, v, _ := strings.Cut(kv, "=")
			fmt.Fprintf(&b, "export %s=%s\n", k, shellQuote(v))
		}
		return os.WriteFile(filepath.Join(ctl, "env"), []byte(b.String()), 0o644)
	}

	accel := o.Accel
	if accel == "" {
		accel = chooseAccel(k)
	}
	if err := writeEnv(accel); err != nil {
		return nil, err
	}
	res, err := boot(ctx, k, accel, disks, o)
	if errors.Is(err, errKVMStalled) {
		if o.Console != nil {
			fmt.Fprintf(o.Console, "twincrypt-vm: %v (within %v); booting again under TCG\n", err, o.KVMProbe)
		}
		rememberAccel(k, AccelTCG)
		accel = AccelTCG
		if err := writeEnv(accel); err != nil {
			return nil, err
		}
		res, err = boot(ctx, k, accel, disks, o)
	} else if err == nil && accel == AccelKVM {
		rememberAccel(k, AccelKVM)
	}
	if err != nil {
		return nil, err
	}
	out, _ := os.ReadFile(filepath.Join(ctl, "output"))
	res.Output = string(out)
	status, err := os.ReadFile(filepath.Join(ctl, "status"))
	if err != nil {
		return res, fmt.Errorf("kvm: the command did not finish (no exit status); output:\n%s", tail(res.Output, 4000))
	}
	if res.ExitStatus, err = strconv.Atoi(strings.TrimSpace(string(status))); err != nil {
		return res, fmt.Errorf("kvm: exit status %q: %w", status, err)
	}
	return res, nil
}

// boot runs one qemu to the end.
func boot(ctx context.Context, k *Kernel, accel string, disks []string, o Options) (*Result, error) {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-machine", "pc", "-m", strconv.Itoa(o.MemMiB), "-smp", strconv.Itoa(o.CPUs),
		"-kernel", k.Vmlinuz, "-initrd", k.Initramfs,
		"-append", "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init",
		"-serial", "stdio",
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path=" + o.Share + ",mount_tag=share,security_model=none,multidevs=remap",
	}
	if accel == AccelKVM {
		args = append(args, "-accel", "kvm", "-cpu", "host")
	} else {
		args = append(args, "-accel", "tcg", "-cpu", "max")
	}
	for _, d := range disks {
		if strings.Contains(d, ",") {
			return nil, fmt.Errorf("kvm: disk path %q contains a comma", d)
		}
		args = append(args, "-drive", "file="+d+",if=virtio,format=raw")
	}
	cmd := exec.CommandContext(ctx, "qemu-system-x86_64", args...)
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start qemu: %w", err)
	}

	res := &Result{Accel: accel}
	initSeen, readySeen := make(chan struct{}), make(chan struct{})
	var console consoleTail
	scanned := make(chan struct{})
	go func() {
		defer close(scanned)
		var onceInit, onceReady sync.Once
		r := bufio.NewReader(stdout)
		for {
			line, err := r.ReadString('\n')
			if line != "" {
				console.add(line)
				if o.Console != nil {
					io.WriteString(o.Console, line)
				}
				if i := strings.Index(line, markerInit+" "); i >= 0 {
					res.Release = strings.TrimSpace(line[i+len(markerInit)+1:])
					onceInit.Do(func() { close(initSeen) })
				}
				if strings.Contains(line, markerReady) {
					res.Boot = time.Since(start)
					onceReady.Do(func() { close(readySeen) })
				}
			}
			if err != nil {
				return
			}
		}
	}()
	done := make(chan error, 1)
	go func() { <-scanned; done <- cmd.Wait() }()

	var probe <-chan time.Time
	if accel == AccelKVM {
		t := time.NewTimer(o.KVMProbe)
		defer t.Stop()
		probe = t.C
	}
	for {
		select {
		case <-initSeen:
			initSeen, probe = nil, nil
			continue
		case <-probe:
			_ = cmd.Process.Kill()
			<-done
			return nil, errKVMStalled
		case err := <-done:
			res.Elapsed = time.Since(start)
			if initSeen != nil && accel == AccelKVM && ctx.Err() == nil {
				// KVM failed before init: qemu refused the host CPU
				// (an MSR it cannot set, as nested KVM does) or the guest
				// died early. TCG may still run it.
				return nil, fmt.Errorf("%w: qemu: %v: %s", errKVMStalled, err, oneLine(stderr.String()))
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("kvm: no end within %v (%s); console:\n%s", o.Timeout, accel, console.String())
			}
			if err != nil {
				return nil, fmt.Errorf("qemu (%s): %v: %s\nconsole:\n%s", accel, err, strings.TrimSpace(stderr.String()), console.String())
			}
			select {
			case <-readySeen:
			default:
				return nil, fmt.Errorf("kvm: the guest stopped before running the command (%s); console:\n%s", accel, console.String())
			}
			return res, nil
		}
	}
}

var accelMu sync.Mutex

// chooseAccel returns $TWINCRYPT_VM_ACCEL, else the accelerator remembered
// for this host kernel, else KVM when /dev/kvm opens (Run falls back if
// its guest stalls), else TCG.
func chooseAccel(k *Kernel) string {
	if a := os.Getenv(EnvAccel); a == AccelKVM || a == AccelTCG {
		return a
	}
	accelMu.Lock()
	defer accelMu.Unlock()
	if b, err := os.ReadFile(accelFile(k)); err == nil {
		if a := strings.TrimSpace(string(b)); a == AccelKVM || a == AccelTCG {
			return a
		}
	}
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return AccelTCG
	}
	f.Close()
	return AccelKVM
}

// accelFile remembers the probe's outcome per host kernel, so that only
// the first run on a machine pays for a stalled KVM boot.
func accelFile(k *Kernel) string {
	var u unix.Utsname
	rel := "unknown"
	if unix.Uname(&u) == nil {
		rel = unix.ByteSliceToString(u.Release[:])
	}
	return filepath.Join(filepath.Dir(k.Root), "accel-"+rel)
}

func rememberAccel(k *Kernel, accel string) {
	if os.Getenv(EnvAccel) != "" {
		return
	}
	accelMu.Lock()
	defer accelMu.Unlock()
	_ = os.WriteFile(accelFile(k), []byte(accel+"\n"), 0o644)
}

// consoleTail keeps the last lines of the console for error messages.
type consoleTail struct {
	mu    sync.Mutex
	lines []string
}

func (c *consoleTail) add(l string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lines = append(c.lines, l)
	if len(c.lines) > 60 {
		c.lines = c.lines[len(c.lines)-60:]
	}
}

func (c *consoleTail) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

func sparse(path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	return errors.Join(f.Truncate(size), f.Close())
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
