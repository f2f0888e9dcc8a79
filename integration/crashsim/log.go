// Package crashsim explores the states a power cut can leave twincrypt's
// LOWER directory in, CrashMonkey/ALICE style: a recording loopback
// (Recorder) that twincrypt's LOWER sits on logs every mutating call as a
// local filesystem's persistence model sees it; Generate derives from the
// log the states a crash could leave (the model is docs/crash-model.md);
// Check materialises each state in a fresh directory and checks twincrypt's
// promises (cipher/FORMAT.md §7) on it with fsck and a mount; Run drives
// real workloads (atomic replace, append-only log, untar and sync, git,
// SQLite) through all of it.
package crashsim

import "fmt"

// ID names one inode of the recorded filesystem for the whole recording
// (inode numbers are reused; IDs are not). The root directory is 0.
type ID int

// Kind is what one logged operation does.
type Kind uint8

const (
	// Metadata operations: journalled in order, each atomic.
	OpCreate      Kind = iota + 1 // Ino created as Name in Dir (Type, Mode, Target)
	OpLink                        // Ino linked as Name in Dir
	OpUnlink                      // Name removed from Dir (unlink or rmdir)
	OpRename                      // Dir/Name to Dir2/Name2 (Flags: RENAME_*)
	OpTruncate                    // Ino's size set to Size by truncate (new bytes read as zeros)
	OpSetSize                     // Ino's size grown to Size by a write past the end
	OpChmod                       // Ino's permission bits set to Mode
	OpChown                       // Ino's owner set to UID, GID
	OpUtimes                      // Ino's times set (not modelled: times are no promise)
	OpSetxattr                    // Ino's xattr Xattr set to Data
	OpRemovexattr                 // Ino's xattr Xattr removed
	// Data: one page (at most 4 KiB, inside one page-aligned page) of a write.
	OpWrite // Data written to Ino at Off
	// Barriers.
	OpFsync    // fsync(2) (Datasync: fdatasync) of Ino returned
	OpFsyncDir // fsync(2) of directory Ino returned
	OpSync     // sync(2): everything before it is durable
)

var kindNames = map[Kind]string{
	OpCreate: "create", OpLink: "link", OpUnlink: "unlink", OpRename: "rename",
	OpTruncate: "truncate", OpSetSize: "setsize", OpChmod: "chmod", OpChown: "chown",
	OpUtimes: "utimes", OpSetxattr: "setxattr", OpRemovexattr: "removexattr",
	OpWrite: "write", OpFsync: "fsync", OpFsyncDir: "fsyncdir", OpSync: "sync",
}

func (k Kind) String() string { return kindNames[k] }

// IsMeta reports whether k is a metadata operation.
func (k Kind) IsMeta() bool { return k >= OpCreate && k <= OpRemovexattr }

// IsBarrier reports whether k is a barrier.
func (k Kind) IsBarrier() bool { return k >= OpFsync }

// PageSize is the unit in which the model persists data: a write is logged
// as one OpWrite per page it touches.
const PageSize = 4096

// Op is one logged operation. Only the fields its Kind names are set; a
// write carries its bytes (one page at most), nothing else carries data.
type Op struct {
	Kind     Kind
	Ino      ID
	Dir      ID
	Name     string
	Dir2     ID
	Name2    string
	Flags    uint32
	Type     uint32 // S_IFMT bits of a created inode
	Mode     uint32 // permission bits
	Rdev     uint32
	UID, GID int
	Target   string // symlink target
	Xattr    string
	Off      int64
	Size     int64
	Data     []byte
	Datasync bool
}

func (o Op) String() string {
	switch {
	case o.Kind == OpCreate:
		return fmt.Sprintf("create %d/%q -> #%d (%o)", o.Dir, o.Name, o.Ino, o.Type|o.Mode)
	case o.Kind == OpLink:
		return fmt.Sprintf("link %d/%q -> #%d", o.Dir, o.Name, o.Ino)
	case o.Kind == OpUnlink:
		return fmt.Sprintf("unlink %d/%q", o.Dir, o.Name)
	case o.Kind == OpRename:
		return fmt.Sprintf("rename %d/%q -> %d/%q flags %d", o.Dir, o.Name, o.Dir2, o.Name2, o.Flags)
	case o.Kind == OpWrite:
		return fmt.Sprintf("write #%d [%d,+%d)", o.Ino, o.Off, len(o.Data))
	case o.Kind == OpTruncate || o.Kind == OpSetSize:
		return fmt.Sprintf("%s #%d %d", o.Kind, o.Ino, o.Size)
	case o.Kind == OpFsync && o.Datasync:
		return fmt.Sprintf("fdatasync #%d", o.Ino)
	case o.Kind == OpSync:
		return "sync"
	}
	return fmt.Sprintf("%s #%d %s", o.Kind, o.Ino, o.Xattr)
}

// splitPages logs a write of data at off as one OpWrite per page.
func splitPages(ino ID, off int64, data []byte) []Op {
	var ops []Op
	for len(data) > 0 {
		n := int(PageSize - off%PageSize)
		if n > len(data) {
			n = len(data)
		}
		ops = append(ops, Op{Kind: OpWrite, Ino: ino, Off: off, Data: append([]byte(nil), data[:n]...)})
		off += int64(n)
		data = data[n:]
	}
	return ops
}

// renameExchange is RENAME_EXCHANGE (renameat2).
const renameExchange = 1 << 1
