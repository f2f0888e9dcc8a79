// Package blockdev is the userspace stand-in for `cryptsetup open` on a
// kernel without device-mapper. It serves an unlocked dm-crypt volume (LUKS1,
// LUKS2 or plain, see cipher/luks) through FUSE as a directory that holds one
// regular file, "volume", whose bytes are the decrypted payload:
//
//	twincrypt blockdev open disk.img /mnt/dev     # this package, in the daemon
//	losetup --find --show /mnt/dev/volume         # -> /dev/loopN
//	mkfs.ext4 /dev/loopN && mount /dev/loopN /mnt/data
//
// A write to the volume file at plaintext offset off lands in the image at
// Volume.Offset+off, encrypted sector by sector exactly as dm-crypt's
// crypt_convert would encrypt it (see layout.go for the arithmetic), so the
// image stays a valid dm-crypt volume that the real `cryptsetup open` can
// read on a machine that has device-mapper.
//
// Like a block device, the volume file has a fixed size: truncation fails
// with EPERM, writes past the end with ENOSPC. Requests that do not cover
// whole sectors are served by read-modify-write under an exclusive lock.
//
// Every operation is timed into a measure.Recorder (crypto time and image
// I/O time separately), as the per-file engine in package fs does, so the
// dm-crypt path can be compared with the per-file one op by op.
//
// FUSE passthrough is never offered: the kernel would then read the image
// directly and see ciphertext.
package blockdev

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/luks"
	"github.com/twincrypt/twincrypt/cipher/sector"
	"github.com/twincrypt/twincrypt/measure"
)

// VolumeName is the name of the one file in the mount's root.
const VolumeName = "volume"

// Options configure one mount.
type Options struct {
	// Image is the file holding the encrypted volume (the LUKS image, or
	// the raw ciphertext for plain mode).
	Image string
	// Volume is the unlocked volume: key, cipher and geometry.
	Volume *luks.Volume
	// ReadOnly opens the image read-only and mounts read-only.
	ReadOnly bool
	// Recorder times every operation (nil: instrumentation off).
	Recorder *measure.Recorder
	// Log receives warnings (short reads of a truncated image).
	Log zerolog.Logger
	// Debug logs every FUSE request and reply (go-fuse's debug output) to
	// DebugLog, or to the standard logger when DebugLog is nil.
	Debug    bool
	DebugLog *log.Logger
}

// ErrImageBusy is returned by Mount when another process (another blockdev
// mount, say) holds a conflicting lock on the image: two daemons encrypting
// into one image would corrupt it.
var ErrImageBusy = errors.New("blockdev: image is in use by another mount")

// Mount serves the volume described by o at mnt and returns the running
// server; call Unmount on it (or umount the path) to stop, and Wait to block
// until it is gone. The image is closed when the server stops.
//
// It uses DirectMount when running as root and fusermount3 otherwise, and a
// 1 MiB max write. The image is locked with flock(2), exclusively for a
// read-write mount and shared for a read-only one.
func Mount(mnt string, o Options) (*fuse.Server, error) {
	d, err := openDevice(o)
	if err != nil {
		return nil, err
	}
	var mountOpts []string
	if o.ReadOnly {
		mountOpts = append(mountOpts, "ro")
	}
	second := time.Second
	root := &rootNode{d: d}
	opts := &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName:       d.image,
			Name:         "twincrypt",
			MaxWrite:     maxRequest,
			MaxReadAhead: maxRequest,
			DirectMount:  os.Geteuid() == 0,
			Debug:        o.Debug,
			Logger:       o.DebugLog,
			Options:      mountOpts,
			// Every write reaches the image through this mount (the
			// image is locked), so the kernel's cached pages of the
			// volume are never stale. Without this the kernel would drop
			// them whenever it sees the mtime that each write moves.
			ExplicitDataCacheControl: true,
		},
		EntryTimeout:    &second,
		AttrTimeout:     &second,
		NegativeTimeout: &second,
		OnAdd: func(ctx context.Context) {
			vol := root.NewPersistentInode(ctx, &volumeNode{d: d},
				fs.StableAttr{Mode: syscall.S_IFREG, Ino: volumeIno})
			root.AddChild(VolumeName, vol, false)
		},
	}
	srv, err := fs.Mount(mnt, root, opts)
	if err != nil {
		d.close()
		return nil, fmt.Errorf("mount %s: %w", mnt, err)
	}
	go func() {
		// Every request loop has exited once Wait returns: nothing uses
		// the image any more. os.File refuses I/O after Close, so a
		// straggler could not hit a reused descriptor anyway.
		srv.Wait()
		d.close()
	}()
	return srv, nil
}

// Inode numbers of the two nodes.
const (
	rootIno   = 1
	volumeIno = 2
)

// openDevice opens and locks the image and checks the volume against it.
func openDevice(o Options) (*device, error) {
	if o.Volume == nil {
		return nil, errors.New("blockdev: no volume")
	}
	c, err := sector.New(o.Volume.Cipher, o.Volume.Key)
	if err != nil {
		return nil, fmt.Errorf("blockdev: cipher of %s: %w", o.Image, err)
	}
	flags, lock := os.O_RDWR, unix.LOCK_EX
	if o.ReadOnly {
		flags, lock = os.O_RDONLY, unix.LOCK_SH
	}
	f, err := os.OpenFile(o.Image, flags, 0)
	if err != nil {
		return nil, fmt.Errorf("blockdev: open image: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), lock|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%s: %w", o.Image, ErrImageBusy)
		}
		return nil, fmt.Errorf("blockdev: lock %s: %w", o.Image, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("blockdev: stat %s: %w", o.Image, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG && st.Mode&unix.S_IFMT != unix.S_IFBLK {
		f.Close()
		return nil, fmt.Errorf("blockdev: %s is neither a regular file nor a block device", o.Image)
	}
	imageSize := st.Size
	if st.Mode&unix.S_IFMT == unix.S_IFBLK {
		// A block device reports size 0 in stat; ask it.
		n, err := unix.IoctlGetUint64(int(f.Fd()), unix.BLKGETSIZE64)
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("blockdev: size of %s: %w", o.Image, err)
		}
		imageSize = int64(n)
	}
	l, err := newLayout(o.Volume, imageSize)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("blockdev: %s: %w", o.Image, err)
	}
	d := &device{
		image:    o.Image,
		f:        f,
		c:        c,
		l:        l,
		readOnly: o.ReadOnly,
		rec:      o.Recorder,
		log:      o.Log,
		uid:      uint32(os.Getuid()),
		gid:      uint32(os.Getgid()),
	}
	d.mtimeNs.Store(time.Unix(st.Mtim.Unix()).UnixNano())
	return d, nil
}
