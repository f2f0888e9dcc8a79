package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/fs"
)

// mountOpts are the -o options mount understands. Anything else is a usage
// error: silently ignoring an option a user believes is in force (ro!) would
// be worse than refusing it.
type mountOpts struct {
	allowOther bool
	ro         bool
	debug      bool
	nonempty   bool
	noexec     bool
	// flags are mount(8) flags of the atime family and [no]suid, [no]dev
	// (fs.Options.MountFlags), in order.
	flags []string
}

// parseMountOpts parses the values of every -o flag, each a comma list.
// Empty items (from "ro,,debug" or a trailing comma) are ignored.
func parseMountOpts(values []string) (mountOpts, error) {
	var o mountOpts
	for _, v := range values {
		for _, opt := range strings.Split(v, ",") {
			switch strings.TrimSpace(opt) {
			case "":
			case "allow_other":
				o.allowOther = true
			case "ro":
				o.ro = true
			case "debug":
				o.debug = true
			case "nonempty":
				o.nonempty = true
			case "noexec":
				o.noexec = true
			case "noatime", "relatime", "strictatime", "nodiratime", "atime", "diratime", "lazytime", "nolazytime",
				"suid", "dev", "nosuid", "nodev":
				o.flags = append(o.flags, strings.TrimSpace(opt))
			default:
				return mountOpts{}, usageErrorf("unknown mount option -o %q (known: allow_other, ro, debug, nonempty, noexec, noatime, relatime, strictatime, nodiratime, lazytime, suid, dev)", opt)
			}
		}
	}
	if err := fs.CheckMountFlags(o.flags); err != nil {
		return mountOpts{}, usageErrorf("-o: %v", err)
	}
	return o, nil
}

// String renders the options back as one -o value, for the background child.
func (o mountOpts) String() string {
	var opts []string
	for _, f := range []struct {
		on   bool
		name string
	}{{o.allowOther, "allow_other"}, {o.ro, "ro"}, {o.debug, "debug"}, {o.nonempty, "nonempty"}, {o.noexec, "noexec"}} {
		if f.on {
			opts = append(opts, f.name)
		}
	}
	return strings.Join(append(opts, o.flags...), ",")
}

// realDir returns the absolute, symlink-free path of dir, which must exist
// and be a directory. what names the argument in errors ("LOWER", "MNT").
func realDir(dir, what string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", noLower(what, fmt.Errorf("%s %s does not exist", what, dir))
		}
		return "", fmt.Errorf("%s %s: %w", what, dir, err)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", what, dir, err)
	}
	if !fi.IsDir() {
		return "", noLower(what, fmt.Errorf("%s %s is not a directory", what, dir))
	}
	return real, nil
}

// noLower classifies a LOWER that is missing or no directory as what it
// means to the exit table: there is no twincrypt.conf in LOWER (exit 10).
func noLower(what string, err error) error {
	if what != "LOWER" {
		return err
	}
	return &classifiedError{class: config.ErrMissing, err: err}
}

// checkMountpoint validates MNT against LOWER (both already absolute and
// symlink-free): it must be a directory, must not be LOWER, inside LOWER or
// above it (the daemon reaches LOWER by path, so a mount above it would
// route the daemon's own I/O back into itself), and must be empty unless
// nonempty is set.
func checkMountpoint(lower, mnt string, nonempty bool) error {
	if mnt == lower {
		return mountpointErrorf("mountpoint %s is LOWER itself", mnt)
	}
	if isWithin(mnt, lower) {
		return mountpointErrorf("mountpoint %s is inside LOWER %s", mnt, lower)
	}
	if isWithin(lower, mnt) {
		return mountpointErrorf("LOWER %s is inside mountpoint %s", lower, mnt)
	}
	if nonempty {
		return nil
	}
	d, err := os.Open(mnt)
	if err != nil {
		return mountpointErrorf("mountpoint %s: %w", mnt, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && err != io.EOF {
		return mountpointErrorf("mountpoint %s: %w", mnt, err)
	}
	if len(names) > 0 {
		return mountpointErrorf("mountpoint %s is not empty (use -o nonempty to mount over it anyway)", mnt)
	}
	return nil
}

// isWithin reports whether path lies strictly below dir.
func isWithin(path, dir string) bool {
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return false
	}
	return rel != "." && rel != ".." && !strings.HasPrefix(rel, "../") && !filepath.IsAbs(rel)
}

// mountInfo is one line of /proc/self/mountinfo, reduced to what the CLI
// needs.
type mountInfo struct {
	id, parentID int
	dev          string // major:minor of the mounted filesystem
	mountPoint   string
	fsType       string
	source       string
	superOptions string // "rw,user_id=1000,group_id=1000" on FUSE
}

// fuseOwner is the uid that mounted a FUSE filesystem (its daemon's user),
// from the user_id super option.
func (m mountInfo) fuseOwner() (int, bool) {
	if m.fsType != "fuse" && !strings.HasPrefix(m.fsType, "fuse.") {
		return 0, false
	}
	for _, o := range strings.Split(m.superOptions, ",") {
		if v, ok := strings.CutPrefix(o, "user_id="); ok {
			uid, err := strconv.Atoi(v)
			return uid, err == nil
		}
	}
	return 0, false
}

// readMountInfo parses /proc/self/mountinfo (see proc(5)):
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//
// Field 5 is the mount point; after the "-" separator come the filesystem
// type, the source and the super options. Paths escape space, tab, newline and backslash as
// octal (\040).
func readMountInfo(r io.Reader) ([]mountInfo, error) {
	var mounts []mountInfo
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		m := mountInfo{dev: fields[2], mountPoint: unescapeMountPath(fields[4])}
		m.id, _ = strconv.Atoi(fields[0])
		m.parentID, _ = strconv.Atoi(fields[1])
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				if i+1 < len(fields) {
					m.fsType = fields[i+1]
				}
				if i+2 < len(fields) {
					m.source = unescapeMountPath(fields[i+2])
				}
				if i+3 < len(fields) {
					m.superOptions = fields[i+3]
				}
				break
			}
		}
		mounts = append(mounts, m)
	}
	return mounts, sc.Err()
}

// unescapeMountPath undoes the kernel's octal escaping of \, space, tab and
// newline in mount paths.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// findMount returns the mount at path from /proc/self/mountinfo; when
// several are stacked there, the last (topmost) one.
func findMount(path string) (mountInfo, bool, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return mountInfo{}, false, err
	}
	defer f.Close()
	mounts, err := readMountInfo(f)
	if err != nil {
		return mountInfo{}, false, fmt.Errorf("read /proc/self/mountinfo: %w", err)
	}
	var found mountInfo
	ok := false
	for _, m := range mounts {
		if m.mountPoint == path {
			found, ok = m, true
		}
	}
	return found, ok, nil
}

// cleanMountPath makes path absolute and resolves symlinks in its parent
// directories. The last element is not resolved: on a FUSE mount whose
// daemon died, stat of the mount point itself fails with ENOTCONN, and that
// is exactly the mount umount must still be able to remove.
func cleanMountPath(path string) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	parent, base := filepath.Split(abs)
	if base == "" {
		return abs, nil
	}
	realParent, err := filepath.EvalSymlinks(parent)
	if err != nil {
		return abs, nil
	}
	return filepath.Join(realParent, base), nil
}
