package main

// The dm-crypt path without device-mapper: "blockdev open" unlocks a LUKS
// (or plain) image in userspace and serves its plaintext as MNT/volume,
// which losetup turns into a block device for mkfs and mount. "format"
// writes a new LUKS2 image, "close" unmounts once no loop device uses the
// volume any more.
//
// Background mode follows mount_background.go's protocol exactly (the
// passphrase over stdin, "ok" or "err <code> <message>" on fd 3, the same
// hidden child flag), with the child re-executed as "blockdev open".

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/luks"
	"github.com/twincrypt/twincrypt/cipher/sector"
	"github.com/twincrypt/twincrypt/fs/blockdev"
)

func newBlockdevCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "blockdev",
		Short: "Open LUKS and plain dm-crypt volumes in userspace (no device-mapper needed)",
		Long: `The dm-crypt path for kernels without device-mapper.

'blockdev open IMAGE MNT' unlocks a LUKS1, LUKS2 or plain dm-crypt volume in
userspace and serves its decrypted payload as the one file MNT/volume. Put a
loop device on that file and use it as you would use /dev/mapper/NAME after
'cryptsetup open': every sector written is encrypted into IMAGE exactly as
dm-crypt would encrypt it, so the image stays a valid dm-crypt volume.

  twincrypt blockdev format --size 256M disk.img
  twincrypt blockdev open --background disk.img /mnt/dev
  losetup --find --show /mnt/dev/volume        # prints /dev/loopN
  mkfs.ext4 /dev/loopN && mount /dev/loopN /mnt/data
  ...
  umount /mnt/data && losetup -d /dev/loopN
  twincrypt blockdev close /mnt/dev`,
	}
	cmd.AddCommand(newBlockdevFormatCmd(), newBlockdevOpenCmd(), newBlockdevCloseCmd())
	return cmd
}

// ---- open ----

type blockdevOpenFlags struct {
	passFlags
	plain      bool
	plainOpts  luks.PlainOptions
	ro         bool
	background bool
	debug      bool
	quiet      bool
	logFile    string
	instr      instrFlags
	child      bool
}

// plainFlagNames are the flags that only --plain takes.
var plainFlagNames = []string{"cipher", "key-bytes", "hash", "offset", "skip", "sector-size", "iv-large-sectors"}

func newBlockdevOpenCmd() *cobra.Command {
	var f blockdevOpenFlags
	cmd := &cobra.Command{
		Use:   "open [flags] IMAGE MNT",
		Short: "Unlock a dm-crypt volume and serve its plaintext as MNT/volume",
		Long: `Unlock the LUKS1 or LUKS2 volume in IMAGE (or, with --plain, treat IMAGE
as a plain dm-crypt volume) and mount at the empty directory MNT a directory
holding one file, "volume": the decrypted payload.

The volume behaves like a block device: its size is fixed, so truncating it
(or opening it with O_TRUNC) fails with EPERM and writing past its end with
ENOSPC. Copy an image into it with 'dd ... conv=notrunc'.

The passphrase is read as for 'mount': from --passfile, else from the
--extpass program's output, else from the terminal without echo, else as one line from stdin. A wrong passphrase
prints one line and exits with code 12. Plain mode cannot tell a wrong
passphrase from a right one, like 'cryptsetup open --type plain'.

Plain mode takes cryptsetup's --type plain parameters: --cipher
(aes-cbc-essiv:sha256), --key-bytes (32), --hash (ripemd160; "plain" uses the
passphrase as the key), --offset and --skip (in 512-byte sectors),
--sector-size (512) and --iv-large-sectors.

By default open stays in the foreground and unmounts on Ctrl-C or SIGTERM;
--background detaches once the volume is served. Close with
'twincrypt blockdev close MNT' after detaching the loop device.`,
		Example: `  twincrypt blockdev open --background --passfile ~/.disk-pass disk.img /mnt/dev
  losetup --find --show /mnt/dev/volume

  # plain dm-crypt, as 'cryptsetup open --type plain --cipher aes-xts-plain64 --key-size 512 --hash sha256'
  twincrypt blockdev open --plain --cipher aes-xts-plain64 --key-bytes 64 --hash sha256 disk.img /mnt/dev`,
		Args: exactArgs(2, "IMAGE and MNT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.child {
				return runBlockdevChild(f, args[0], args[1])
			}
			return runBlockdevOpen(cmd, f, args[0], args[1])
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	f.register(fl, "read the passphrase from the first line of `FILE`")
	fl.BoolVar(&f.plain, "plain", false, "plain dm-crypt volume (no header), as cryptsetup --type plain")
	fl.StringVar(&f.plainOpts.Cipher, "cipher", "aes-cbc-essiv:sha256", "plain: dm-crypt cipher specification")
	fl.IntVar(&f.plainOpts.KeyBytes, "key-bytes", 32, "plain: key size in bytes")
	fl.StringVar(&f.plainOpts.Hash, "hash", "ripemd160", "plain: passphrase hash (\"plain\": the passphrase is the key)")
	fl.Int64Var(&f.plainOpts.Offset, "offset", 0, "plain: payload offset in 512-byte `SECTORS`")
	fl.Int64Var(&f.plainOpts.Skip, "skip", 0, "plain: IV offset in 512-byte `SECTORS`")
	fl.IntVar(&f.plainOpts.SectorSize, "sector-size", 512, "plain: encryption sector size in `BYTES` (512..4096)")
	fl.BoolVar(&f.plainOpts.IVLargeSectors, "iv-large-sectors", false, "plain: count IVs in whole sectors, not 512-byte units")
	fl.BoolVar(&f.ro, "ro", false, "open read-only")
	fl.BoolVarP(&f.background, "background", "b", false, "detach once served; close with 'twincrypt blockdev close MNT'")
	fl.BoolVar(&f.debug, "debug", false, "log every FUSE request and reply")
	fl.StringVar(&f.logFile, "log", "", "append log output to `FILE` (in --background mode the only place it goes)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing on success")
	f.instr.register(fl)
	// Mirror mode applies file operations to a plaintext twin directory;
	// a block device has no such twin.
	_ = fl.MarkHidden("mirror")
	fl.BoolVar(&f.child, childFlag, false, "internal: this is the background process")
	_ = fl.MarkHidden(childFlag)
	return cmd
}

// blockdevPlan is an open whose arguments have been validated.
type blockdevPlan struct {
	image, mnt string
	f          blockdevOpenFlags
}

// planBlockdevOpen validates flags, IMAGE and MNT; it reads no passphrase.
func planBlockdevOpen(fl interface{ Changed(string) bool }, f blockdevOpenFlags, imageArg, mntArg string) (*blockdevPlan, error) {
	if !f.plain {
		for _, name := range plainFlagNames {
			if fl.Changed(name) {
				return nil, usageErrorf("--%s is a plain-mode flag: add --plain, or leave it out (a LUKS header holds its own)", name)
			}
		}
	}
	if f.instr.mirror != "" {
		return nil, usageErrorf("--mirror works on file operations; blockdev serves a single volume file")
	}
	image, err := filepath.Abs(imageArg)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(image)
	if err != nil {
		return nil, fmt.Errorf("IMAGE: %w", err)
	}
	if fi.IsDir() {
		return nil, fmt.Errorf("IMAGE %s is a directory (for an encrypted directory use 'twincrypt mount')", image)
	}
	if clean, cerr := cleanMountPath(mntArg); cerr == nil {
		if m, ok, _ := findMount(clean); ok {
			return nil, mountpointErrorf("%s is already a mount point (%s); unmount it first", mntArg, m.fsType)
		}
	}
	mnt, err := realDir(mntArg, "mountpoint")
	if err != nil {
		return nil, &classifiedError{class: errMountpoint, err: err}
	}
	if isWithin(image, mnt) {
		return nil, mountpointErrorf("IMAGE %s is inside the mountpoint %s", image, mnt)
	}
	if d, err := os.Open(mnt); err != nil {
		return nil, mountpointErrorf("mountpoint %s: %w", mnt, err)
	} else {
		names, _ := d.Readdirnames(1)
		d.Close()
		if len(names) > 0 {
			return nil, mountpointErrorf("mountpoint %s is not empty", mnt)
		}
	}
	if err := f.instr.check(filepath.Dir(image), mnt); err != nil {
		return nil, err
	}
	return &blockdevPlan{image: image, mnt: mnt, f: f}, nil
}

// unlock opens the volume with pass: the LUKS header's keyslots, or the
// plain-mode key derivation.
func (p *blockdevPlan) unlock(pass []byte) (*luks.Volume, error) {
	if p.f.plain {
		v, err := luks.OpenPlain(pass, p.f.plainOpts)
		if err != nil {
			if errors.Is(err, luks.ErrUnsupported) {
				return nil, &classifiedError{class: errUsage, err: fmt.Errorf("plain mode: %w", err)}
			}
			return nil, fmt.Errorf("plain mode: %w", err)
		}
		return lockVolumeKey(v), nil
	}
	img, err := os.Open(p.image)
	if err != nil {
		return nil, err
	}
	defer img.Close()
	v, err := luks.Open(img, pass)
	if errors.Is(err, luks.ErrWrongPassphrase) {
		return nil, fmt.Errorf("unlock %s: wrong passphrase: %w", p.image, err)
	}
	if err != nil {
		return nil, fmt.Errorf("unlock %s: %w", p.image, err)
	}
	return lockVolumeKey(v), nil
}

// lockVolumeKey moves the volume key into locked memory (see
// mountPlan.unlock); the callers' wipe(vol.Key) wipes it there, and the
// pages go with the process.
func lockVolumeKey(v *luks.Volume) *luks.Volume {
	v.Key = keys.LockedCopy(v.Key).Bytes()
	return v
}

func runBlockdevOpen(cmd *cobra.Command, f blockdevOpenFlags, imageArg, mntArg string) error {
	plan, err := planBlockdevOpen(cmd.Flags(), f, imageArg, mntArg)
	if err != nil {
		return err
	}
	src := f.source(cmd.ErrOrStderr())
	pass, err := src.read(false)
	if err != nil {
		return err
	}
	defer wipe(pass)
	vol, err := plan.unlock(pass)
	if err != nil {
		return err
	}
	if f.background {
		// The child unlocks again with the passphrase it gets over the
		// pipe; the parent's copy of the key is of no further use.
		wipe(vol.Key)
		return startBlockdevBackground(cmd, plan, pass)
	}
	wipe(pass)
	defer wipe(vol.Key)

	logOut, closeLog, err := openLog(f.logFile, os.Stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	return serveBlockdev(plan, vol, newLogger(logOut, f.debug), logOut, func() {
		if !f.quiet {
			fmt.Fprintf(cmd.OutOrStdout(), "Opened %s at %s (%s).\nAttach it with 'losetup --find --show %s'. Press Ctrl-C or run 'twincrypt blockdev close %s' to close.\n",
				plan.image, plan.volumePath(), describeVolume(vol, plan.volumePath()), plan.volumePath(), plan.mnt)
		}
	})
}

func (p *blockdevPlan) volumePath() string { return filepath.Join(p.mnt, blockdev.VolumeName) }

// describeVolume names the volume's kind, cipher, key, sectors and, once
// served, size, for messages.
func describeVolume(v *luks.Volume, volumeFile string) string {
	kind := "plain"
	if v.Version > 0 {
		kind = fmt.Sprintf("LUKS%d", v.Version)
	}
	s := fmt.Sprintf("%s, %s, %d-bit key, %d-byte sectors", kind, v.Cipher, len(v.Key)*8, v.SectorSize)
	if fi, err := os.Stat(volumeFile); err == nil {
		s += ", " + formatBytes(fi.Size())
	}
	return s
}

// formatBytes prints a size in the largest binary unit that divides it.
func formatBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{40, "TiB"}, {30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n >= 1<<u.shift && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// serveBlockdev mounts, calls ready, and blocks until the volume is
// unmounted, by SIGINT/SIGTERM or from outside. The statistics table goes
// to summary as it is, not through the logger, which would make a log
// line of every cell.
func serveBlockdev(plan *blockdevPlan, vol *luks.Volume, log zerolog.Logger, summary io.Writer, ready func()) error {
	sigs := catchSignals()
	defer signal.Stop(sigs)
	in, err := startInstrument(plan.f.instr, plan.mnt, log)
	if err != nil {
		return err
	}
	mntDir, err := openMountDir(plan.mnt)
	if err != nil {
		in.stop(io.Discard, true)
		return mountFailedErrorf("serve %s at %s: %w", plan.image, plan.mnt, err)
	}
	var srv *fuse.Server
	err = withFusermount(func() (err error) {
		srv, err = blockdev.Mount(plan.mnt, blockdev.Options{
			Image:    plan.image,
			Volume:   vol,
			ReadOnly: plan.f.ro,
			Recorder: in.rec,
			Log:      log,
			Debug:    plan.f.debug,
		})
		return err
	})
	if err != nil {
		mntDir.Close()
		in.stop(io.Discard, true)
		var fe *fusermountError
		if errors.As(err, &fe) {
			return mountFailedErrorf("serve %s at %s: %v", plan.image, plan.mnt, fe)
		}
		if errors.Is(err, blockdev.ErrImageBusy) {
			return fmt.Errorf("open %s: %w", plan.image, err)
		}
		return mountFailedErrorf("serve %s at %s: %w", plan.image, plan.mnt, err)
	}
	mh, err := holdMount(mntDir)
	if err != nil {
		log.Error().Msgf("serve %s: %v; unmount it with 'twincrypt umount'", plan.mnt, err)
	} else {
		defer mh.close()
	}
	serveUntilUnmounted(srv, sigs, mh, plan.mnt, in, log, ready)
	return in.stop(summary, plan.f.quiet)
}

// blockdevChildArgs is the command line of the background process. Paths
// are absolute: the child runs in "/".
func blockdevChildArgs(p *blockdevPlan) []string {
	args := []string{"blockdev", "open", "--" + childFlag}
	if p.f.plain {
		o := p.f.plainOpts
		args = append(args, "--plain", "--cipher", o.Cipher, "--key-bytes", strconv.Itoa(o.KeyBytes),
			"--hash", o.Hash, "--offset", strconv.FormatInt(o.Offset, 10),
			"--skip", strconv.FormatInt(o.Skip, 10), "--sector-size", strconv.Itoa(o.SectorSize))
		if o.IVLargeSectors {
			args = append(args, "--iv-large-sectors")
		}
	}
	if p.f.ro {
		args = append(args, "--ro")
	}
	if p.f.debug {
		args = append(args, "--debug")
	}
	if p.f.quiet {
		args = append(args, "--quiet")
	}
	args = append(args, p.f.instr.args()...)
	return append(args, "--", p.image, p.mnt)
}

// startBlockdevBackground starts the child, hands it the passphrase and
// waits for its readiness line (see mount_background.go).
func startBlockdevBackground(cmd *cobra.Command, p *blockdevPlan, pass []byte) error {
	pid, desc, err := startChild(blockdevChildArgs(p), p.f.logFile, pass, "background process exited before the volume was served")
	if err != nil {
		return err
	}
	if !p.f.quiet {
		fmt.Fprintf(cmd.OutOrStdout(), "Opened %s at %s (%s) in the background, pid %d.\nAttach it with 'losetup --find --show %s'; close with 'twincrypt blockdev close %s'.\n",
			p.image, p.volumePath(), desc, pid, p.volumePath(), p.mnt)
	}
	return nil
}

// runBlockdevChild is the background process: it validates again, unlocks
// with the passphrase from stdin, serves and reports on fd 3 ("ok" is
// followed by the volume's description for the parent's message).
func runBlockdevChild(f blockdevOpenFlags, imageArg, mntArg string) error {
	return runChild("blockdev open --background", "background process ended without serving the volume", func(report func(string)) error {
		return blockdevChild(f, imageArg, mntArg, report)
	})
}

func blockdevChild(f blockdevOpenFlags, imageArg, mntArg string, report func(string)) error {
	// The parent checked which flags were given; the child gets only
	// plain-mode flags together with --plain.
	plan, err := planBlockdevOpen(noneChanged{}, f, imageArg, mntArg)
	if err != nil {
		return err
	}
	pass, err := readPassAll(os.Stdin)
	if err != nil {
		return fmt.Errorf("background: read passphrase from parent: %w", err)
	}
	vol, err := plan.unlock(pass)
	wipe(pass)
	if err != nil {
		return err
	}
	defer wipe(vol.Key)
	if devNull, err := os.Open(os.DevNull); err == nil {
		_ = unix.Dup2(int(devNull.Fd()), 0)
		devNull.Close()
	}
	return serveBlockdev(plan, vol, newLogger(os.Stderr, f.debug), os.Stderr, func() {
		report("ok " + oneLine(describeVolume(vol, plan.volumePath())))
	})
}

type noneChanged struct{}

func (noneChanged) Changed(string) bool { return false }

// ---- close ----

func newBlockdevCloseCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "close [flags] MNT",
		Short: "Stop serving a volume opened with 'blockdev open'",
		Long: `Unmount the volume served at MNT; the process serving it exits.

close refuses while a loop device still uses MNT/volume, and names it:
unmount the filesystem on it and detach it with 'losetup -d' first. With
--force, close detaches the loop devices itself (but never unmounts a
filesystem that is mounted from one of them).`,
		Example: `  umount /mnt/data && losetup -d /dev/loop0
  twincrypt blockdev close /mnt/dev`,
		Args: exactArgs(1, "MNT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBlockdevClose(args[0], force)
		},
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "detach loop devices that use MNT/volume first")
	return cmd
}

func runBlockdevClose(mntArg string, force bool) error {
	mnt, err := cleanMountPath(mntArg)
	if err != nil {
		return mountpointErrorf("%s: %w", mntArg, err)
	}
	m, mounted, err := findMount(mnt)
	if err != nil {
		return err
	}
	if !mounted {
		return mountpointErrorf("%s is not a mount point", mnt)
	}
	if m.fsType != "fuse.twincrypt" {
		return mountpointErrorf("%s is a %s mount, not one of twincrypt's", mnt, m.fsType)
	}
	vol := filepath.Join(mnt, blockdev.VolumeName)
	loops, err := loopDevicesOf(vol)
	if err != nil {
		return err
	}
	if len(loops) > 0 && !force {
		return fmt.Errorf("%s is still attached to loop device %s: unmount what is mounted from it, run 'losetup -d %s', then close again (or close --force)",
			vol, strings.Join(loops, ", "), loops[0])
	}
	for _, dev := range loops {
		if err := detachLoop(dev); err != nil {
			return err
		}
	}
	return unmountReleased(mnt)
}

// releaseWait bounds how long close waits for the kernel to let go of
// MNT/volume before it reports the mount busy.
const releaseWait = 15 * time.Second

// unmountReleased unmounts mnt, retrying while the kernel refuses it as
// busy, for up to releaseWait. The volume's holders are mostly the
// kernel's own, and they let go after the call that asked them to has
// returned: a detached loop device drops its backing file only on its last
// close, which is often udev's blkid probe of the device, and then through
// a deferred fput. An immediate umount(2) then fails with EBUSY though
// nothing will hold the volume a moment later; on a loaded machine that
// moment is long. A file the user holds open still gets "target is
// busy", after releaseWait.
func unmountReleased(mnt string) error {
	deadline := time.Now().Add(releaseWait)
	pause := 20 * time.Millisecond
	for {
		err := unmountPath(mnt, false)
		if err == nil || !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(pause)
		pause = min(2*pause, time.Second)
	}
}

// loopDevicesOf lists the loop devices whose backing file is path, from
// /sys/block/loop*/loop/backing_file (what 'losetup -j' reads).
func loopDevicesOf(path string) ([]string, error) {
	files, err := filepath.Glob("/sys/block/loop*/loop/backing_file")
	if err != nil {
		return nil, err
	}
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue // detached meanwhile
		}
		if strings.TrimSuffix(string(b), "\n") == path {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return devs, nil
}

// detachLoop detaches a loop device that nothing is mounted from, and
// waits until the kernel has let go of its backing file: LOOP_CLR_FD only
// marks the device, which detaches on its last close.
func detachLoop(dev string) error {
	mounts, err := mountsFrom(dev)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("%s is mounted on %s: unmount it first (close --force detaches loop devices, it does not unmount filesystems)",
			dev, strings.Join(mounts, ", "))
	}
	f, err := os.Open(dev)
	if err != nil {
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	err = unix.IoctlSetInt(int(f.Fd()), unix.LOOP_CLR_FD, 0)
	f.Close()
	if err != nil && !errors.Is(err, unix.ENXIO) { // ENXIO: already detached
		return fmt.Errorf("detach %s: %w", dev, err)
	}
	backing := filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")
	// The last opener may be udev's blkid probe of the device, which on a
	// loaded machine runs late: wait for it generously.
	for deadline := time.Now().Add(releaseWait); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(backing); err != nil {
			return nil
		}
	}
	return fmt.Errorf("detach %s: still attached after %v: a process holds it open; it detaches when closed", dev, releaseWait)
}

// mountsFrom lists the mount points of dev and of its partitions.
func mountsFrom(dev string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	all, err := readMountInfo(f)
	if err != nil {
		return nil, err
	}
	var mps []string
	for _, m := range all {
		if m.source == dev || strings.HasPrefix(m.source, dev+"p") {
			mps = append(mps, m.mountPoint)
		}
	}
	return mps, nil
}

// ---- format ----

type blockdevFormatFlags struct {
	size string
	opts luks.FormatOptions
	passFlags
	force      bool
	quiet      bool
	kdfTime    uint32
	kdfMemory  uint32
	kdfThreads uint32
	pbkdf2Iter int
}

func newBlockdevFormatCmd() *cobra.Command {
	var f blockdevFormatFlags
	cmd := &cobra.Command{
		Use:   "format [flags] IMAGE",
		Short: "Write a new LUKS2 volume into IMAGE (created or extended to --size)",
		Long: `Write a LUKS2 header with one keyslot for the passphrase into IMAGE, as
'cryptsetup luksFormat --type luks2' does; the payload starts at 16 MiB and
runs to the end of the image. IMAGE is created, or extended (sparse) to
--size; it is never shrunk.

An IMAGE whose first MiB holds anything but zeros (a LUKS header, a
filesystem) is refused unless --force: formatting destroys its data.

The passphrase is read from --passfile, else from the --extpass program's
output, else from the terminal (asked twice), else as one line from stdin. The key-derivation cost flags work as
for 'init': --kdf argon2id (default), argon2i or pbkdf2.`,
		Example: `  twincrypt blockdev format --size 256M disk.img
  twincrypt blockdev format --size 1G --sector-size 4096 --cipher aes-cbc-essiv:sha256 --key-bytes 32 disk.img`,
		Args: exactArgs(1, "IMAGE"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runBlockdevFormat(cmd, f, args[0])
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringVar(&f.size, "size", "", "image size, e.g. 64M or 1G (binary units); needed when IMAGE does not exist")
	fl.StringVar(&f.opts.Cipher, "cipher", "aes-xts-plain64", "dm-crypt cipher specification")
	fl.IntVar(&f.opts.KeyBytes, "key-bytes", 64, "volume key size in bytes (aes-xts: 32 or 64)")
	fl.IntVar(&f.opts.SectorSize, "sector-size", 512, "encryption sector size in `BYTES` (512..4096)")
	fl.StringVar(&f.opts.PBKDF, "kdf", "argon2id", "keyslot key derivation: argon2id, argon2i or pbkdf2")
	fl.Uint32Var(&f.kdfTime, "kdf-time", 0, "argon2 passes (default: cheap but safe)")
	fl.Uint32Var(&f.kdfMemory, "kdf-memory", 0, "argon2 memory in KiB")
	fl.Uint32Var(&f.kdfThreads, "kdf-threads", 0, "argon2 parallelism")
	fl.IntVar(&f.pbkdf2Iter, "pbkdf2-iter", 0, "PBKDF2 iterations")
	fl.StringVar(&f.opts.Label, "label", "", "LUKS2 label")
	f.register(fl, "read the passphrase from the first line of `FILE`")
	fl.BoolVar(&f.force, "force", false, "overwrite an IMAGE that already holds data")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing on success")
	return cmd
}

// formatCheckBytes is how much of an existing IMAGE must be zeros for
// format to go ahead without --force: the LUKS2 header area's first MiB,
// where LUKS headers and filesystem superblocks live.
const formatCheckBytes = 1 << 20

func runBlockdevFormat(cmd *cobra.Command, f blockdevFormatFlags, imageArg string) error {
	changed := cmd.Flags().Changed
	switch {
	case f.opts.PBKDF == "pbkdf2" && (changed("kdf-time") || changed("kdf-memory") || changed("kdf-threads")):
		return usageErrorf("--kdf-time, --kdf-memory and --kdf-threads apply to argon2, not pbkdf2 (use --pbkdf2-iter)")
	case f.opts.PBKDF != "pbkdf2" && changed("pbkdf2-iter"):
		return usageErrorf("--pbkdf2-iter applies to --kdf pbkdf2, not %s", f.opts.PBKDF)
	case f.opts.PBKDF != "argon2id" && f.opts.PBKDF != "argon2i" && f.opts.PBKDF != "pbkdf2":
		return usageErrorf("unknown --kdf %q (use argon2id, argon2i or pbkdf2)", f.opts.PBKDF)
	}
	f.opts.Time, f.opts.MemoryKiB, f.opts.Threads, f.opts.Iterations = f.kdfTime, f.kdfMemory, f.kdfThreads, f.pbkdf2Iter
	// The cipher must exist before a passphrase is asked for.
	if _, err := sector.New(f.opts.Cipher, make([]byte, f.opts.KeyBytes)); err != nil {
		return usageErrorf("--cipher %s with --key-bytes %d: %v", f.opts.Cipher, f.opts.KeyBytes, err)
	}
	var size int64 = -1
	if f.size != "" {
		s, err := parseSize(f.size)
		if err != nil {
			return usageErrorf("--size: %v", err)
		}
		size = s
	}
	image, err := filepath.Abs(imageArg)
	if err != nil {
		return err
	}
	oldSize := int64(-1) // -1: IMAGE does not exist yet
	if fi, err := os.Stat(image); err == nil {
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("IMAGE %s is not a regular file", image)
		}
		oldSize = fi.Size()
		if size == -1 {
			size = oldSize
		}
		if size < oldSize {
			return usageErrorf("IMAGE %s is already %s; --size %s would shrink it", image, formatBytes(oldSize), f.size)
		}
		if !f.force {
			if err := refuseData(image); err != nil {
				return err
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("IMAGE: %w", err)
	} else if size == -1 {
		return usageErrorf("IMAGE %s does not exist: give --size", image)
	}

	src := f.source(cmd.ErrOrStderr())
	pass, err := src.read(true)
	if err != nil {
		return err
	}
	defer wipe(pass)

	img, err := os.OpenFile(image, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("IMAGE: %w", err)
	}
	defer img.Close()
	undo := func() {
		if oldSize < 0 {
			os.Remove(image)
		} else {
			img.Truncate(oldSize)
		}
	}
	if err := img.Truncate(size); err != nil {
		undo()
		return fmt.Errorf("extend %s to %s: %w", image, formatBytes(size), err)
	}
	vol, err := luks.Format(img, size, pass, f.opts)
	if err != nil {
		undo()
		if errors.Is(err, luks.ErrUnsupported) {
			return &classifiedError{class: errUsage, err: fmt.Errorf("format %s: %w", image, err)}
		}
		return fmt.Errorf("format %s: %w", image, err)
	}
	defer wipe(vol.Key)
	// Whatever Format took size to mean, the payload it describes must
	// be in the file.
	if vol.Size > 0 && vol.Offset+vol.Size > size {
		if err := img.Truncate(vol.Offset + vol.Size); err != nil {
			return fmt.Errorf("extend %s: %w", image, err)
		}
	}
	if err := img.Sync(); err != nil {
		return fmt.Errorf("format %s: %w", image, err)
	}
	if !f.quiet {
		payload := vol.Size
		if payload < 0 {
			payload = size - vol.Offset
		}
		fmt.Fprintf(cmd.OutOrStdout(), "Formatted %s: %s, payload %s at offset %s, keyslot kdf %s.\nOpen it with 'twincrypt blockdev open %s MNT'.\n",
			image, describeVolume(vol, ""), formatBytes(payload), formatBytes(vol.Offset), f.opts.PBKDF, image)
	}
	return nil
}

// refuseData refuses an image whose first MiB is not all zeros.
func refuseData(image string) error {
	f, err := os.Open(image)
	if err != nil {
		return fmt.Errorf("IMAGE: %w", err)
	}
	defer f.Close()
	buf := make([]byte, formatCheckBytes)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("IMAGE: %w", err)
	}
	if bytes.Count(buf[:n], []byte{0}) != n {
		what := "data"
		if bytes.HasPrefix(buf[:n], []byte("LUKS\xba\xbe")) {
			what = "a LUKS header"
		}
		return &codedError{code: exitInitRefused,
			msg: fmt.Sprintf("format %s: it already holds %s; formatting would destroy it (use --force to overwrite)", image, what)}
	}
	return nil
}

// parseSize parses a byte count with an optional binary unit suffix: K,
// M, G or T (also KiB, MiB...), as truncate(1) reads them.
func parseSize(s string) (int64, error) {
	num := strings.TrimRight(s, "KMGTiBkmgtb")
	unit := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s[len(num):]), "B"), "I")
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%q is not a positive size", s)
	}
	shift := map[string]uint{"": 0, "K": 10, "M": 20, "G": 30, "T": 40}
	sh, ok := shift[unit]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit (use K, M, G or T)", s)
	}
	if n > (1<<62)>>sh {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return n << sh, nil
}
