package fs

import (
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// killPriv takes over from the kernel the clearing of the set-user-ID and
// set-group-ID bits when an unprivileged process writes, truncates or
// opens with O_TRUNC (FUSE_HANDLE_KILLPRIV_V2).
//
// Without it the kernel does the clearing itself, and to know whether a
// file carries file capabilities it asks GETXATTR "security.capability"
// before every write(2): one more round trip to the daemon per write,
// which on small writes costs as much as the write. With it the kernel
// marks the superblock SB_NOSEC and asks once per inode; the request
// carries a flag (WRITE_KILL_SUIDGID, FATTR_KILL_SUIDGID,
// OPEN_KILL_SUIDGID) when the caller lacks CAP_FSETID, and the daemon,
// which writes to LOWER as root, must clear the bits itself, with the
// kernel's rule (setattr_should_drop_suidgid): set-user-ID always,
// set-group-ID when group-executable or when the caller is not in the
// file's group.
// File capabilities need no work here: security.capability is stored in
// the clear on the lower file, on every mount, and the lower filesystem
// drops it on the daemon's own write, even root's.
type killPriv struct {
	fuse.RawFileSystem
}

// clear drops the bits of node hdr.NodeId if it has them.
func (k *killPriv) clear(cancel <-chan struct{}, hdr *fuse.InHeader) {
	var attr fuse.AttrOut
	if k.RawFileSystem.GetAttr(cancel, &fuse.GetAttrIn{InHeader: *hdr}, &attr) != fuse.OK {
		return
	}
	mode := attr.Mode
	if mode&syscall.S_IFMT != syscall.S_IFREG {
		return
	}
	kill := uint32(syscall.S_ISUID)
	if mode&syscall.S_IXGRP != 0 || mode&syscall.S_ISGID != 0 && !inGroup(&hdr.Caller, attr.Gid) {
		kill |= syscall.S_ISGID
	}
	if mode&kill == 0 {
		return
	}
	in := &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{InHeader: *hdr, Valid: fuse.FATTR_MODE, Mode: mode &^ kill & 07777}}
	k.RawFileSystem.SetAttr(cancel, in, &attr)
}

// clearChown drops what a chown by the caller of hdr drops natively from
// node hdr.NodeId, the file's group before the change being oldGid.
func (k *killPriv) clearChown(cancel <-chan struct{}, hdr *fuse.InHeader, oldGid uint32) {
	var attr fuse.AttrOut
	if k.RawFileSystem.GetAttr(cancel, &fuse.GetAttrIn{InHeader: *hdr}, &attr) != fuse.OK {
		return
	}
	mode := attr.Mode
	if mode&syscall.S_IFMT == syscall.S_IFDIR {
		return
	}
	kill := uint32(syscall.S_ISUID)
	if mode&syscall.S_ISGID != 0 && (mode&syscall.S_IXGRP != 0 || !inGroup(&hdr.Caller, oldGid) && !capableCaller(&hdr.Caller, capFsetid)) {
		kill |= syscall.S_ISGID
	}
	if mode&kill == 0 {
		return
	}
	in := &fuse.SetAttrIn{SetAttrInCommon: fuse.SetAttrInCommon{InHeader: *hdr, Valid: fuse.FATTR_MODE, Mode: mode &^ kill & 07777}}
	k.RawFileSystem.SetAttr(cancel, in, &attr)
}

func (k *killPriv) Write(cancel <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0 {
		k.clear(cancel, &in.InHeader)
	}
	return k.RawFileSystem.Write(cancel, in, data)
}

func (k *killPriv) Writev(cancel <-chan struct{}, in *fuse.WriteIn, data [][]byte) (uint32, fuse.Status) {
	if in.WriteFlags&fuse.WRITE_KILL_SUIDGID != 0 {
		k.clear(cancel, &in.InHeader)
	}
	return k.RawFileSystem.Writev(cancel, in, data)
}

func (k *killPriv) SetAttr(cancel <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	// Three SETATTRs follow the chown rule: a chown (the kernel flags
	// every one FATTR_KILL_SUIDGID, whoever makes it), a chown to -1, -1
	// (no attribute, no flag), and the SETATTR with no attribute the
	// kernel sends, for a caller without CAP_FSETID only, where it would
	// remove privileges itself (file_remove_privs: fallocate, punch,
	// zero range, copy_file_range...). For such a caller the chown rule
	// is the kernel's rule for writes, and the two cannot be told apart.
	chown := in.Valid&fuse.FATTR_SIZE == 0 && (in.Valid&fuse.FATTR_KILL_SUIDGID != 0 || setattrNothing(in))
	var oldGid uint32
	if chown && in.Valid&fuse.FATTR_GID != 0 && !capableCaller(&in.Caller, capFsetid) {
		// The set-group-ID rule of a chown looks at the group the file
		// had before (chown_common), which a change of group loses. A
		// caller with CAP_FSETID keeps the bit whatever the group, so
		// its chown (root's, the common one) asks nothing more.
		var before fuse.AttrOut
		if st := k.RawFileSystem.GetAttr(cancel, &fuse.GetAttrIn{InHeader: in.InHeader}, &before); st != fuse.OK {
			return st
		}
		oldGid = before.Gid
	}
	st := k.RawFileSystem.SetAttr(cancel, in, out)
	// out holds the attributes after the change: without a set-user-ID
	// or set-group-ID bit left (the common case), there is nothing to
	// clear.
	if st != fuse.OK || out.Mode&(syscall.S_ISUID|syscall.S_ISGID) == 0 {
		return st
	}
	switch {
	case chown:
		// LOWER, chowned by the root daemon, dropped set-user-ID and a
		// group-executable set-group-ID already; what is left is the
		// set-group-ID bit the kernel keeps for a caller in the file's
		// group or holding CAP_FSETID (setattr_should_drop_sgid).
		if in.Valid&fuse.FATTR_GID == 0 {
			oldGid = out.Gid
		}
		k.clearChown(cancel, &in.InHeader, oldGid)
	case in.Valid&fuse.FATTR_KILL_SUIDGID != 0:
		k.clear(cancel, &in.InHeader)
	default:
		return st
	}
	// Report the mode as it is now.
	k.RawFileSystem.GetAttr(cancel, &fuse.GetAttrIn{InHeader: in.InHeader}, out)
	return st
}

func (k *killPriv) Open(cancel <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	st := k.RawFileSystem.Open(cancel, in, out)
	if st == fuse.OK && in.Mode&fuse.OPEN_KILL_SUIDGID != 0 && in.Flags&syscall.O_TRUNC != 0 {
		k.clear(cancel, &in.InHeader)
	}
	return st
}

// No Create: the kernel flags a CREATE with O_TRUNC OPEN_KILL_SUIDGID
// whether or not the name exists, but a CREATE that succeeds made a new
// file (one that finds the file returns ESTALE, and the kernel then opens
// it with OPEN), and natively a file just made is not truncated and keeps
// the set-user-ID bit it was made with (TestKillPrivCreateTrunc).

// inGroup reports whether the calling process is in group gid: its
// primary group, or one of its supplementary groups (from /proc; a caller
// gone meanwhile counts as not in the group, which clears more, not less).
func inGroup(c *fuse.Caller, gid uint32) bool {
	if c.Gid == gid {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(c.Pid), 10) + "/status")
	if err != nil {
		return false
	}
	want := strconv.FormatUint(uint64(gid), 10)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Groups:"); ok {
			for _, g := range strings.Fields(rest) {
				if g == want {
					return true
				}
			}
			return false
		}
	}
	return false
}
