// Package fs is twincrypt's FUSE node tree: one loopback engine over a lower
// directory with a pluggable transform. The crypt transform encrypts file
// content, names, symlink targets and xattr values; the null transform is the
// passthrough twin, the very same code with the cipher switched off, so the
// difference between the two mounts is the cost of encryption alone.
package fs

import (
	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
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
	// KernelPassthrough lets the kernel serve READ/WRITE of the twin directly
	// from the lower file (FUSE passthrough). Off by default: a twin that
	// bypasses the daemon measures nothing. Refused for the crypt transform.
	KernelPassthrough bool
	// Debug logs every FUSE request and reply (go-fuse's debug output).
	Debug bool
	// Log receives warnings (corrupt files, undecryptable names).
	Log zerolog.Logger
	// FSName is shown as the source in /proc/mounts (default: Lower).
	FSName string
}

// Mount mounts the filesystem described by o at mnt and returns the running
// server; call Unmount on it (or umount the path) to stop, and Wait to block
// until it is gone. It uses DirectMount when running as root and fusermount3
// otherwise, a 1 MiB max write and 1 MiB readahead.
func Mount(mnt string, o Options) (*fuse.Server, error) {
	panic("TODO")
}
