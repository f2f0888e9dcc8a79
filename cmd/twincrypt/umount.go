package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure/control"
)

func newUmountCmd() *cobra.Command {
	var lazy bool
	cmd := &cobra.Command{
		Use:     "umount [flags] MNT",
		Aliases: []string{"unmount"},
		Short:   "Unmount a twincrypt (or any FUSE) mount",
		Long: `Unmount the filesystem mounted at MNT. The mounting process, in the
foreground or in the background, then exits.

As root this calls umount(2) directly; otherwise, or when that is not
permitted, it runs 'fusermount3 -u' (or 'fusermount -u'). The kernel refuses
while files on the mount are open; --lazy detaches the mount now and lets
the kernel finish it when the last file is closed (umount -l, fusermount -z).`,
		Example: `  twincrypt umount ~/vault
  twincrypt umount --lazy ~/vault`,
		Args: exactArgs(1, "MNT"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return unmountPath(args[0], lazy)
		},
	}
	cmd.Flags().BoolVarP(&lazy, "lazy", "z", false, "detach now, finish when no longer busy")
	return cmd
}

// unmountPath unmounts the mount at mntArg, refusing paths that are not
// mount points (a typo must not unmount the parent filesystem).
func unmountPath(mntArg string, lazy bool) error {
	err := unmountOnly(mntArg, lazy)
	if err == nil {
		removeStaleSocket(mntArg)
	}
	return err
}

// removeStaleSocket removes the stats socket of the mount at mnt when no
// daemon answers on it (one killed with SIGKILL could not remove it). A
// live daemon removes its own when it exits.
func removeStaleSocket(mnt string) {
	if m, err := cleanMountPath(mnt); err == nil {
		mnt = m
	}
	control.RemoveStale(mnt)
}

func unmountOnly(mntArg string, lazy bool) error {
	mnt, err := cleanMountPath(mntArg)
	if err != nil {
		return mountpointErrorf("%s: %w", mntArg, err)
	}
	_, mounted, err := findMount(mnt)
	if err != nil {
		return err
	}
	if !mounted {
		return mountpointErrorf("%s is not a mount point", mnt)
	}
	if os.Geteuid() == 0 {
		flags := 0
		if lazy {
			flags = unix.MNT_DETACH
		}
		err := unix.Unmount(mnt, flags)
		if err == nil {
			return nil
		}
		if errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("unmount %s: target is busy (close the files that use it, or use --lazy)", mnt)
		}
		if !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("unmount %s: %w", mnt, err)
		}
		// EPERM as root happens in user namespaces; fusermount may still work.
	}
	return fusermountUnmount(mnt, lazy)
}

// fusermountUnmount runs fusermount3 -u (or fusermount -u), which lets the
// user who mounted a FUSE filesystem unmount it without privileges.
func fusermountUnmount(mnt string, lazy bool) error {
	bin, err := exec.LookPath("fusermount3")
	if err != nil {
		if bin, err = exec.LookPath("fusermount"); err != nil {
			return fmt.Errorf("unmount %s: not root and neither fusermount3 nor fusermount is installed", mnt)
		}
	}
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	var out bytes.Buffer
	c := exec.Command(bin, append(args, mnt)...)
	c.Stdout, c.Stderr = &out, &out
	if err := c.Run(); err != nil {
		if msg := oneLine(out.String()); msg != "" {
			return fmt.Errorf("unmount %s: %s", mnt, msg)
		}
		return fmt.Errorf("unmount %s: %s: %w", mnt, bin, err)
	}
	return nil
}
