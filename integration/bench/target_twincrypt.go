package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// twincrypt is one of our own FUSE mounts, run as its own process with
// `twincrypt mount --background` so that its CPU time is its own: the
// passthrough twin (cipher "") or an encrypted volume. Each Mount writes a
// --summary that the daemon fills in at unmount: the per-op latency of
// exactly that run.
type twincrypt struct {
	exe    string
	cipher string // "aes-xts", "aes-cbc"; "" for the twin
	// transport is mount --transport ("" for the default, /dev/fuse).
	transport string
	// readdir is mount --readdir ("" for the default, plus).
	readdir string
	// noxattr is mount --noxattr.
	noxattr bool
	// format is init --format-version (0 for the default).
	format   int
	lower    string
	mnt      string
	passfile string
	summary  string
	d        daemon
	stats    *measure.Snapshot
}

// NewTwin returns the passthrough twin: the same FUSE code with the cipher
// switched off (and kernel passthrough off, so every READ and WRITE is
// served, and timed, by the daemon).
func NewTwin(o TargetOptions) Target { return &twincrypt{exe: o.Exe} }

// NewCrypt returns an encrypted twincrypt volume with cipher "aes-xts" or
// "aes-cbc" at its default key size.
func NewCrypt(o TargetOptions, cipher string) Target { return &twincrypt{exe: o.Exe, cipher: cipher} }

// NewTransport returns the twin (cipher "") or an encrypted volume served
// over the named transport (mount --transport dev|uring): "twin-dev",
// "crypt-xts-uring". The default targets take the daemon's default (auto:
// the ring where the kernel has it); these pin one, and a mount that does
// not get it fails its run.
func NewTransport(o TargetOptions, cipher, transport string) Target {
	return &twincrypt{exe: o.Exe, cipher: cipher, transport: transport}
}

// NewReaddir returns the twin (cipher "") or an encrypted volume mounted
// with --readdir mode: "crypt-xts-rdauto", "twin-rdplain", to set side
// by side with their READDIRPLUS selves (docs/scale.md).
func NewReaddir(o TargetOptions, cipher, mode string) Target {
	return &twincrypt{exe: o.Exe, cipher: cipher, readdir: mode}
}

// NewNoXattr returns the twin (cipher "") or an encrypted volume mounted
// with --noxattr: "crypt-xts-noxattr", without the GETXATTR round trips of
// ls -l (the SELinux label and the ACL of every entry), as securefs.
func NewNoXattr(o TargetOptions, cipher string) Target {
	return &twincrypt{exe: o.Exe, cipher: cipher, noxattr: true}
}

// NewFormat returns an encrypted volume made with init --format-version
// format: "crypt-cbc-v1", aes-cbc of the first format (one CBC chain per
// 4096-byte extent) to set beside crypt-cbc (512-byte CBC sectors).
func NewFormat(o TargetOptions, cipher string, format int) Target {
	return &twincrypt{exe: o.Exe, cipher: cipher, format: format}
}

func (t *twincrypt) Name() string {
	suffix := ""
	if t.format != 0 {
		suffix = fmt.Sprintf("-v%d", t.format)
	}
	if t.transport != "" {
		suffix = "-" + t.transport
	}
	if t.readdir != "" {
		suffix += "-rd" + t.readdir
	}
	if t.noxattr {
		suffix += "-noxattr"
	}
	switch t.cipher {
	case "":
		return "twin" + suffix
	case "aes-xts":
		return "crypt-xts" + suffix
	case "aes-cbc":
		return "crypt-cbc" + suffix
	}
	return "crypt-" + t.cipher + suffix
}

func (t *twincrypt) Available() error {
	if t.exe == "" {
		return fmt.Errorf("no twincrypt binary given")
	}
	return needFUSE()
}

func (t *twincrypt) Setup(ctx context.Context, work string) error {
	work, err := realPath(work)
	if err != nil {
		return err
	}
	t.lower, t.mnt = filepath.Join(work, "lower"), filepath.Join(work, "mnt")
	t.summary = filepath.Join(work, "summary.json")
	if err := mkdirs(t.lower, t.mnt); err != nil {
		return err
	}
	if t.cipher == "" {
		return nil
	}
	if t.passfile, err = writePassfile(work); err != nil {
		return err
	}
	// A cheap KDF: unlocking is part of every Mount, not of what is measured.
	args := []string{"init", "--cipher", t.cipher, "--passfile", t.passfile,
		"--kdf", "argon2id", "--kdf-time", "5", "--kdf-memory", "7168", "--kdf-threads", "1", "--quiet"}
	if t.format != 0 {
		args = append(args, "--format-version", strconv.Itoa(t.format))
	}
	_, err = run(ctx, nil, "", t.exe, append(args, t.lower)...)
	return err
}

// mountedPID parses "... in the background, pid N." from mount -b.
var mountedPID = regexp.MustCompile(`pid (\d+)`)

func (t *twincrypt) Mount(ctx context.Context) (string, error) {
	t.stats = nil
	_ = os.Remove(t.summary)
	args := []string{"mount", "--background", "--summary", t.summary}
	if t.cipher == "" {
		args = append(args, "--passthrough")
	} else {
		args = append(args, "--passfile", t.passfile)
	}
	if t.transport != "" {
		args = append(args, "--transport", t.transport)
	}
	if t.readdir != "" {
		args = append(args, "--readdir", t.readdir)
	}
	if t.noxattr {
		args = append(args, "--noxattr")
	}
	out, err := run(ctx, nil, "", t.exe, append(args, t.lower, t.mnt)...)
	if err != nil {
		return "", err
	}
	pid := 0
	if m := mountedPID.FindStringSubmatch(out); m != nil {
		pid, _ = strconv.Atoi(m[1])
	}
	t.d.attach(t.mnt, pid)
	return t.mnt, nil
}

func (t *twincrypt) Unmount(ctx context.Context) error {
	if err := t.d.detach(t.mnt); err != nil {
		return err
	}
	data, err := os.ReadFile(t.summary)
	if err != nil {
		return fmt.Errorf("read the daemon's summary: %w", err)
	}
	var s measure.Snapshot
	if err := json.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("parse the daemon's summary %s: %w", t.summary, err)
	}
	t.stats = &s
	if t.transport != "" && !strings.HasPrefix(s.Transport, t.transport) {
		// A fallback to /dev/fuse would put dev figures under a uring
		// name.
		return fmt.Errorf("%s ran on transport %q", t.Name(), s.Transport)
	}
	return nil
}

func (t *twincrypt) Cleanup() error {
	if t.mnt == "" {
		return nil
	}
	return t.d.detach(t.mnt)
}

func (t *twincrypt) DaemonCPU() time.Duration { return t.d.cpu() }
func (t *twincrypt) Stats() *measure.Snapshot { return t.stats }
