package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestGocryptfsArgs(t *testing.T) {
	tests := []struct {
		in, want string
	}{
		// gocryptfs's spellings of the flags we share.
		{"mount -passfile pf LOWER MNT", "mount --passfile pf LOWER MNT"},
		{"mount -passfile=pf -ro -idle 5m LOWER MNT", "mount --passfile=pf --ro --idle 5m LOWER MNT"},
		{"mount -sharedstorage -extpass pass LOWER MNT", "mount --shared-storage --extpass pass LOWER MNT"},
		{"init -plaintextnames -scryptn 16 -kdf scrypt DIR", "init --plaintext-names --scrypt-logn 16 --kdf scrypt DIR"},
		// Action flags name the subcommand, wherever they stand.
		{"-init DIR", "init DIR"},
		{"-passfile pf -init -q DIR", "init --passfile pf -q DIR"},
		{"-passwd DIR", "passwd DIR"},
		{"-fsck -passfile pf DIR", "fsck --passfile pf DIR"},
		{"-info DIR", "info DIR"},
		{"-speed", "speed"},
		{"-version", "--version"},
		// Left alone: shorthand clusters, values, what follows "--",
		// names that are no flag of the command, a subcommand already
		// given.
		{"mount -bq LOWER MNT", "mount -bq LOWER MNT"},
		{"mount --passfile -ro LOWER MNT", "mount --passfile -ro LOWER MNT"},
		{"mount -o -ro LOWER MNT", "mount -o -ro LOWER MNT"},
		{"mount -- -ro MNT", "mount -- -ro MNT"},
		{"mount -fg LOWER MNT", "mount -fg LOWER MNT"},
		{"path -plaintextnames LOWER x", "path -plaintextnames LOWER x"},
		{"mount -init LOWER MNT", "mount -init LOWER MNT"},
	}
	for _, tt := range tests {
		root, _ := newRootCmd()
		got := strings.Join(gocryptfsArgs(root, strings.Fields(tt.in)), " ")
		if got != tt.want {
			t.Errorf("%q -> %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestGocryptfsHabits runs the binary the way a gocryptfs user types it:
// "-init" with single-dash options creates the volume, and "-info" reads it.
func TestGocryptfsHabits(t *testing.T) {
	pf := writePassfile(t, "habit pass")
	lower := filepath.Join(tempDir(t), "lower")
	args := []string{"-init", "-passfile", pf, "-q", "-kdf", "argon2id", "-kdf-time", "5", "-kdf-memory", "7168", "-kdf-threads", "1", lower}
	twincrypt(t, "", args...).expectExit(t, 0, "twincrypt "+strings.Join(args, " "))
	if _, err := os.Stat(filepath.Join(lower, "twincrypt.conf")); err != nil {
		t.Fatalf("no config after -init: %v", err)
	}
	r := twincrypt(t, "", "-info", lower)
	r.expectExit(t, 0, "-info")
	if !strings.Contains(r.stdout, "aes-xts") {
		t.Errorf("-info printed %q", r.stdout)
	}
	r = twincrypt(t, "", "path", "-passfile", pf, lower, "/")
	r.expectExit(t, 0, "path -passfile")
	if r.stdout != ".\n" {
		t.Errorf("path -passfile LOWER / printed %q, want the root, \".\"", r.stdout)
	}
}

// TestPathSaysWhyItAsks: path, which only prints paths, says on a terminal
// why it asks for the passphrase before it asks, then maps with it.
func TestPathSaysWhyItAsks(t *testing.T) {
	pf := writePassfile(t, "path pass")
	lower := initVolume(t, pf)
	master, slave := openPTY(t)
	defer master.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binPath, "path", lower, "/")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	slave.Close()
	var screen bytes.Buffer
	buf := make([]byte, 4096)
	for !strings.Contains(screen.String(), "Passphrase: ") {
		n, err := master.Read(buf)
		if err != nil {
			t.Fatalf("waiting for the prompt: %v; screen: %q", err, screen.String())
		}
		screen.Write(buf[:n])
	}
	note := strings.Index(screen.String(), "the passphrase unlocks the key that maps them")
	if note < 0 || note > strings.Index(screen.String(), "Passphrase: ") {
		t.Errorf("no word of why before the prompt: %q", screen.String())
	}
	waitEchoOff(t, master)
	if _, err := master.WriteString("path pass\r"); err != nil {
		t.Fatal(err)
	}
	for {
		n, err := master.Read(buf)
		screen.Write(buf[:n])
		if err != nil {
			break // EIO once the process is gone
		}
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("path on a terminal: %v; screen: %q", err, screen.String())
	}
	if !strings.HasSuffix(strings.TrimSpace(screen.String()), "\n.") {
		t.Errorf("path of the root on a terminal: %q", screen.String())
	}
}

// waitEchoOff waits until the program on the pty turned echo off, as
// term.ReadPassword does right after its prompt.
func waitEchoOff(t *testing.T, master *os.File) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		tio, err := unix.IoctlGetTermios(int(master.Fd()), unix.TCGETS)
		if err != nil {
			t.Fatal(err)
		}
		if tio.Lflag&unix.ECHO == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("echo never went off after the prompt")
		}
	}
}
