package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/config"
)

func TestResolveKeyBytes(t *testing.T) {
	tests := []struct {
		cipher string
		in     int
		want   int
		ok     bool
	}{
		{"aes-xts", 0, 64, true},
		{"aes-xts", 64, 64, true},
		{"aes-xts", 32, 32, true},
		{"aes-xts", 16, 0, false},
		{"aes-cbc", 0, 32, true},
		{"aes-cbc", 16, 16, true},
		{"aes-cbc", 32, 32, true},
		{"aes-cbc", 64, 0, false},
		{"aes-cbc", -1, 0, false},
		{"aes-gcm", 0, 0, false},
	}
	for _, tt := range tests {
		got, err := resolveKeyBytes(tt.cipher, tt.in)
		if tt.ok != (err == nil) || got != tt.want {
			t.Errorf("resolveKeyBytes(%q, %d) = %d, %v", tt.cipher, tt.in, got, err)
		}
		if err != nil && exitCode(err) != exitUsage {
			t.Errorf("resolveKeyBytes(%q, %d): exit code %d, want usage", tt.cipher, tt.in, exitCode(err))
		}
	}
}

func TestCheckKDFFlags(t *testing.T) {
	tests := []struct {
		alg     string
		changed []string
		ok      bool
	}{
		{"argon2id", nil, true},
		{"argon2id", []string{"kdf-time", "kdf-memory", "kdf-threads"}, true},
		{"argon2id", []string{"kdf-time", "scrypt-logn"}, false},
		{"scrypt", []string{"scrypt-logn"}, true},
		{"scrypt", []string{"pbkdf2-iter"}, false},
		{"pbkdf2", []string{"pbkdf2-iter"}, true},
		{"pbkdf2", []string{"kdf-threads"}, false},
		{"bcrypt", nil, false},
		{"", nil, false},
	}
	for _, tt := range tests {
		changed := func(name string) bool {
			for _, c := range tt.changed {
				if c == name {
					return true
				}
			}
			return false
		}
		err := checkKDFFlags(tt.alg, changed)
		if tt.ok != (err == nil) || (err != nil && exitCode(err) != exitUsage) {
			t.Errorf("checkKDFFlags(%q, %v) = %v", tt.alg, tt.changed, err)
		}
	}
}

func TestFormatMasterKey(t *testing.T) {
	key := make([]byte, 64)
	for i := range key {
		key[i] = byte(i)
	}
	lines := formatMasterKey(key)
	if len(lines) != 2 {
		t.Fatalf("64-byte key in %d lines: %q", len(lines), lines)
	}
	group := regexp.MustCompile(`^[0-9a-f]{8}(-[0-9a-f]{8}){7}-?$`)
	for _, l := range lines {
		if !group.MatchString(l) {
			t.Errorf("line %q is not 8 dash-separated groups of 8 hex digits", l)
		}
	}
	joined := strings.ReplaceAll(strings.Join(lines, ""), "-", "")
	if joined != "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"+
		"202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f" {
		t.Errorf("key does not round-trip: %s", joined)
	}
	if got := formatMasterKey(key[:16]); len(got) != 1 || got[0] != "00010203-04050607-08090a0b-0c0d0e0f" {
		t.Errorf("16-byte key: %q", got)
	}

	var out bytes.Buffer
	printMasterKey(&out, key[:32])
	if !strings.Contains(out.String(), "    00010203-04050607-08090a0b-0c0d0e0f-10111213-14151617-18191a1b-1c1d1e1f\n") ||
		!strings.Contains(out.String(), "only way") {
		t.Errorf("printMasterKey:\n%s", out.String())
	}
}

func TestCheckInitTarget(t *testing.T) {
	empty := t.TempDir()
	if err := checkInitTarget(empty); err != nil {
		t.Errorf("empty dir: %v", err)
	}
	withConf := t.TempDir()
	if err := os.WriteFile(filepath.Join(withConf, config.FileName), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := checkInitTarget(withConf); !errors.Is(err, config.ErrExists) || exitCode(err) != exitInitRefused {
		t.Errorf("dir with config: %v", err)
	}
	full := t.TempDir()
	if err := os.Mkdir(filepath.Join(full, "x"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := checkInitTarget(full); !errors.Is(err, config.ErrNotEmpty) || exitCode(err) != exitInitRefused {
		t.Errorf("non-empty dir: %v", err)
	}
}

func TestChildArgsNeverCarryThePassphrase(t *testing.T) {
	f := mountFlags{passFlags: passFlags{passfile: "/secret/pass"}, passthrough: false, quiet: true, logFile: "/var/log/x", background: true}
	plan := &mountPlan{lower: "/l", mnt: "/m", opts: mountOpts{ro: true, debug: true}}
	args := childArgs(f, plan)
	got := strings.Join(args, " ")
	want := "mount --" + childFlag + " -o ro,debug --quiet -- /l /m"
	if got != want {
		t.Errorf("childArgs = %q, want %q", got, want)
	}
}

// The background process mounts with --shared-storage when asked to.
func TestChildArgsCarrySharedStorage(t *testing.T) {
	plan := &mountPlan{lower: "/l", mnt: "/m"}
	for _, shared := range []bool{false, true} {
		got := strings.Join(childArgs(mountFlags{sharedStorage: shared}, plan), " ")
		if has := strings.Contains(got, " --shared-storage "); has != shared {
			t.Errorf("sharedStorage %v: childArgs = %q", shared, got)
		}
	}
}

// The background process mounts with --noxattr when asked to.
func TestChildArgsCarryNoXattr(t *testing.T) {
	plan := &mountPlan{lower: "/l", mnt: "/m"}
	for _, off := range []bool{false, true} {
		got := strings.Join(childArgs(mountFlags{noXattr: off}, plan), " ")
		if has := strings.Contains(got, " --noxattr "); has != off {
			t.Errorf("noXattr %v: childArgs = %q", off, got)
		}
	}
}

// The background process mounts with the --readdir mode asked for.
func TestChildArgsCarryReaddir(t *testing.T) {
	plan := &mountPlan{lower: "/l", mnt: "/m"}
	for mode, want := range map[string]string{"": "", "plus": "", "auto": " --readdir auto ", "plain": " --readdir plain "} {
		got := strings.Join(childArgs(mountFlags{readdir: mode}, plan), " ")
		if has := strings.Contains(got, " --readdir "); has != (want != "") || (want != "" && !strings.Contains(got, want)) {
			t.Errorf("readdir %q: childArgs = %q", mode, got)
		}
	}
}

// TestInitFormatVersion: init writes format version 3 (sealed settings)
// for both ciphers, 1 or 2 when asked; --format-version 1 makes an aes-cbc volume of the first
// format (one CBC chain per extent), whose files carry header cipher id 2
// and read back; a version this binary does not write is a usage error
// and writes nothing.
func TestInitFormatVersion(t *testing.T) {
	pf := writePassfile(t, "pw")
	for _, c := range []struct {
		flags   []string
		version int
	}{
		{[]string{"--cipher", "aes-cbc"}, 3},
		{nil, 3},
		{[]string{"--format-version", "3"}, 3},
		{[]string{"--cipher", "aes-cbc", "--format-version", "1"}, 1},
		{[]string{"--format-version", "2"}, 2},
	} {
		lower := initVolume(t, pf, c.flags...)
		cfg, err := config.Load(lower)
		if err != nil || cfg.Version != c.version {
			t.Errorf("init %v: %v, version %d, want %d", c.flags, err, cfg.Version, c.version)
		}
	}
	for _, v := range []string{"0x", "4", "-1"} {
		dir := tempDir(t)
		r := twincrypt(t, "", append([]string{"init", "--quiet", "--passfile", pf, "--format-version", v}, append(cheapKDF, dir)...)...)
		r.expectExit(t, exitUsage, "init --format-version "+v)
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Errorf("init --format-version %s left %d entries", v, len(entries))
		}
	}

	requireFUSE(t)
	lower := initVolume(t, pf, "--cipher", "aes-cbc", "--format-version", "1")
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	data := bytes.Repeat([]byte("format one "), 1000)
	if err := os.WriteFile(filepath.Join(mnt, "f"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)
	twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount again")
	if got, err := os.ReadFile(filepath.Join(mnt, "f")); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	entries, err := os.ReadDir(lower)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, e := range entries {
		if h, err := os.ReadFile(filepath.Join(lower, e.Name())); err == nil && len(h) > 8 && string(h[:4]) == "TwCr" {
			found++
			if h[6] != 2 {
				t.Errorf("a file of a format version 1 aes-cbc volume has cipher id %d, want 2", h[6])
			}
		}
	}
	if found != 1 {
		t.Errorf("%d encrypted files in LOWER, want 1", found)
	}
}

// The log's first line names the settings that change what a mount does.
func TestMountNotes(t *testing.T) {
	for _, c := range []struct {
		f    mountFlags
		want string
	}{
		{mountFlags{}, ""},
		{mountFlags{readdir: "plus"}, ""},
		{mountFlags{noXattr: true}, "; no xattrs (--noxattr)"},
		{mountFlags{noXattr: true, sharedStorage: true, readdir: "auto"}, "; no xattrs (--noxattr); short kernel cache lifetimes (--shared-storage); listings --readdir auto"},
	} {
		if got := mountNotes(c.f); got != c.want {
			t.Errorf("mountNotes(%+v) = %q, want %q", c.f, got, c.want)
		}
	}
}
