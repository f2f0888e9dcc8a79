package main

// The mount helper form. mount(8) mounts "fuse.twincrypt" (from the
// command line or /etc/fstab) through fuse3's mount.fuse3, which runs
//
//	/bin/sh -c "twincrypt LOWER MNT -o OPTIONS"
//
// with mount(8)'s own options filtered (user, users, auto, noauto, nofail,
// _netdev are dropped; x-* never reach it) and "dev,suid" added unless
// nodev/nosuid were given. mount(8) runs helpers without PATH, so /bin/sh
// looks for twincrypt in its default search path (/usr/local/sbin,
// /usr/local/bin, /usr/sbin, /usr/bin, /sbin, /bin). mount(8) waits for the
// helper to exit: the helper form is 'twincrypt mount --background'.

import (
	"os"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/fs"
)

// isHelperForm reports whether args are the mount helper's "LOWER MNT
// [-o OPTIONS]": the first argument is an existing directory, not a
// command. A mistyped command that is not a directory still gets cobra's
// "unknown command".
func isHelperForm(root *cobra.Command, args []string) bool {
	if len(args) < 2 || strings.HasPrefix(args[0], "-") || args[0] == "help" ||
		args[0] == cobra.ShellCompRequestCmd || args[0] == cobra.ShellCompNoDescRequestCmd {
		return false
	}
	for _, c := range root.Commands() {
		if c.Name() == args[0] || c.HasAlias(args[0]) {
			return false
		}
	}
	fi, err := os.Stat(args[0])
	return err == nil && fi.IsDir()
}

// helperMountArgs turns the helper form into the equivalent
// 'twincrypt mount' command line.
func helperMountArgs(args []string) ([]string, error) {
	lower, mnt := args[0], args[1]
	optValues, err := helperOptValues(args)
	if err != nil {
		return nil, err
	}
	out := []string{"mount", "--background", "--quiet"}
	var ours []string
	ro, noexec := false, false
	for _, v := range optValues {
		for _, opt := range strings.Split(v, ",") {
			name, value, hasValue := strings.Cut(strings.TrimSpace(opt), "=")
			switch {
			case name == "":
			case hasValue && (name == "passfile" || name == "log" || name == "oplog" || name == "summary"):
				if value == "" {
					return nil, usageErrorf("mount option %s= needs a file name", name)
				}
				out = append(out, "--"+name, value)
			case !hasValue && name == "passthrough":
				out = append(out, "--passthrough")
			case !hasValue && name == "shared_storage":
				out = append(out, "--shared-storage")
			case !hasValue && name == "noxattr":
				out = append(out, "--noxattr")
			case hasValue && name == "extpass":
				if value == "" {
					return nil, usageErrorf("mount option extpass= needs a program")
				}
				out = append(out, "--extpass", value)
			case hasValue && name == "transport":
				out = append(out, "--transport", value)
			case hasValue && name == "readdir":
				out = append(out, "--readdir", value)
			case hasValue && name == "idle":
				out = append(out, "--idle", value)
			case !hasValue && name == "ro":
				ro = true
			case !hasValue && name == "rw":
				ro = false
			case !hasValue && name == "noexec":
				noexec = true
			case !hasValue && name == "exec":
				noexec = false
			case !hasValue && (name == "allow_other" || name == "debug" || name == "nonempty"):
				ours = append(ours, name)
			case !hasValue && atimeOption(name):
				ours = append(ours, name)
			case !hasValue && (name == "allow_suid" || name == "allow_dev"):
				// mount.fuse3 adds suid,dev to every line that does not
				// say nosuid,nodev, so those cannot be consent: these
				// are (gocryptfs's -suid, -dev; root only).
				ours = append(ours, strings.TrimPrefix(name, "allow_"))
			case helperTolerated(name, hasValue):
			default:
				return nil, usageErrorf("unknown mount option %q (twincrypt knows passfile=FILE, extpass=PROGRAM, allow_other, ro, rw, debug, nonempty, passthrough, shared_storage, noxattr, transport=dev|uring|auto, readdir=plus|auto|plain, idle=DURATION, log=FILE, oplog=FILE, noexec, summary=FILE, noatime, relatime, strictatime, nodiratime, lazytime, allow_suid, allow_dev, remount; see 'twincrypt mount --help')", opt)
			}
		}
	}
	if ro {
		ours = append(ours, "ro")
	}
	if noexec {
		ours = append(ours, "noexec")
	}
	if len(ours) > 0 {
		out = append(out, "-o", strings.Join(ours, ","))
	}
	return append(out, "--", lower, mnt), nil
}

// helperOptValues are the -o values of the helper form's arguments.
func helperOptValues(args []string) ([]string, error) {
	var optValues []string
	for i := 2; i < len(args); i++ {
		switch a := args[i]; {
		case a == "-o" && i+1 < len(args):
			i++
			optValues = append(optValues, args[i])
		case strings.HasPrefix(a, "-o") && len(a) > 2:
			optValues = append(optValues, a[2:])
		default:
			return nil, usageErrorf("mount helper form is 'twincrypt LOWER MNT [-o OPTIONS]', got %q", a)
		}
	}
	return optValues, nil
}

// atimeOption reports the mount(8) options of the atime family.
func atimeOption(name string) bool {
	_, ok := fs.AtimeFlag(0, name)
	return ok
}

// helperRemount: "mount -o remount,..." reaches the helper too, with the
// mount's options as mountinfo shows them followed by the new ones
// (mount(8) merges them; the later wins). ok reports a remount; flags
// are its mount(2) flags. The kernel's own options (user_id=,
// default_permissions, max_read=...) and ours (passfile=...) cannot
// change on a remount and are left out: a remount changes what mount(2)
// changes, the per-mount flags and read-only.
func helperRemount(args []string) (mnt string, flags uintptr, ok bool, err error) {
	optValues, err := helperOptValues(args)
	if err != nil {
		return "", 0, false, err
	}
	flags = unix.MS_REMOUNT
	for _, v := range optValues {
		for _, opt := range strings.Split(v, ",") {
			switch strings.TrimSpace(opt) {
			case "remount":
				ok = true
			case "ro":
				flags |= unix.MS_RDONLY
			case "rw":
				flags &^= unix.MS_RDONLY
			case "nosuid":
				flags |= unix.MS_NOSUID
			case "suid":
				flags &^= unix.MS_NOSUID
			case "nodev":
				flags |= unix.MS_NODEV
			case "dev":
				flags &^= unix.MS_NODEV
			case "noexec":
				flags |= unix.MS_NOEXEC
			case "exec":
				flags &^= unix.MS_NOEXEC
			default:
				// The atime family; anything else is the kernel's or
				// ours, unchanged by a remount.
				flags, _ = fs.AtimeFlag(flags, strings.TrimSpace(opt))
			}
		}
	}
	return args[1], flags, ok, nil
}

// helperTolerated are the options that mount(8), fstab conventions or
// mount.fuse3 put on the line and that mean nothing to the daemon. "dev"
// and "suid" are added by mount.fuse3 to every mount: twincrypt mounts are
// nodev,nosuid unless allow_dev, allow_suid say otherwise (as fusermount3
// makes every FUSE mount of a user), so they are tolerated and not
// honoured, and "nodev", "nosuid" are what happens anyway.
func helperTolerated(name string, hasValue bool) bool {
	if strings.HasPrefix(name, "x-") || strings.HasPrefix(name, "X-") || name == "comment" {
		return true
	}
	if hasValue {
		return name == "user" // mount(8) as a user with the "user" option
	}
	switch name {
	case "defaults", "auto", "noauto", "user", "nouser", "users", "owner", "group",
		"nofail", "_netdev", "dev", "nodev", "suid", "nosuid", "async":
		return true
	}
	return false
}
