package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// Both dm-crypt variants encrypt the same way, what a LUKS2 user gets by
// default on a current distribution: AES-XTS with a 512-bit key,
// 4096-byte sectors.
const (
	dmCipher     = "aes-xts-plain64"
	dmKeyBits    = 512
	dmSectorSize = 4096
)

// NewDMCrypt returns the dm-crypt target: the kernel's (cryptsetup open)
// where device-mapper works, else twincrypt's userspace implementation of
// the same volume format.
func NewDMCrypt(o TargetOptions) Target {
	if kernelDMCrypt() == nil {
		return &dmcryptKernel{size: imageSize(o.Size), name: fmt.Sprintf("twincrypt-bench-%d", os.Getpid())}
	}
	return &dmcryptUser{exe: o.Exe, size: imageSize(o.Size)}
}

// otherDMCrypt is the userspace variant where NewDMCrypt gives the
// kernel's (a machine with device-mapper, the kernel VM): both can then
// run side by side, the same volume format with its crypto in kernel
// threads or in our daemon. Elsewhere it is nothing.
func otherDMCrypt(o TargetOptions) []Target {
	if kernelDMCrypt() != nil {
		return nil
	}
	return []Target{&dmcryptUser{exe: o.Exe, size: imageSize(o.Size)}}
}

// kernelDMCrypt returns nil when cryptsetup can open volumes here.
func kernelDMCrypt() error {
	if err := needProgs("cryptsetup"); err != nil {
		return err
	}
	f, err := os.OpenFile("/dev/mapper/control", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("no device-mapper (/dev/mapper/control: %v)", errors.Unwrap(err))
	}
	return f.Close()
}

// dmcryptKernel is a LUKS2 volume opened by the kernel's dm-crypt, with
// ext4 on /dev/mapper/NAME. Its crypto runs in kernel threads, which no
// process accounts for: DaemonCPU is 0.
type dmcryptKernel struct {
	size     int64
	name     string // device-mapper name
	image    string
	mnt      string
	passfile string
	open     bool
}

func (t *dmcryptKernel) Name() string { return "dmcrypt-kernel" }

func (t *dmcryptKernel) Available() error {
	if err := needLoop("dm-crypt"); err != nil {
		return err
	}
	return kernelDMCrypt()
}

func (t *dmcryptKernel) Setup(ctx context.Context, work string) error {
	t.image, t.mnt = filepath.Join(work, "luks.img"), filepath.Join(work, "mnt")
	if err := mkdirs(t.mnt); err != nil {
		return err
	}
	var err error
	if t.passfile, err = writePassfile(work); err != nil {
		return err
	}
	if err := sparseFile(t.image, t.size); err != nil {
		return err
	}
	// PBKDF2 at its minimum: opening is part of every Mount, not of what
	// is measured.
	if _, err := run(ctx, nil, "", "cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2",
		"--cipher", dmCipher, "--key-size", fmt.Sprint(dmKeyBits), "--sector-size", fmt.Sprint(dmSectorSize),
		"--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", t.passfile, t.image); err != nil {
		return err
	}
	if err := t.openVolume(ctx); err != nil {
		return err
	}
	return errors.Join(mkfsExt4(ctx, t.dev()), t.closeVolume())
}

func (t *dmcryptKernel) dev() string { return "/dev/mapper/" + t.name }

func (t *dmcryptKernel) openVolume(ctx context.Context) error {
	if _, err := run(ctx, nil, "", "cryptsetup", "open", "--type", "luks2", "--key-file", t.passfile, t.image, t.name); err != nil {
		return err
	}
	t.open = true
	return nil
}

func (t *dmcryptKernel) closeVolume() error {
	if !t.open {
		return nil
	}
	var err error
	for i := 0; i < 10; i++ {
		if _, err = run(context.Background(), nil, "", "cryptsetup", "close", t.name); err == nil {
			t.open = false
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

func (t *dmcryptKernel) Mount(ctx context.Context) (string, error) {
	if err := t.openVolume(ctx); err != nil {
		return "", err
	}
	if err := mountExt4(t.dev(), t.mnt); err != nil {
		return "", errors.Join(err, t.closeVolume())
	}
	return t.mnt, nil
}

func (t *dmcryptKernel) Unmount(ctx context.Context) error {
	if t.mnt == "" {
		return nil
	}
	return errors.Join(unmount(t.mnt), t.closeVolume())
}

func (t *dmcryptKernel) Cleanup() error           { return t.Unmount(context.Background()) }
func (t *dmcryptKernel) DaemonCPU() time.Duration { return 0 }
func (t *dmcryptKernel) Stats() *measure.Snapshot { return nil }

// dmcryptUser is the same LUKS2 volume unlocked in userspace:
// `twincrypt blockdev open` serves the plaintext as DEV/volume, a loop
// device turns that file into a block device, and ext4 goes on top — the
// kernel's stack with the dm-crypt layer replaced by a FUSE daemon, whose
// CPU time and per-op latency are measured like our other mounts'.
type dmcryptUser struct {
	exe      string
	size     int64
	image    string
	devMnt   string // FUSE mount holding "volume"
	passfile string
	summary  string
	d        daemon
	v        ext4Image // image = devMnt/volume
	stats    *measure.Snapshot
}

func (t *dmcryptUser) Name() string { return "dmcrypt-userspace" }

func (t *dmcryptUser) Available() error {
	if err := needLoop("the userspace dm-crypt path (ext4 on a loop device)"); err != nil {
		return err
	}
	if err := needFUSE(); err != nil {
		return err
	}
	if t.exe == "" {
		return errors.New("no twincrypt binary given")
	}
	// An older binary has no blockdev command.
	if out, err := exec.Command(t.exe, "blockdev", "open", "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--background") {
		return fmt.Errorf("%s has no 'blockdev open' command", filepath.Base(t.exe))
	}
	return nil
}

func (t *dmcryptUser) Setup(ctx context.Context, work string) error {
	work, err := realPath(work)
	if err != nil {
		return err
	}
	t.image, t.devMnt = filepath.Join(work, "luks.img"), filepath.Join(work, "dev")
	t.summary = filepath.Join(work, "summary.json")
	t.v = ext4Image{image: filepath.Join(t.devMnt, "volume"), mnt: filepath.Join(work, "mnt")}
	if err := mkdirs(t.devMnt, t.v.mnt); err != nil {
		return err
	}
	if t.passfile, err = writePassfile(work); err != nil {
		return err
	}
	if _, err := run(ctx, nil, "", t.exe, "blockdev", "format", "--quiet",
		"--size", fmt.Sprintf("%dM", t.size>>20), "--cipher", dmCipher, "--key-bytes", fmt.Sprint(dmKeyBits/8),
		"--sector-size", fmt.Sprint(dmSectorSize), "--kdf", "pbkdf2", "--pbkdf2-iter", "1000",
		"--passfile", t.passfile, t.image); err != nil {
		return err
	}
	if err := t.openVolume(ctx); err != nil {
		return err
	}
	dev, err := loopAttach(ctx, t.v.image)
	if err != nil {
		return errors.Join(err, t.closeVolume())
	}
	return errors.Join(mkfsExt4(ctx, dev), loopDetach(dev), t.closeVolume())
}

func (t *dmcryptUser) openVolume(ctx context.Context) error {
	_ = os.Remove(t.summary)
	out, err := run(ctx, nil, "", t.exe, "blockdev", "open", "--background",
		"--summary", t.summary, "--passfile", t.passfile, t.image, t.devMnt)
	if err != nil {
		return err
	}
	// The pid it reports, not a search by arguments (see findDaemon).
	pid := 0
	if m := mountedPID.FindStringSubmatch(out); m != nil {
		pid, _ = strconv.Atoi(m[1])
	}
	t.d.attach(t.devMnt, pid)
	return nil
}

func (t *dmcryptUser) closeVolume() error { return t.d.detach(t.devMnt) }

func (t *dmcryptUser) Mount(ctx context.Context) (string, error) {
	t.stats = nil
	if err := t.openVolume(ctx); err != nil {
		return "", err
	}
	if err := t.v.mount(ctx); err != nil {
		return "", errors.Join(err, t.closeVolume())
	}
	return t.v.mnt, nil
}

func (t *dmcryptUser) Unmount(ctx context.Context) error {
	if err := errors.Join(t.v.unmount(), t.closeVolume()); err != nil {
		return err
	}
	if data, err := os.ReadFile(t.summary); err == nil {
		var s measure.Snapshot
		if json.Unmarshal(data, &s) == nil {
			t.stats = &s
		}
	}
	return nil
}

func (t *dmcryptUser) Cleanup() error {
	if t.devMnt == "" {
		return nil
	}
	return errors.Join(t.v.unmount(), t.closeVolume())
}

func (t *dmcryptUser) DaemonCPU() time.Duration { return t.d.cpu() }
func (t *dmcryptUser) Stats() *measure.Snapshot { return t.stats }
