package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
)

func TestExitCode(t *testing.T) {
	wrap := func(err error) error {
		return fmt.Errorf("mount /mnt: %w", fmt.Errorf("load config of /lower: %w", err))
	}
	tests := []struct {
		name string
		err  error
		want int
	}{
		{"nil", nil, 0},
		{"plain error", errors.New("boom"), 1},
		{"not exist", fmt.Errorf("lower: %w", fs.ErrNotExist), 1},
		{"usage", usageErrorf("unknown --cipher %q", "x"), 2},
		{"missing", wrap(config.ErrMissing), 10},
		{"corrupt", wrap(config.ErrCorrupt), 11},
		{"version", wrap(config.ErrUnsupportedVersion), 11},
		{"cipher", wrap(config.ErrUnknownCipher), 11},
		{"kdf params in a config", wrap(kdf.ErrParams), 11},
		{"kdf params from flags", &classifiedError{class: errUsage, err: wrap(kdf.ErrParams)}, 2},
		{"wrong passphrase", wrap(config.ErrWrongPassphrase), 12},
		{"joined", errors.Join(errors.New("x"), config.ErrWrongPassphrase), 12},
		{"mountpoint", mountpointErrorf("mountpoint %s is not empty", "/m"), 13},
		{"mount failed", mountFailedErrorf("mount: %w", errors.New("no /dev/fuse")), 14},
		{"exists", wrap(config.ErrExists), 15},
		{"not empty", wrap(config.ErrNotEmpty), 15},
		{"child code", fmt.Errorf("x: %w", &codedError{code: 12, msg: "wrong"}), 12},
	}
	for _, tt := range tests {
		if got := exitCode(tt.err); got != tt.want {
			t.Errorf("%s: exitCode(%v) = %d, want %d", tt.name, tt.err, got, tt.want)
		}
	}
}

func TestClassifiedErrorKeepsMessageAndChain(t *testing.T) {
	cause := fmt.Errorf("unlock /l: %w", config.ErrWrongPassphrase)
	err := &classifiedError{class: errMountpoint, err: cause}
	if err.Error() != cause.Error() {
		t.Errorf("message %q, want %q", err.Error(), cause.Error())
	}
	if !errors.Is(err, config.ErrWrongPassphrase) || !errors.Is(err, errMountpoint) {
		t.Errorf("chain lost: %v", err)
	}
}

// Every code in the table is documented in the help, and every documented
// code is reachable.
func TestExitCodesDocumented(t *testing.T) {
	help := exitCodeHelp()
	documented := map[int]bool{}
	for _, d := range exitCodeDoc {
		documented[d.code] = true
		if !strings.Contains(help, fmt.Sprintf("%3d  %s", d.code, strings.SplitN(d.meaning, "\n", 2)[0])) {
			t.Errorf("code %d missing from help:\n%s", d.code, help)
		}
	}
	reachable := map[int]bool{exitOK: true, exitError: true}
	for _, e := range exitTable {
		if !documented[e.code] {
			t.Errorf("exit code %d for %v is not documented", e.code, e.err)
		}
		reachable[e.code] = true
	}
	for code := range documented {
		if !reachable[code] {
			t.Errorf("documented exit code %d is never returned", code)
		}
	}
}

func TestParseChildError(t *testing.T) {
	tests := []struct {
		line string
		code int
		msg  string
		ok   bool
	}{
		{"err 12 unlock /l: config: wrong passphrase", 12, "unlock /l: config: wrong passphrase", true},
		{"err 14 mount failed", 14, "mount failed", true},
		{"err 1", 1, "", true},
		{"ok", 0, "", false},
		{"", 0, "", false},
		{"err x msg", 0, "", false},
		{"err 0 success?", 0, "", false},
		{"err 300 too big", 0, "", false},
	}
	for _, tt := range tests {
		code, msg, ok := parseChildError(tt.line)
		if code != tt.code || msg != tt.msg || ok != tt.ok {
			t.Errorf("parseChildError(%q) = %d, %q, %v", tt.line, code, msg, ok)
		}
	}
}

// The command tree is exercised in-process for everything that fails before
// a lower package is called.
func TestRunUsageErrors(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{[]string{"init"}, 2, "needs LOWER"},
		{[]string{"init", dir, dir}, 2, "needs LOWER"},
		{[]string{"init", "--nope", dir}, 2, "unknown flag: --nope"},
		{[]string{"init", "--cipher", "serpent", dir}, 2, `unknown --cipher "serpent"`},
		{[]string{"init", "--cipher", "aes-cbc", "--key-bytes", "64", dir}, 2, "--key-bytes 64 is not valid for aes-cbc"},
		{[]string{"init", "--key-bytes", "16", dir}, 2, "--key-bytes 16 is not valid for aes-xts"},
		{[]string{"init", "--kdf", "bcrypt", dir}, 2, `unknown --kdf "bcrypt"`},
		{[]string{"init", "--kdf", "scrypt", "--kdf-memory", "1024", dir}, 2, "--kdf-memory applies to --kdf argon2id"},
		{[]string{"init", "--pbkdf2-iter", "1000", dir}, 2, "--pbkdf2-iter applies to --kdf pbkdf2"},
		{[]string{"mount", dir}, 2, "needs LOWER and MNT"},
		{[]string{"mount", "-o", "rw", dir, dir}, 2, `unknown mount option -o "rw"`},
		{[]string{"mount", "--kernel-passthrough", dir, dir}, 2, "--kernel-passthrough needs --passthrough"},
		{[]string{"mount", "--passthrough", dir, dir + "/missing"}, 13, "does not exist"},
		{[]string{"mount", "--passthrough", dir, dir}, 13, "LOWER itself"},
		{[]string{"mount", dir + "/missing", dir}, 10, "LOWER " + dir + "/missing does not exist"},
		{[]string{"info", dir + "/missing"}, 10, "does not exist"},
		{[]string{"fsck", dir + "/missing"}, 10, "does not exist"},
		{[]string{"path", dir + "/missing", "x"}, 10, "does not exist"},
		// gocryptfs's single-dash spellings: taken for our flags, and a
		// hint for the rest.
		{[]string{"mount", "-passthrough", dir, dir}, 13, "LOWER itself"},
		{[]string{"mount", "-fg", dir, dir}, 2, "unknown flag -fg (long flags take two dashes"},
		{[]string{"umount", dir}, 13, "not a mount point"},
		{[]string{"umount"}, 2, "needs MNT"},
		{[]string{"bench", "extra"}, 2, "bench takes no arguments"},
		{[]string{"bench", "--size", "0"}, 2, "--size"},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		code := run(tt.args, &stdout, &stderr)
		line := stderr.String()
		if code != tt.code || !strings.HasPrefix(line, "twincrypt: ") || !strings.Contains(line, tt.msg) ||
			strings.Count(line, "\n") != 1 {
			t.Errorf("twincrypt %s: exit %d, stderr %q; want exit %d and one line with %q",
				strings.Join(tt.args, " "), code, line, tt.code, tt.msg)
		}
		if code == exitUsage && !strings.Contains(line, "--help') ") && !strings.HasSuffix(line, "--help')\n") {
			t.Errorf("usage error without help pointer: %q", line)
		}
	}
}

func TestRunHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--help exit %d: %s", code, stderr.String())
	}
	for _, want := range []string{"Exit codes:", " 12  wrong passphrase", "init", "mount", "umount", "bench"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("root help lacks %q", want)
		}
	}
	for _, sub := range []string{"init", "mount", "umount", "bench"} {
		stdout.Reset()
		if code := run([]string{sub, "--help"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s --help exit %d", sub, code)
		}
		if !strings.Contains(stdout.String(), "Examples:") {
			t.Errorf("%s --help has no examples", sub)
		}
		if strings.Contains(stdout.String(), "Exit codes:") {
			t.Errorf("%s --help repeats the exit code table", sub)
		}
		if strings.Contains(stdout.String(), childFlag) {
			t.Errorf("%s --help shows the internal flag", sub)
		}
	}
}
