package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/fs"
	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/privfile"
)

type mountFlags struct {
	passFlags
	passthrough       bool
	kernelPassthrough bool
	sharedStorage     bool
	noXattr           bool
	transport         string
	readdir           string
	uringDepth        int
	idle              time.Duration
	ro                bool
	opts              []string
	background        bool
	debug             bool
	quiet             bool
	logFile           string
	instr             instrFlags
	mk                masterKeyFlags // recovery: the master key instead of the passphrase
	// child marks the re-executed background process (hidden flag).
	child bool
}

// childFlag is the hidden flag that marks the background mount process.
// Its passphrase arrives on stdin, its readiness pipe is fd 3.
const childFlag = "internal-background-child"

func newMountCmd() *cobra.Command {
	var f mountFlags
	cmd := &cobra.Command{
		Use:   "mount [flags] LOWER MNT",
		Short: "Mount an encrypted volume (or the passthrough twin) at MNT",
		Long: `Mount the encrypted volume in LOWER at the empty directory MNT.

The passphrase is read once from --passfile, else from the first line that
the program of --extpass prints (ssh-askpass, systemd-ask-password, pass show
..., a keyring tool; gocryptfs's -extpass), else from the terminal without
echo, else as one line from stdin. A wrong passphrase prints one line and
exits with code 12; nothing is mounted.

By default twincrypt stays in the foreground and unmounts on Ctrl-C or
SIGTERM. With --background it checks the config and the passphrase first,
then detaches and returns once the filesystem is mounted and ready; errors of
the background process are reported by the command that started it. Unmount
with 'twincrypt umount MNT'.

--passthrough mounts the twin instead: the same FUSE code over a plain
directory with the cipher switched off, no config and no passphrase. Every
READ and WRITE still goes through the daemon, so the twin measures the cost
of FUSE alone. --kernel-passthrough (twin only) lets the kernel serve reads
and writes straight from the lower files, as go-fuse's loopback does by
default when run as root; such a twin is fast but measures nothing.

--shared-storage is for a LOWER that something else changes too while it is
mounted: a cloud-sync folder, a second mount of the same volume (gocryptfs's
-sharedstorage). The kernel then keeps names and attributes for 1 s only, so
changes made behind the mount show within a second, at the cost of more
lookups. Without it the kernel keeps them for 30 s: right and faster when
every change goes through this mount.

--noxattr turns extended attributes off, as gocryptfs's -noxattr: every
getxattr, listxattr, setxattr and removexattr on the mount fails with
EOPNOTSUPP, and after the first the kernel stops asking the daemon (securefs
has no xattrs on Linux either). ls -l of a tree then makes two round trips
fewer per entry (the SELinux label and the ACL). POSIX ACLs, file capabilities
and security labels are then neither shown nor enforced: access is checked
against the mode bits alone. Do not use it on a volume whose files carry
ACLs, whose group bits may then let the owning group in further than the ACL
did.

--transport picks how the kernel's requests reach the daemon: auto (the
default) is FUSE over io_uring where the kernel has it (Linux 6.14+, one queue
of --uring-depth entries per CPU) and the administrator switched it on
(/sys/module/fuse/parameters/enable_uring, machine-wide), else /dev/fuse; dev
always reads and writes /dev/fuse; uring asks for the ring, and a mount that
cannot have it says so as a warning. uring as root also switches enable_uring
on if it is off, for the mount's start only (2-50 ms), and back off once the
ring is up: any FUSE mount of any user that starts in that window is offered
the ring too. The log's first line names the transport and why a mount is on
/dev/fuse, and so does 'twincrypt stats'. See docs/uring.md.

--readdir picks how listings reach the kernel: plus (the default) sends each
entry with its attributes, so that ls -l, du, rm -r and rsync stat every
entry without a round trip; auto lets the kernel ask for names alone past a
listing's first reply unless the program uses the entries as it lists (ls -f
and find -name over directories of thousands of entries become several times
faster, du and rm -r of them slower); plain always sends names alone. See
docs/scale.md.

Mount options (-o, comma separated, may repeat):
  allow_other   let other users access the mount (needs user_allow_other in
                /etc/fuse.conf when not root)
  ro            read-only, like --ro
  debug         log every FUSE request, like --debug
  nonempty      allow mounting over a non-empty MNT
  noexec        forbid executing the mount's files
  noatime, relatime, strictatime, nodiratime, lazytime
                the atime flags of the mount itself; the times shown are
                LOWER's, which its own mount options govern (docs/differences.md)
  suid, dev     root only: honour set-ID bits and device nodes (default
                nosuid,nodev, as gocryptfs without -suid, -dev); in fstab
                allow_suid, allow_dev

mount(8) and /etc/fstab reach twincrypt through fuse3's mount.fuse3 as
'twincrypt LOWER MNT -o OPTIONS' (type fuse.twincrypt), which is this
command with --background --quiet; -o there also takes passfile=FILE,
extpass=PROGRAM, log=FILE, oplog=FILE, summary=FILE, passthrough,
shared_storage, noxattr, transport=, readdir=, idle=, rw and remount
(mount -o remount,ro|rw, and the atime flags), and accepts
fstab's own options (noauto, nofail, _netdev, users, x-systemd.*, ...). See the
README and docs/systemd/.

Debug mode writes PLAINTEXT to the log: the names of files, symlink targets,
extended attribute names and the first bytes of every WRITE and SETXATTR
payload, as the kernel sends them. Use it with non-secret data only, and keep
the log where nobody else can read it. --log, --oplog and --summary files are
made 0600; a symlink or another user's file at their path is refused.`,
		Example: `  # Foreground, passphrase from the terminal; Ctrl-C unmounts
  twincrypt mount ~/vault.enc ~/vault

  # Background, passphrase from a file, read-only
  twincrypt mount --background --passfile ~/.vault-pass -o ro ~/vault.enc ~/vault
  twincrypt umount ~/vault

  # The passthrough twin over a plain directory, for timing comparison
  twincrypt mount --background --passthrough /srv/plain /mnt/twin`,
		Args: refuseKeyInArgs(exactArgs(2, "LOWER and MNT")),
		RunE: func(cmd *cobra.Command, args []string) error {
			if f.child {
				return runMountChild(cmd, f, args[0], args[1])
			}
			return runMount(cmd, f, args[0], args[1])
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	f.register(fl, "read the passphrase from the first line of `FILE`")
	f.registerAllowWeak(fl)
	fl.BoolVar(&f.passthrough, "passthrough", false, "mount the passthrough twin (null transform) over a plain directory")
	fl.BoolVar(&f.kernelPassthrough, "kernel-passthrough", false, "twin only: let the kernel serve READ/WRITE directly (measures nothing)")
	fl.BoolVar(&f.sharedStorage, "shared-storage", false, "LOWER is changed by others too (sync client, second mount): short kernel cache lifetimes")
	fl.BoolVar(&f.noXattr, "noxattr", false, "no extended attributes: every xattr call fails with EOPNOTSUPP, no ACLs (ls -l asks the daemon nothing per entry)")
	fl.StringVar(&f.transport, "transport", fs.DaemonTransport, "how requests reach the daemon: `auto` (the ring where the kernel has it and enable_uring is on), dev (/dev/fuse) or uring (FUSE over io_uring; as root, switching enable_uring on for the mount's start)")
	fl.StringVar(&f.readdir, "readdir", fs.ReaddirPlus, "how listings reach the kernel: `plus` (entries with attributes), auto (the kernel chooses) or plain (names only)")
	fl.IntVar(&f.uringDepth, "uring-depth", 0, "with the uring transport: ring entries per queue (`N`; default 8, on more than 8 CPUs 64 in all, at least 2)")
	fl.DurationVar(&f.idle, "idle", 0, "unmount by itself once no operation has reached the daemon for `DURATION` (e.g. 30m) and nothing holds the mount busy; df and other readers of the mount point's own attributes do not count; 0: never")
	fl.BoolVar(&f.ro, "ro", false, "mount read-only")
	fl.StringArrayVarP(&f.opts, "options", "o", nil, "mount options: allow_other, ro, debug, nonempty, noexec, noatime, relatime, strictatime, nodiratime, lazytime, suid, dev (comma separated)")
	fl.BoolVarP(&f.background, "background", "b", false, "detach once mounted; unmount with 'twincrypt umount MNT'")
	fl.BoolVar(&f.debug, "debug", false, "log every FUSE request and reply (plaintext names and data: see above)")
	fl.StringVar(&f.logFile, "log", "", "append log output to `FILE` (in --background mode the only place it goes)")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing on success")
	f.instr.register(fl)
	f.mk.register(fl)
	fl.BoolVar(&f.child, childFlag, false, "internal: this is the background mount process")
	_ = fl.MarkHidden(childFlag)
	return cmd
}

// mountNotes names, for the log's first line, the mount's settings that
// change what the mount does or how fast ("" for none).
func mountNotes(f mountFlags) string {
	var notes []string
	if f.noXattr {
		notes = append(notes, "no xattrs (--noxattr)")
	}
	if f.sharedStorage {
		notes = append(notes, "short kernel cache lifetimes (--shared-storage)")
	}
	if f.readdir != "" && f.readdir != fs.ReaddirPlus {
		notes = append(notes, "listings --readdir "+f.readdir)
	}
	if len(notes) == 0 {
		return ""
	}
	return "; " + strings.Join(notes, "; ")
}

// mountPlan is a mount whose arguments have been validated.
type mountPlan struct {
	lower, mnt string
	opts       mountOpts
	cfg        *config.Config // nil for the passthrough twin
	kernelPass bool           // --kernel-passthrough (twin only)
	instr      instrFlags     // checked, paths absolute
}

// planMount validates flags, LOWER, MNT and the config; it reads no
// passphrase, so that nothing is asked for a mount that cannot happen.
func planMount(f mountFlags, lowerArg, mntArg string) (*mountPlan, error) {
	opts, err := parseMountOpts(f.opts)
	if err != nil {
		return nil, err
	}
	opts.ro = opts.ro || f.ro
	opts.debug = opts.debug || f.debug
	if f.idle < 0 {
		return nil, usageErrorf("--idle %v: a duration of 0 (never) or more", f.idle)
	}
	if f.kernelPassthrough && !f.passthrough {
		return nil, usageErrorf("--kernel-passthrough needs --passthrough: the encrypted mount must see every READ and WRITE")
	}
	lower, err := realDir(lowerArg, "LOWER")
	if err != nil {
		return nil, err
	}
	// A mount already there, or one whose daemon died (stat then fails
	// with ENOTCONN), gets a message that says what to do.
	if clean, cerr := cleanMountPath(mntArg); cerr == nil {
		if m, ok, _ := findMount(clean); ok {
			var st syscall.Stat_t
			if serr := syscall.Stat(clean, &st); errors.Is(serr, syscall.ENOTCONN) {
				return nil, mountpointErrorf("%s: the %s daemon serving it has died; run 'twincrypt umount %s' first", mntArg, m.fsType, mntArg)
			}
			return nil, mountpointErrorf("%s is already a mount point (%s); unmount it first", mntArg, m.fsType)
		}
	}
	mnt, err := realDir(mntArg, "mountpoint")
	if err != nil {
		return nil, &classifiedError{class: errMountpoint, err: err}
	}
	if err := checkMountpoint(lower, mnt, opts.nonempty); err != nil {
		return nil, err
	}
	if err := f.instr.check(lower, mnt); err != nil {
		return nil, err
	}
	p := &mountPlan{lower: lower, mnt: mnt, opts: opts, instr: f.instr, kernelPass: f.kernelPassthrough}
	if f.passthrough {
		return p, nil
	}
	p.cfg, err = config.Load(lower)
	if err != nil {
		return nil, fmt.Errorf("load config of %s: %w", lower, err)
	}
	if !f.mk.given() {
		if err := f.checkConfigKDF(lower, p.cfg); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// unlock unwraps the volume's master key with pass. The key comes back in
// locked memory (keys.Locked: not swapped, not in core dumps, outside the
// Go heap so that the wipe reaches the only copy); the caller destroys it
// when the filesystem is unmounted.
func (p *mountPlan) unlock(pass []byte) (*keys.Locked, error) {
	key, err := p.cfg.Unlock(pass)
	if err != nil {
		return nil, fmt.Errorf("unlock %s: %w", p.lower, err)
	}
	lk := keys.LockedCopy(key)
	// The KDF's working memory (argon2: 64 MiB by default) and the copies
	// of the passphrase its hash functions keep in their own state are
	// garbage now: collect them and give the pages back to the system
	// rather than leave them in a long-running daemon's heap.
	debug.FreeOSMemory()
	return lk, nil
}

func runMount(cmd *cobra.Command, f mountFlags, lowerArg, mntArg string) error {
	if err := checkMountMasterKey(f); err != nil {
		return err
	}
	if _, err := fs.ParseTransport(f.transport); err != nil {
		return usageErrorf("--transport: %v", err)
	}
	if _, err := fs.ParseReaddir(f.readdir); err != nil {
		return usageErrorf("--readdir: %v", err)
	}
	plan, err := planMount(f, lowerArg, mntArg)
	if err != nil {
		return masterKeyHint(f, err)
	}
	stderr := cmd.ErrOrStderr()
	if f.passthrough && !f.quiet {
		if _, err := os.Lstat(filepath.Join(plan.lower, config.FileName)); err == nil {
			fmt.Fprintf(stderr, "twincrypt: warning: %s holds %s; the twin shows its encrypted files as they are\n",
				plan.lower, config.FileName)
		}
	}

	var masterKey []byte
	if plan.cfg != nil && f.mk.given() {
		lk, err := plan.masterKey(f.mk, os.Stdin, stderr)
		if err != nil {
			return err
		}
		defer lk.Destroy()
		if f.background {
			text := masterKeyText(lk.Bytes())
			defer text.Destroy()
			return startBackground(cmd, f, plan, text.Bytes())
		}
		masterKey = lk.Bytes()
	} else if plan.cfg != nil {
		src := f.source(stderr)
		pass, err := src.read(false)
		if err != nil {
			return err
		}
		defer wipe(pass)
		lk, err := plan.unlock(pass)
		if err != nil {
			return err
		}
		if f.background {
			// The child unlocks again with the passphrase it gets over the
			// pipe; the parent's copy of the key is of no further use.
			lk.Destroy()
			return startBackground(cmd, f, plan, pass)
		}
		wipe(pass)
		defer lk.Destroy()
		masterKey = lk.Bytes()
	} else if f.background {
		return startBackground(cmd, f, plan, nil)
	}

	logOut, closeLog, err := openLog(f.logFile, os.Stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	return serve(plan, masterKey, f, logOut, newLogger(logOut, plan.opts.debug), func() {
		if !f.quiet {
			fmt.Fprintf(cmd.OutOrStdout(), "Mounted %s at %s (%s). Press Ctrl-C or run 'twincrypt umount %s' to unmount.\n",
				plan.lower, plan.mnt, plan.describe(), plan.mnt)
		}
	})
}

// describe names the transform for messages.
func (p *mountPlan) describe() string {
	if p.cfg == nil && p.kernelPass {
		return "passthrough twin; " + measure.KernelPassthroughNote
	}
	if p.cfg == nil {
		return "passthrough twin"
	}
	return fmt.Sprintf("%s, %d-bit key", p.cfg.Cipher, p.cfg.KeyBytes*8)
}

// serve mounts, calls ready, and blocks until the filesystem is unmounted,
// by SIGINT/SIGTERM or from outside.
func serve(plan *mountPlan, masterKey []byte, f mountFlags, logOut io.Writer, log zerolog.Logger, ready func()) error {
	sigs := catchSignals()
	defer signal.Stop(sigs)
	in, err := startInstrument(plan.instr, plan.mnt, log)
	if err != nil {
		return err
	}
	var activity *atomic.Uint64
	if f.idle > 0 {
		activity = new(atomic.Uint64)
	}
	// The directory the mount will cover, held to unmount this mount and
	// no other (mounthandle.go).
	mntDir, err := openMountDir(plan.mnt)
	if err != nil {
		in.stop(io.Discard, true)
		return mountFailedErrorf("mount %s at %s: %w", plan.lower, plan.mnt, err)
	}
	var srv *fuse.Server
	err = withFusermount(func() (err error) {
		srv, err = fs.Mount(plan.mnt, fs.Options{
			Recorder:          in.rec,
			Activity:          activity,
			Mirror:            plan.instr.mirror,
			Lower:             plan.lower,
			Config:            plan.cfg,
			MasterKey:         masterKey,
			ReadOnly:          plan.opts.ro,
			AllowOther:        plan.opts.allowOther,
			NoExec:            plan.opts.noexec,
			MountFlags:        plan.opts.flags,
			KernelPassthrough: f.kernelPassthrough,
			SharedStorage:     f.sharedStorage,
			NoXattr:           f.noXattr,
			Transport:         f.transport,
			Readdir:           f.readdir,
			UringDepth:        f.uringDepth,
			Debug:             plan.opts.debug,
			Log:               log,
			// This process serves the mount and never uses it.
			Daemon: true,
		})
		return err
	})
	var fe *fusermountError
	if errors.As(err, &fe) {
		mntDir.Close()
		in.stop(io.Discard, true)
		return mountFailedErrorf("mount %s at %s: %v", plan.lower, plan.mnt, fe)
	}
	if err != nil {
		mntDir.Close()
		in.stop(io.Discard, true)
		return mountFailedErrorf("mount %s at %s: %w", plan.lower, plan.mnt, err)
	}
	mh, err := holdMount(mntDir)
	if err != nil {
		// Not unmounted by path either: the path may lead elsewhere now.
		log.Error().Msgf("mount %s: %v; unmount it with 'twincrypt umount'", plan.mnt, err)
	} else {
		defer mh.close()
	}
	in.transport = fs.TransportOf(srv).String()
	in.kernelPassthrough = f.kernelPassthrough
	if !f.quiet || f.logFile != "" {
		fmt.Fprintf(logOut, "twincrypt: %s: transport %s%s\n", plan.mnt, in.transport, mountNotes(f))
	}
	var stopIdle func()
	if activity != nil {
		stopIdle = watchIdle(plan.mnt, mh, f.idle, activity, log)
	}
	serveUntilUnmounted(srv, sigs, mh, plan.mnt, in, log, ready)
	if stopIdle != nil {
		stopIdle()
	}
	// The summary goes where the log goes: stderr in the foreground, the
	// --log file (or nowhere) in the background.
	return in.stop(logOut, f.quiet)
}

// catchSignals starts catching SIGINT and SIGTERM. It is called before
// mounting: the mount point appears (and may be signalled about) before
// the server is handed to serveUntilUnmounted, and an uncaught SIGINT in
// that window would kill the process and leave the mount dead. A signal
// that arrives early waits in the channel.
func catchSignals() chan os.Signal {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	return sigs
}

// serveUntilUnmounted opens the stats socket, reports ready and blocks
// until the filesystem is unmounted, by a signal on sigs (through mh) or
// from outside.
func serveUntilUnmounted(srv *fuse.Server, sigs chan os.Signal, mh *mountHandle, mnt string, in *instrument, log zerolog.Logger, ready func()) {
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case <-sigs:
				unmountServer(mh, log)
			case <-done:
				return
			}
		}
	}()
	in.listen(mnt)
	ready()
	fs.WaitEnd(srv)
}

// unmountServer unmounts after a signal. The kernel refuses while files on
// the mount are open (EBUSY); we retry briefly, then say what to do
// instead of exiting with the mount still there.
func unmountServer(mh *mountHandle, log zerolog.Logger) {
	const attempts = 3
	var err error
	for i := 0; i < attempts; i++ {
		if err = mh.unmount(false); err == nil {
			return
		}
		time.Sleep(300 * time.Millisecond)
	}
	log.Error().Msgf("%v; still mounted, signal again to retry", err)
}

// watchIdle unmounts mnt once no operation has reached the daemon (ops
// unchanged) for idle, as gocryptfs -idle does. The unmount is a plain
// umount(2), which the kernel refuses while a file on the mount is open
// (or mapped) or a process has its working directory there: then the
// mount stays and the watch starts over. What the kernel serves from its
// caches (a stat of a cached name, a read of cached pages through an
// open file, which holds the mount busy anyway) never reaches the daemon
// and does not count. It returns a function that stops the watch.
func watchIdle(mnt string, mh *mountHandle, idle time.Duration, ops *atomic.Uint64, log zerolog.Logger) (stop func()) {
	tick := min(max(idle/10, 50*time.Millisecond), time.Minute)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(tick)
		defer t.Stop()
		last, quietSince := ops.Load(), time.Now()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				if n := ops.Load(); n != last {
					last, quietSince = n, now
					continue
				}
				if now.Sub(quietSince) < idle {
					continue
				}
				if err := mh.unmount(false); err != nil {
					log.Debug().Msgf("idle for %v, not unmounted: %v", idle, err)
					quietSince = now
					continue
				}
				log.Info().Msgf("unmounted %s: idle for %v", mnt, idle)
				return
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// openLog returns where log output goes: path (appended, 0600) when given,
// else fallback. With debug the log holds plaintext names: path must not
// be a symlink or another user's file (privfile).
func openLog(path string, fallback *os.File) (*os.File, func(), error) {
	if path == "" {
		return fallback, func() {}, nil
	}
	f, err := privfile.Open(path, false)
	if err != nil {
		return nil, nil, fmt.Errorf("log file: %w", err)
	}
	return f, func() { f.Close() }, nil
}

// newLogger is the zerolog console logger the filesystem reports to:
// warnings (corrupt files, undecryptable names) by default, everything with
// --debug.
func newLogger(w io.Writer, debug bool) zerolog.Logger {
	noColor := true
	if f, ok := w.(*os.File); ok {
		noColor = !term.IsTerminal(int(f.Fd()))
	}
	level := zerolog.WarnLevel
	if debug {
		level = zerolog.DebugLevel
	}
	cw := zerolog.ConsoleWriter{Out: w, NoColor: noColor, TimeFormat: time.RFC3339}
	return zerolog.New(cw).Level(level).With().Timestamp().Logger()
}
