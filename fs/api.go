// Package fs is twincrypt's FUSE node tree: one loopback engine over a lower
// directory with a pluggable transform. The crypt transform encrypts file
// content, names, symlink targets and xattr values; the null transform is the
// passthrough twin, the very same code with the cipher switched off, so the
// difference between the two mounts is the cost of encryption alone.
package fs

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/names"
	"github.com/twincrypt/twincrypt/fs/uring"
	"github.com/twincrypt/twincrypt/measure"
)

// Options configure one mount.
type Options struct {
	// Lower is the directory that holds the (encrypted) data.
	Lower string
	// Config and MasterKey select the crypt transform. A nil Config mounts
	// the passthrough twin (null transform) over a plain directory.
	Config    *config.Config
	MasterKey []byte
	// ReadOnly mounts read-only; AllowOther lets other users in.
	ReadOnly   bool
	AllowOther bool
	// NoExec forbids executing the mount's files (mount(8)'s noexec, which
	// the fstab options user and users imply).
	NoExec bool
	// MountFlags are mount(8) flags for the mount itself, in order (a
	// later one of the atime family wins): noatime, relatime,
	// strictatime, nodiratime, atime, diratime, lazytime, nolazytime,
	// and, for a mount by root, suid and dev (mounts are nosuid,nodev
	// without them, as gocryptfs's are without -suid, -dev). See
	// docs/differences.md for what the atime flags mean over a LOWER
	// that keeps its own atimes.
	MountFlags []string
	// KernelPassthrough lets the kernel serve READ/WRITE of the twin directly
	// from the lower file (FUSE passthrough). Off by default: a twin that
	// bypasses the daemon measures nothing. Refused for the crypt transform.
	KernelPassthrough bool
	// Debug logs every FUSE request and reply (go-fuse's debug output) to
	// DebugLog, or to the standard logger when DebugLog is nil.
	Debug    bool
	DebugLog *log.Logger
	// Log receives warnings (corrupt files, undecryptable names).
	Log zerolog.Logger
	// FSName is shown as the source in /proc/mounts (default: Lower).
	FSName string
	// Recorder times every operation (nil: instrumentation off).
	Recorder *measure.Recorder
	// Activity, if set, counts the operations the daemon serves that a
	// user makes (all but FORGET, STATFS and reads of the root's own
	// attributes: see isActivity), whether or not they are timed: a
	// mount that watches for idleness (twincrypt mount --idle) reads it.
	Activity *atomic.Uint64
	// SharedStorage is for a LOWER that is changed by others too while
	// mounted (a cloud-sync folder, a second mount of the same volume,
	// like gocryptfs -sharedstorage): the kernel keeps names and
	// attributes for SharedCacheTimeout only, so that changes made behind
	// the mount show within it. Without it the kernel keeps them for
	// CacheTimeout, which is correct because every change goes through
	// this daemon and the kernel updates or drops what each one touches.
	SharedStorage bool
	// NoXattr turns extended attributes off, as gocryptfs -noxattr does:
	// the daemon answers the first GETXATTR, LISTXATTR, SETXATTR and
	// REMOVEXATTR with ENOSYS, after which the kernel fails them all
	// with EOPNOTSUPP without asking (securefs's behaviour on Linux).
	// ls -l then makes no round trip per entry for the SELinux label
	// and the ACL. POSIX ACLs, file capabilities and security labels
	// are then neither shown nor enforced: the kernel checks the mode
	// bits alone, and applies the umask itself.
	NoXattr bool
	// Mirror, if set, is a plain directory to which every operation on
	// the mount is applied as well, through the null transform, timed
	// separately and paired with the mount's timing (mirror mode). It puts
	// plaintext on disk: a measuring tool for non-secret data. It must
	// start as a copy of the mount's plaintext (empty for a new volume).
	Mirror string
	// Daemon says that the mounting process never uses the mount itself
	// (twincrypt mount's daemon): mounting then makes no request on it at
	// all. Without it, go-fuse's poll hack runs on the new mount, which a
	// process that opens files on its own mount needs (see serve).
	Daemon bool
	// Transport is how requests travel: TransportDev (/dev/fuse),
	// TransportUring (FUSE over io_uring, falling back to /dev/fuse with
	// the reason logged when the kernel cannot; as root it switches the
	// machine-wide enable_uring on for the mount's INIT if it is off) or
	// TransportAuto (the ring where the kernel has it and the
	// administrator switched enable_uring on). Empty means DefaultTransport.
	// TransportOf tells which one a mount got.
	Transport string
	// UringDepth is the number of ring entries per queue (0: the
	// default of fs/uring).
	UringDepth int
	// Readdir is how listings reach the kernel: ReaddirPlus (the
	// default when empty), ReaddirAuto or ReaddirPlain; see ParseReaddir.
	Readdir string
	// ringFallback is why a mount that asked for the ring was mounted
	// again on /dev/fuse.
	ringFallback string
}

// How listings reach the kernel (Options.Readdir). Measured at 10^5
// files in one directory in docs/scale.md ("READDIRPLUS"); in directories
// of up to about 190 entries (one reply) the three are the same but for
// plain.
const (
	// ReaddirPlus (the default) answers every listing with READDIRPLUS:
	// each entry comes with its attributes, so that the stat of every
	// entry that ls -l, du, rm -r, rsync and the like make next costs
	// no round trip.
	ReaddirPlus = "plus"
	// ReaddirAuto lets the kernel choose per reply (READDIRPLUS_AUTO):
	// READDIRPLUS for a listing's first reply and after a program used
	// an entry it got so, plain READDIR otherwise. A listing of names
	// alone (ls -f, find -name) of a big directory is several times
	// cheaper; a program that reads a whole big directory before it
	// stats the entries (du, rm -r: fts) pays a LOOKUP round trip per
	// entry.
	ReaddirAuto = "auto"
	// ReaddirPlain answers every listing with names alone, as securefs
	// does: every stat after a listing costs a LOOKUP round trip.
	ReaddirPlain = "plain"
)

// ParseReaddir checks a --readdir value ("" is ReaddirPlus).
func ParseReaddir(s string) (string, error) {
	switch s {
	case "":
		return ReaddirPlus, nil
	case ReaddirPlus, ReaddirAuto, ReaddirPlain:
		return s, nil
	}
	return "", fmt.Errorf("unknown readdir mode %q (want plus, auto or plain)", s)
}

// CacheTimeout is how long the kernel may keep a name (or its absence)
// and a file's attributes without asking the daemon again. LOWER is
// changed by this daemon alone, and every change it makes is one the
// kernel sees and accounts for: replies to CREATE, MKDIR, LINK, SETATTR
// and WRITE carry the new attributes; after UNLINK, RMDIR, RENAME, LINK
// and the creates it drops the attributes of the parent directories and
// of the inode whose link count changed (fs/fuse/dir.c); after SETXATTR
// and REMOVEXATTR, ACLs included, those of the inode (the mode an ACL
// sets, the ctime); after a WRITE that drops set-user-ID bits its mode;
// after READ and READDIR its atime. So a long lifetime costs no
// correctness, and saves two LOOKUPs or a GETATTR per file on every
// walk of a tree that has not changed (TestCacheSeesDaemonChanges).
const CacheTimeout = 30 * time.Second

// SharedCacheTimeout is the lifetime of names and attributes with
// Options.SharedStorage: changes made to LOWER behind the mount show
// within it.
const SharedCacheTimeout = time.Second

// Mount mounts the filesystem described by o at mnt and returns the running
// server; call Unmount on it (or umount the path) to stop, and Wait to block
// until it is gone. It uses DirectMount when running as root and fusermount3
// otherwise, a 1 MiB max write and 1 MiB readahead.
func Mount(mnt string, o Options) (*fuse.Server, error) {
	_, srv, err := mountRoot(mnt, o)
	return srv, err
}

// mountRoot is Mount, also returning the root it serves.
func mountRoot(mnt string, o Options) (*root, *fuse.Server, error) {
	if err := CheckMountFlags(o.MountFlags); err != nil {
		return nil, nil, err
	}
	r, err := newRoot(o)
	if err != nil {
		return nil, nil, err
	}
	srv, err := r.serve(mnt, o, nil)
	var stuck *ringStuckError
	if errors.As(err, &stuck) {
		// The connection was lost to a ring that did not come up: mount
		// again on /dev/fuse.
		o.Log.Warn().Msgf("mount %s: %v; mounting again on /dev/fuse", mnt, err)
		if r, err = newRoot(o); err != nil {
			return nil, nil, err
		}
		o.Transport = TransportDev
		o.ringFallback = stuck.reason
		srv, err = r.serve(mnt, o, nil)
	}
	return r, srv, err
}

// serve mounts r at mnt with o's mount options and starts serving. wrap,
// when not nil, wraps the raw filesystem (tests use it to watch requests).
func (r *root) serve(mnt string, o Options, wrap func(fuse.RawFileSystem) fuse.RawFileSystem) (*fuse.Server, error) {
	opts := r.nodeOptions(o)
	raw, err := r.rawFS(opts, wrap)
	if err != nil {
		r.close()
		return nil, err
	}
	asked, releaseParam, ringErr := askForRing(o, &opts.MountOptions)
	shown := kernelMountPoint(mnt)
	srv, err := fuse.NewServer(raw, mnt, &opts.MountOptions)
	if err != nil {
		if releaseParam != nil {
			releaseParam()
		}
		r.close()
		return nil, fmt.Errorf("mount %s: %w", mnt, err)
	}
	var ring *uring.Transport
	if releaseParam != nil {
		ring, ringErr = startRingFunc(srv, raw, &opts.MountOptions, o.UringDepth, o.Log)
		releaseParam()
		if ringErr != nil && ringHoldsConnection(srv, ringErr) {
			err := dropStuckConnection(srv, mnt, ringErr)
			r.close()
			return nil, err
		}
	}
	go srv.Serve()
	if err := r.waitMount(srv, o, ring, mnt); err != nil {
		return nil, err
	}
	if o.ringFallback != "" {
		asked, ringErr = TransportUring, errors.New(o.ringFallback)
	}
	endTransport := finishTransport(srv, o, asked, ring, ringErr, mnt)
	raiseReadahead(shown, opts.MaxReadAhead, o.Log)
	r.closeAtEnd(srv, endTransport)
	return srv, nil
}

// nodeOptions are the mount options and kernel capabilities o asks for;
// it also sets the cache lifetime r's replies carry.
func (r *root) nodeOptions(o Options) *fs.Options {
	fsName := o.FSName
	if fsName == "" {
		fsName = o.Lower
	}
	ttl := CacheTimeout
	if o.SharedStorage {
		ttl = SharedCacheTimeout
	}
	r.attrTTL = ttl
	r.sharedStorage = o.SharedStorage
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:       fsName,
			Name:         "twincrypt",
			AllowOther:   o.AllowOther,
			MaxWrite:     fuse.MAX_KERNEL_WRITE,
			MaxReadAhead: fuse.MAX_KERNEL_WRITE,
			DirectMount:  os.Geteuid() == 0,
			Debug:        o.Debug,
			Logger:       o.DebugLog,
			Options:      mountFlags(o),
			// Every change of a file's content goes through this daemon
			// (LOWER is not changed behind a running mount), so the
			// kernel's page cache of a file stays right until we say
			// otherwise: it must not drop it whenever a GETATTR shows a
			// new mtime (auto_inval_data), which after our own writes
			// is every second.
			ExplicitDataCacheControl: true,
			// Replies carry data from memory, never from a lower
			// descriptor: nothing to splice.
			DisableSplice: true,
		},
		// Mode 0 is a mode like any other (chmod 000), not "unset".
		NullPermissions: true,
		EntryTimeout:    &ttl,
		AttrTimeout:     &ttl,
		NegativeTimeout: &ttl,
	}
	// The root's inode number is its lower directory's, as every other
	// node's is (stableAttr); go-fuse would otherwise report 0.
	var rootSt syscall.Stat_t
	if err := syscall.Fstat(r.main.rootFd, &rootSt); err == nil {
		opts.RootStableAttr = &fs.StableAttr{Ino: r.stableAttr(&rootSt, 0).Ino}
	}
	if opts.DirectMount {
		opts.DirectMountFlags, opts.Options = directMountFlags(opts.Options)
	}
	askCapabilities(o, &opts.MountOptions)
	return opts
}

// mountFlags are the options mount(2) gets.
func mountFlags(o Options) []string {
	// The daemon does every operation as root (or as the mounting user):
	// the kernel must check permissions against the file modes, or with
	// allow_other any user could read any file. Also on a mount only
	// root may use: FUSE lets in any caller whose uids are root's, also
	// one acting with another fsuid (setfsuid, as file servers do) or
	// without CAP_DAC_OVERRIDE, and such a caller must get EACCES where
	// it would natively. (Without it the kernel would not ask GETATTR of
	// a directory after each change in it before the next check: one
	// round trip per file created or removed, docs/requests.md.)
	flags := []string{"default_permissions"}
	if o.ReadOnly {
		flags = append(flags, "ro")
	}
	if o.NoExec {
		flags = append(flags, "noexec")
	}
	return append(flags, o.MountFlags...)
}

// CheckMountFlags refuses a flag that Options.MountFlags does not take,
// and suid or dev for a mount not made by root (fusermount3 would drop
// them without a word).
func CheckMountFlags(flags []string) error {
	for _, f := range flags {
		switch f {
		case "noatime", "relatime", "strictatime", "nodiratime", "atime", "diratime", "lazytime", "nolazytime", "nosuid", "nodev":
		case "suid", "dev":
			if os.Geteuid() != 0 {
				return fmt.Errorf("mount flag %s: only root may mount with set-ID programs or device nodes honoured", f)
			}
		default:
			return fmt.Errorf("unknown mount flag %q", f)
		}
	}
	return nil
}

// directMountFlags are the mount(2) flags of a mount by root for flags
// (mountFlags), and the options left for mount(2)'s data: go-fuse turns
// only the [no]suid, [no]dev and [no]exec strings into flag bits, and the
// kernel refuses the atime names as data (EINVAL); fusermount3, for a
// mount by a user, takes them all as strings.
func directMountFlags(flags []string) (uintptr, []string) {
	bits := uintptr(syscall.MS_NOSUID | syscall.MS_NODEV)
	var data []string
	for _, f := range flags {
		var ok bool
		if bits, ok = AtimeFlag(bits, f); !ok {
			data = append(data, f)
		}
	}
	return bits, data
}

// AtimeFlag applies the mount(8) option opt of the atime family (noatime,
// relatime, strictatime, atime, nodiratime, diratime, lazytime,
// nolazytime) to the mount(2) flags bits; ok is false for any other.
func AtimeFlag(bits uintptr, opt string) (uintptr, bool) {
	const atime = syscall.MS_NOATIME | syscall.MS_RELATIME | syscall.MS_STRICTATIME
	switch opt {
	case "noatime":
		return bits&^atime | syscall.MS_NOATIME, true
	case "relatime":
		return bits&^atime | syscall.MS_RELATIME, true
	case "strictatime":
		return bits&^atime | syscall.MS_STRICTATIME, true
	case "atime":
		return bits &^ syscall.MS_NOATIME, true
	case "nodiratime":
		return bits | syscall.MS_NODIRATIME, true
	case "diratime":
		return bits &^ syscall.MS_NODIRATIME, true
	case "lazytime":
		return bits | unix.MS_LAZYTIME, true
	case "nolazytime":
		return bits &^ unix.MS_LAZYTIME, true
	}
	return bits, false
}

// askCapabilities adds to mo the FUSE capabilities the INIT reply asks of
// the kernel (all but the ring, askForRing).
func askCapabilities(o Options, mo *fuse.MountOptions) {
	// The kernel leaves the clearing of set-user-ID bits on write to us
	// and stops asking GETXATTR security.capability before each write.
	mo.ExtraCapabilities |= fuse.CAP_HANDLE_KILLPRIV_V2
	// An open(O_TRUNC) of an existing file is one OPEN that carries
	// O_TRUNC (FUSE_ATOMIC_O_TRUNC), not an OPEN and a SETATTR of size 0:
	// the daemon truncates once it has checked that the lower file is the
	// node's own (newFile), and clears set-user-ID bits as the kernel
	// asks (killPriv.Open).
	mo.ExtraCapabilities |= fuse.CAP_ATOMIC_O_TRUNC
	// POSIX ACLs, stored as the lower files' own ACLs, are enforced by
	// the kernel (which caches them per inode); it leaves the umask to
	// us (DONT_MASK), because a default ACL overrides it (see umask.go).
	// The kernel keeps symlink targets (FUSE_CACHE_SYMLINKS), so that a
	// path through a symlink costs no READLINK round trip after the
	// first: a target never changes, and a symlink made through the
	// mount is a new node to the kernel even where its lower inode number
	// is that of a deleted one the kernel still holds (go-fuse registers
	// a created entry as new; TestSymlinkCacheInodeReuse). Not with
	// shared storage, where a symlink made behind the mount, looked up,
	// could be taken for such a deleted one's node.
	mo.EnableSymlinkCaching = !o.SharedStorage
	// With NoXattr (go-fuse's DisableXAttrs: ENOSYS) there are no ACLs,
	// and the kernel applies the umask.
	if o.NoXattr {
		mo.DisableXAttrs = true
	} else {
		mo.EnableAcl = true
		mo.ExtraCapabilities |= fuse.CAP_DONT_MASK
	}
	switch o.Readdir {
	case ReaddirAuto:
		// The kernel asks READDIRPLUS for the first reply of a listing
		// and for those after which a program used an entry it got
		// so; plain READDIR otherwise.
		mo.ExtraCapabilities |= fuse.CAP_READDIRPLUS_AUTO
	case ReaddirPlain:
		mo.DisableReadDirPlus = true
	}
}

// rawFS is the node tree as go-fuse's raw filesystem, with the request
// filters every mount has (umask, set-user-ID clearing) and wrap's.
func (r *root) rawFS(opts *fs.Options, wrap func(fuse.RawFileSystem) fuse.RawFileSystem) (fuse.RawFileSystem, error) {
	var raw fuse.RawFileSystem = &umaskRaw{&killPriv{fs.NewNodeFS(r.rootNode, opts)}}
	if r.twin != nil {
		// After NewNodeFS: the root node lists like any other.
		if err := r.checkMirror(); err != nil {
			return nil, err
		}
	}
	if wrap != nil {
		raw = wrap(raw)
	}
	return raw, nil
}

// askForRing returns the transport o asks for and, when that is the ring
// and enable_uring could be had, asks for it in mo: the ring is asked for
// in the INIT reply, which go-fuse sends inside NewServer, as an extra
// capability (granted only if the kernel offers it, that is if
// enable_uring is on). From then on the kernel holds every request until
// all queues are registered, WaitMount's included: the queues register
// between NewServer and Serve. releaseParam, when not nil, gives the
// parameter back once the queues are up (or failed); ringErr says why the
// ring was not asked for.
func askForRing(o Options, mo *fuse.MountOptions) (asked string, releaseParam func(), ringErr error) {
	asked = o.Transport
	if asked == "" {
		asked = DefaultTransport
	}
	if asked != TransportDev {
		if releaseParam, ringErr = acquireUringParam(o.Log, asked == TransportUring); ringErr == nil {
			mo.ExtraCapabilities |= fuse.CAP_OVER_IO_URING
		}
	}
	return asked, releaseParam, ringErr
}

// kernelMountPoint is mnt as the kernel will show it in mountinfo,
// resolved while it is still a plain directory (see raiseReadahead).
func kernelMountPoint(mnt string) string {
	shown := mnt
	if abs, err := filepath.Abs(mnt); err == nil {
		shown = abs
	}
	if p, err := filepath.EvalSymlinks(shown); err == nil {
		shown = p
	}
	return shown
}

// waitMount waits, unless o is the daemon's, until the mount answers.
// The mount is up: on Linux go-fuse mounts (mount(2) or fusermount)
// inside NewServer, before it answers INIT. What srv.WaitMount adds
// is go-fuse's poll hack: an open and a poll of a file on the new
// mount, so that the kernel learns at once that POLL is not
// implemented. A process that opens files on its own mount needs it:
// Go registers every file it opens with epoll, epoll_ctl sends a POLL
// and waits for it holding a P the garbage collector cannot stop, and
// a stop-the-world then waits for ever while the readers that would
// answer are stopped (seen in our tests). twincrypt's daemon never
// opens its own mount (Options.Daemon), and it must not make any
// request on it: a daemon killed while one of its own threads waits
// on a request of its own ring never exits (Linux 6.18,
// docs/uring.md). Its clients' first poll gets ENOSYS all the same.
func (r *root) waitMount(srv *fuse.Server, o Options, ring *uring.Transport, mnt string) error {
	if o.Daemon {
		return nil
	}
	if err := srv.WaitMount(); err != nil {
		// The serve loop ends by itself when the mount never came up.
		if ring != nil {
			ring.Stop()
			ring.Wait()
		}
		r.close()
		return fmt.Errorf("mount %s: %w", mnt, err)
	}
	return nil
}

// closeAtEnd ends the transport and releases r's descriptors once the
// last request is served, and marks srv's end for Wait.
func (r *root) closeAtEnd(srv *fuse.Server, endTransport func()) {
	ended := make(chan struct{})
	ends.Store(srv, ended)
	go func() {
		srv.Wait()
		endTransport()
		r.close()
		close(ended)
		ends.Delete(srv)
	}()
}

// close releases the lower root descriptors of the sides.
func (r *root) close() {
	r.closeOnce.Do(func() {
		// Handles the kernel never released (their RELEASE was still
		// queued at the unmount): all requests are served by now.
		r.open.Range(func(k, _ any) bool {
			switch h := k.(type) {
			case *file:
				closeFd(h.fd)
				closeFd(h.twinFd)
			case *dirHandle:
				closeFd(h.fd)
			}
			r.open.Delete(k)
			return true
		})
		for _, s := range []*side{r.main, r.twin} {
			if s != nil && s.rootFd >= 0 {
				syscall.Close(s.rootFd)
			}
			if s != nil {
				if ct, ok := s.t.(*cryptTransform); ok {
					ct.pending.close()
					ct.nameWarn.flush()
				}
			}
		}
	})
}

// openRoot opens the lower directory of a side: the one descriptor from
// which every lower object of the mount is reached (see openBeneath). The
// path given by the user is followed, symlinks and all, once, here.
func openRoot(dir string) (int, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("lower directory %s: %w", dir, err)
	}
	return fd, nil
}

// newRoot checks the lower directory and builds the transform.
func newRoot(o Options) (*root, error) {
	lower, err := filepath.Abs(o.Lower)
	if err != nil {
		return nil, err
	}
	var st syscall.Stat_t
	if err := syscall.Stat(lower, &st); err != nil {
		return nil, fmt.Errorf("lower directory: %w", err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR {
		return nil, fmt.Errorf("lower directory %s: not a directory", lower)
	}
	r := &root{dev: uint64(st.Dev), log: o.Log, rec: o.Recorder, activity: o.Activity, xattrCache: !o.SharedStorage && o.Mirror == ""}
	if err := r.build(o, lower); err != nil {
		r.close()
		return nil, err
	}
	r.rootNode = r.newRootNode()
	return r, nil
}

func (r *root) build(o Options, lower string) error {
	rootFd, err := openRoot(lower)
	if err != nil {
		return err
	}
	probeOpenat2(rootFd, o.Log)
	if o.Config == nil {
		r.main = &side{lower: lower, rootFd: rootFd, t: nullTransform{}}
		r.kernelPassthrough = o.KernelPassthrough
	} else {
		if o.KernelPassthrough {
			syscall.Close(rootFd)
			return errors.New("kernel passthrough would bypass encryption: only the twin may use it")
		}
		t, err := newCryptTransform(o.Config, o.MasterKey, o.Log)
		if err != nil {
			syscall.Close(rootFd)
			return err
		}
		t.lowerXattrs = lowerOwnedXattrs(rootFd)
		r.main = &side{lower: lower, rootFd: rootFd, t: t}
		if err := ensureRootDirIV(r.main, t, o.ReadOnly); err != nil {
			return err
		}
	}
	r.main.io = r.main.t.content()
	if c, ok := r.main.io.(*cryptIO); ok && o.SharedStorage {
		c.noTail = true
	}
	var st unix.Stat_t
	if err := unix.Fstat(r.main.rootFd, &st); err != nil {
		return fmt.Errorf("lower directory %s: %w", lower, err)
	}
	r.main.rootDev, r.main.rootIno = st.Dev, st.Ino
	r.main.rootCloseNoop = closeIsNoop(r.main.rootFd)
	r.main.rootDirAtime = dirAtimeOf(r.main.rootFd)
	if o.Mirror != "" {
		if o.KernelPassthrough {
			return errors.New("mirror mode needs every READ and WRITE in the daemon: no kernel passthrough")
		}
		mirror, err := filepath.Abs(o.Mirror)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(mirror); err != nil || !fi.IsDir() {
			return fmt.Errorf("mirror directory %s: not a directory (%v)", mirror, err)
		}
		if mirror == lower {
			return errors.New("the mirror directory cannot be LOWER itself")
		}
		fd, err := openRoot(mirror)
		if err != nil {
			return err
		}
		t := nullTransform{}
		r.twin = &side{lower: mirror, rootFd: fd, t: t, io: t.content()}
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("mirror directory %s: %w", mirror, err)
		}
		r.twin.rootDev, r.twin.rootIno = st.Dev, st.Ino
		r.twin.rootCloseNoop = closeIsNoop(fd)
	}
	return nil
}

// InitLower finishes a volume that config.Create has just written: with
// encrypted names the root directory gets its IV, so that the volume can
// be mounted read-only from the start.
func InitLower(lower string, cfg *config.Config) error {
	if cfg.PlaintextNames {
		return nil
	}
	iv, err := names.NewDirIV()
	if err != nil {
		return err
	}
	fd, err := openRoot(lower)
	if err != nil {
		return err
	}
	defer syscall.Close(fd)
	if errno := writeSmallFile(fd, names.DirIVFile, iv, 0400); errno != 0 {
		return fmt.Errorf("write root directory IV: %w", errno)
	}
	return nil
}

// ensureRootDirIV gives a freshly initialised volume its root directory
// IV. A root that already holds files but no IV is damaged: refuse it
// rather than make its names undecryptable.
func ensureRootDirIV(s *side, t *cryptTransform, readOnly bool) error {
	if t.names == nil {
		return nil
	}
	lower := s.lower
	var st syscall.Stat_t
	if fstatat(s.rootFd, names.DirIVFile, &st) == nil {
		return nil
	}
	entries, err := os.ReadDir(lower)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !t.hidden(true, e.Name()) {
			return fmt.Errorf("%s: %s is missing: names in this directory cannot be decrypted", lower, names.DirIVFile)
		}
	}
	if readOnly {
		return fmt.Errorf("%s: volume has no root directory IV yet; mount it read-write once", lower)
	}
	if _, errno := t.newDir(&acct{}, s.loc(s.rootFd, "", "")); errno != 0 {
		return fmt.Errorf("write root directory IV: %w", errno)
	}
	return nil
}

// raiseReadahead sets the kernel readahead of the mount at mnt (an
// absolute path without symlinks) to max bytes. The FUSE handshake asks
// for it, but the kernel caps a new mount's backing device at its default
// (128 KiB), so sequential reads would come in 128 KiB requests, eight
// round trips per MiB; the cap is lifted through the backing device's
// read_ahead_kb in sysfs, which root may write. The device number comes
// from /proc/self/mountinfo, not from a stat of the mount point, which
// would be a request of the daemon on its own mount. Best effort: without
// it reads are correct, only smaller.
func raiseReadahead(mnt string, max int, log zerolog.Logger) {
	dev, err := mountDevice(mnt)
	if err != nil {
		log.Debug().Err(err).Msg("readahead stays at the kernel's default")
		return
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", dev>>20, dev&(1<<20-1))
	if err := os.WriteFile(p, []byte(strconv.Itoa(max/1024)), 0); err != nil {
		log.Debug().Err(err).Str("sysfs", p).Msg("readahead stays at the kernel's default")
	}
}
