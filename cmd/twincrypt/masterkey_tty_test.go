package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
)

// openPTY returns the master and the slave of a new pseudo-terminal.
func openPTY(t *testing.T) (*os.File, *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("skipping: no pseudo-terminal (%v)", err)
	}
	fd := int(master.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		master.Close()
		t.Fatalf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		master.Close()
		t.Fatalf("ptsname: %v", err)
	}
	slave, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		t.Fatalf("open pts: %v", err)
	}
	return master, slave
}

// TestMasterKeyFromTerminal types the master key at passwd --masterkey's
// prompt on a real pseudo-terminal, the two lines as init printed them,
// and checks that the key is not echoed and that the new passphrase works.
func TestMasterKeyFromTerminal(t *testing.T) {
	requireFUSE(t)
	pf := writePassfile(t, "old passphrase")
	lower := filepath.Join(tempDir(t), "lower")
	r := twincrypt(t, "", append(append([]string{"init", "--passfile", pf}, cheapKDF...), lower)...)
	r.expectExit(t, 0, "init")
	keyText := printedMasterKey(t, r.stdout)
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	if err := os.WriteFile(filepath.Join(mnt, "f"), []byte("some content\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)

	master, slave := openPTY(t)
	defer master.Close()
	newPF := writePassfile(t, "typed-key passphrase")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "passwd", "--masterkey", "--new-passfile", newPF, lower)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	// Type only once the prompt is there: echo is off from then on, as
	// for a person who waits for the prompt.
	var screen bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(screen.String(), "line breaks are ignored") {
		n, err := master.Read(buf)
		if err != nil {
			t.Fatalf("waiting for the prompt: %v; screen: %q", err, screen.String())
		}
		screen.Write(buf[:n])
	}
	// ReadPassword turns echo off right after the prompt; the master
	// side of a pty reads the terminal's settings.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("echo never went off after the master key prompt")
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(keyText), "\n") {
		if _, err := master.WriteString(strings.TrimSpace(line) + "\r"); err != nil {
			t.Fatal(err)
		}
	}
	for {
		n, err := master.Read(buf)
		screen.Write(buf[:n])
		if err != nil {
			break // EIO once the process is gone
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("passwd --masterkey on a terminal: %v; screen: %q", err, screen.String())
	}
	out := screen.String()
	for _, line := range strings.Split(strings.TrimSpace(keyText), "\n") {
		if g := strings.Split(strings.TrimSpace(line), "-")[1]; strings.Contains(out, g) {
			t.Errorf("the typed key was echoed: %q", out)
		}
	}
	if !strings.Contains(out, "Changed the passphrase") {
		t.Errorf("passwd on a terminal: %q", out)
	}
	if _, err := config.Load(lower); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", newPF, lower, mnt).expectExit(t, 0, "mount with the new passphrase")
	if got, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || string(got) != "some content\n" {
		t.Errorf("after passwd from a terminal: %q, %v", got, err)
	}
}
