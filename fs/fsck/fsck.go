// Package fsck checks, and on request repairs, an encrypted twincrypt volume
// offline: it works on the lower directory directly, with the master key,
// and never through FUSE. The CLI's "twincrypt fsck" is a thin wrapper.
//
// What can be found. XTS and CBC have no integrity, so a flipped bit in an
// extent decrypts to garbage that no check can tell from data. What fsck
// finds is everything the format does make checkable (FORMAT.md):
//
//   - every directory's IV file is there and 16 bytes (encrypted names);
//   - every name decrypts; a long name has its sidecar, and the sidecar
//     hashes to the entry's name; no sidecar is left without its entry;
//   - every regular file has a lower size that encodes a plaintext size, a
//     header that parses, and the volume's cipher and key size;
//   - every stored unit can be read (no I/O error, no short read) and is
//     either all zeros (a hole, legitimate) or has no all-zero aligned
//     16-byte block: a real ciphertext block is zero with probability
//     2^-128, so a unit that is partly zeros was torn by a crash (a page
//     that never reached the disk, a truncate interrupted between its two
//     steps);
//   - every symlink target and user.* xattr value opens (AES-GCM); a long
//     symlink has its sidecar in twincrypt.links, and every sidecar there
//     belongs to a long symlink;
//   - the root holds no leftover of an interrupted config write.
//
// Each problem is reported with its lower path (relative to LOWER) and its
// path in the mounted view where that is known.
//
// Repair. Entries that the mount hides or cannot read are moved aside,
// never deleted: into the directory "lost+found" in the root of the mounted
// view, created on first use as the mount would create it (its lower name
// is the encrypted name of "lost+found" under the root IV, and it gets its
// own IV file). A moved entry keeps its lower content byte for byte and is
// named by its plaintext name, or by its lower name where the plaintext is
// unknown, with ".1", ".2", … appended on a collision. Damaged content inside
// lost+found is then counted as quarantined, not as a problem, so that a
// repaired volume checks clean. Orphaned sidecars and config leftovers are
// deleted (they hold nothing the volume needs: a sidecar is a function of
// its entry's name, and the config that unlocked is complete). A missing
// or damaged directory IV is only replaced in an empty directory, as the
// mount does; elsewhere the names of the directory are lost with it and
// fsck only reports. A user.* xattr that does not open is reported, not
// removed: remove it through the mount (setfattr -x) if it is not needed.
//
// Safety. Everything is reached with openat(2) and friends from a
// descriptor of LOWER, with O_NOFOLLOW on every component, so a symlink in
// LOWER (planted, or swapped in during the check) is examined as a symlink
// and never followed out of LOWER. Repairs re-walk the path the same way
// and check that the entry is still the inode that was checked. Run fsck
// --repair only on a volume that is not mounted.
package fsck

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// Kind says what is wrong. The values are part of the JSON output.
type Kind string

// The kinds of problem fsck reports.
const (
	DirIVMissing      Kind = "diriv-missing"      // a directory has no .twincrypt.diriv
	DirIVDamaged      Kind = "diriv-damaged"      // the IV file is not a regular file of 16 bytes
	NameUndecryptable Kind = "name-undecryptable" // the (full) encrypted name does not decrypt
	SidecarMissing    Kind = "sidecar-missing"    // a long-name entry without its .name sidecar
	SidecarDamaged    Kind = "sidecar-damaged"    // the sidecar is not a readable regular file of sane size
	SidecarMismatch   Kind = "sidecar-mismatch"   // the sidecar's name does not hash to its entry
	SidecarOrphaned   Kind = "sidecar-orphaned"   // a sidecar whose entry does not exist
	TornSize          Kind = "torn-size"          // a lower size that encodes no plaintext size
	BadMagic          Kind = "bad-magic"          // the header does not start with "TwCr"
	BadHeader         Kind = "bad-header"         // unknown header version or reserved bytes set
	CipherMismatch    Kind = "cipher-mismatch"    // header cipher or key size differ from the volume's
	ReadError         Kind = "read-error"         // an I/O error or a short read inside the file
	TornExtent        Kind = "torn-extent"        // a stored unit that is partly zeros
	// StaleTrailer is a file ending on an extent boundary whose tail unit
	// (the 16-byte trailer alone) is not stored as zeros (FORMAT.md 3.2).
	StaleTrailer      Kind = "stale-trailer"
	SymlinkUnreadable Kind = "symlink-unreadable" // the symlink target does not open
	// LinkSidecarMissing is a long symlink whose sidecar in twincrypt.links is gone.
	LinkSidecarMissing Kind = "link-sidecar-missing"
	// LinkSidecarOrphaned is a file in twincrypt.links that no long symlink names.
	LinkSidecarOrphaned Kind = "link-sidecar-orphaned"
	XattrUnreadable     Kind = "xattr-unreadable" // a user.* xattr value does not open
	ConfigLeftover      Kind = "config-leftover"  // twincrypt.conf.bak or a temporary config file
	LowerError          Kind = "lower-error"      // the lower filesystem refused a stat, open or listing
)

// Action is what --repair does about a problem.
type Action string

// Repair actions; the empty Action means fsck cannot repair the problem.
const (
	MoveAside Action = "move-to-lost+found"
	Delete    Action = "delete"
	NewDirIV  Action = "new-diriv"
	// ZeroTrailer stores a stale trailer as the 16 zero bytes the format
	// wants; nothing the file holds changes.
	ZeroTrailer Action = "zero-trailer"
)

// LostFound is the plaintext name of the directory, in the root of the
// mounted view, that repaired entries are moved to.
const LostFound = "lost+found"

// Problem is one finding.
type Problem struct {
	Kind Kind `json:"kind"`
	// Lower is the path relative to LOWER ("." for LOWER itself).
	Lower string `json:"lower"`
	// Plain is the path in the mounted view, "" when it is not known (an
	// undecryptable name on the way).
	Plain string `json:"plain,omitempty"`
	// Xattr names the attribute of an XattrUnreadable problem.
	Xattr  string `json:"xattr,omitempty"`
	Detail string `json:"detail"`
	// Action is the repair (empty: none possible).
	Action Action `json:"action,omitempty"`
	// Repaired is set once --repair did Action; Note says what was done,
	// why the repair failed, or what the user can do.
	Repaired bool   `json:"repaired"`
	Note     string `json:"note,omitempty"`
	// Quarantined marks damaged content inside lost+found: listed, not
	// counted as a problem.
	Quarantined bool `json:"quarantined,omitempty"`
}

// Options tune Check.
type Options struct {
	// Repair moves aside, deletes or replaces what can be repaired.
	Repair bool
	// Quick skips reading the extents of regular files (sizes, headers,
	// names, links and xattrs are still checked).
	Quick bool
}

// Report is the result of Check.
type Report struct {
	Lower          string `json:"lower"`
	Cipher         string `json:"cipher"`
	KeyBytes       int    `json:"key_bytes"`
	PlaintextNames bool   `json:"plaintext_names"`
	Repair         bool   `json:"repair"`
	Quick          bool   `json:"quick"`

	// What was checked (LOWER itself is not counted as a directory).
	Dirs       int64 `json:"dirs"`
	Files      int64 `json:"files"`
	Symlinks   int64 `json:"symlinks"`
	Other      int64 `json:"other"`
	PlainBytes int64 `json:"plain_bytes"`

	Problems []Problem `json:"problems"`
	// Found counts the problems (not the quarantined entries), Repaired
	// those --repair fixed, Quarantined the damaged entries already in
	// lost+found.
	Found       int `json:"found"`
	Repaired    int `json:"repaired"`
	Quarantined int `json:"quarantined"`
	// LostFound is the lower name of lost+found when a repair used it.
	LostFound string `json:"lost_found,omitempty"`
}

// Unrepaired is the number of problems that remain.
func (r *Report) Unrepaired() int { return r.Found - r.Repaired }

// Clean reports whether no problem was found.
func (r *Report) Clean() bool { return r.Found == 0 }

// Check walks the volume in lower with the unlocked master key and reports
// what is wrong; with opts.Repair it then repairs what it can. The error is
// for failures that stop the whole check (LOWER cannot be opened); damage
// is in the report.
func Check(lower string, cfg *config.Config, master []byte, opts Options) (*Report, error) {
	engine, err := content.NewEngine(cfg.ContentSpec(), cfg.KeyBytes, master)
	if err != nil {
		return nil, fmt.Errorf("fsck: %w", err)
	}
	c := &checker{
		engine: engine,
		seal:   keys.NewSealer(master),
		opts:   opts,
		rep: &Report{
			Lower: lower, Cipher: cfg.Cipher, KeyBytes: cfg.KeyBytes,
			PlaintextNames: cfg.PlaintextNames, Repair: opts.Repair, Quick: opts.Quick,
			Problems: []Problem{},
		},
	}
	if !cfg.PlaintextNames {
		nameKey := keys.Derive(master, "names", nil, names.KeySize)
		c.names, err = names.New(nameKey)
		keys.Wipe(nameKey)
		if err != nil {
			return nil, fmt.Errorf("fsck: %w", err)
		}
	}
	root, err := openRoot(lower)
	if err != nil {
		return nil, fmt.Errorf("fsck: open %s: %w", lower, err)
	}
	defer root.Close()
	c.root = root
	c.buf = make([]byte, scanUnits*content.ExtentSize+content.ExtentSize)

	c.walkDir(root, "", "/", true, false)
	c.checkLinkStore()
	if opts.Repair {
		c.repair()
	}
	if c.lf != nil {
		c.lf.dir.Close()
	}
	for _, p := range c.rep.Problems {
		switch {
		case p.Quarantined:
			c.rep.Quarantined++
		case p.Repaired:
			c.rep.Found++
			c.rep.Repaired++
		default:
			c.rep.Found++
		}
	}
	return c.rep, nil
}

// openRoot opens LOWER itself. The path was resolved by the caller; a
// symlink as its last component is refused all the same.
func openRoot(lower string) (*os.File, error) {
	fd, err := unix.Open(lower, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), lower), nil
}

// errChanged is a repair refused because the entry is no longer what the
// check saw.
var errChanged = errors.New("the entry changed since it was checked")
