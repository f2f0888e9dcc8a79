package main

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/integration"
)

func TestParseMasterKey(t *testing.T) {
	key := make([]byte, 64)
	for i := range key {
		key[i] = byte(i * 7)
	}
	printed := strings.Join(formatMasterKey(key), "\n")
	h := hex.EncodeToString(key)
	good := map[string]string{
		"as printed":      printed,
		"indented":        "    " + strings.ReplaceAll(printed, "\n", "\n    ") + "\n",
		"plain hex":       h,
		"upper case":      strings.ToUpper(h),
		"comment and CRs": "# vault master key\r\n" + strings.ReplaceAll(printed, "\n", "\r\n") + " # kept in a safe\n",
	}
	for name, text := range good {
		path := filepath.Join(t.TempDir(), "mk")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := readMasterKeyFile(path)
		if err != nil || !bytes.Equal(got.Bytes(), key) || (os.Geteuid() == 0 && !got.IsLocked()) {
			t.Errorf("%s: %v (locked: %v)", name, err, err == nil && got.IsLocked())
		}
		if err == nil {
			got.Destroy()
		}
	}
	bad := map[string]string{
		"short":       h[:126],
		"long":        h + "00",
		"not hex":     h[:127] + "g",
		"empty":       "",
		"first line":  strings.Split(printed, "\n")[0],
		"odd and sep": h[:63] + "-" + h[63:127],
	}
	for name, text := range bad {
		path := filepath.Join(t.TempDir(), "mk")
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := readMasterKeyFile(path); err == nil || exitCode(err) != exitUsage {
			t.Errorf("%s: %v, %v; want a usage error", name, got, err)
		}
	}
	// From a pipe, line by line: the key as printed spans two lines, and
	// nothing after it is consumed (passwd reads the new passphrase next).
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	go func() { w.WriteString(printed + "\nnew passphrase\n"); w.Close() }()
	got, err := masterKeyFlags{prompt: true}.read(r, nil)
	if err != nil || !bytes.Equal(got.Bytes(), key) {
		t.Fatalf("from a pipe: %v", err)
	}
	got.Destroy()
	rest, err := readPassLine(r)
	if err != nil || string(rest) != "new passphrase" {
		t.Errorf("after the key, the pipe holds %q, %v", rest, err)
	}
}

// printedMasterKey parses the master key out of init's output, as a user
// would copy it.
func printedMasterKey(t *testing.T, stdout string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)Your master key is:\n\n(.*?)\n\n`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no master key in init's output:\n%s", stdout)
	}
	return m[1] + "\n"
}

// plainTree reads everything under root: regular files' content, symlink
// targets, directories, and user.* xattrs, keyed by relative path.
func plainTree(t *testing.T, root string) map[string]string {
	t.Helper()
	tree := map[string]string{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if rel == "." {
			return nil
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(path)
			if err != nil {
				return err
			}
			tree[rel] = "link:" + target
		case d.IsDir():
			tree[rel] = "dir"
		default:
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			tree[rel] = "file:" + string(data)
			buf := make([]byte, 256)
			if n, err := unix.Getxattr(path, "user.note", buf); err == nil {
				tree[rel+"@user.note"] = string(buf[:n])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func sameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if g, ok := got[k]; !ok {
			t.Errorf("%s: %q missing", what, k)
		} else if g != v {
			t.Errorf("%s: %q differs (%d bytes, want %d)", what, k, len(g), len(v))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected %q", what, k)
		}
	}
}

// lowerListing is every path in LOWER with its size, to show that a
// refused recovery wrote nothing.
func lowerListing(t *testing.T, lower string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(lower, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		b.WriteString(path + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			data, _ := os.ReadFile(path)
			b.WriteString(" " + hex.EncodeToString(data))
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestMasterKeyRecovery deletes the config of a populated volume and gets
// every file back with the master key init printed: a wrong key is refused
// with exit 12 and writes nothing, init --masterkey-file writes a new
// config, mount --masterkey mounts with the key alone, passwd --masterkey
// sets a new passphrase. The oracle is the tree as read through the mount
// before the config was lost. (The twin has no key: nothing to recover.)
func TestMasterKeyRecovery(t *testing.T) {
	requireFUSE(t)
	variants := []struct {
		name  string
		flags []string
	}{
		{"aes-xts", nil},
		{"aes-cbc", []string{"--cipher", "aes-cbc", "--key-bytes", "16"}},
		{"plaintext-names", []string{"--plaintext-names"}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			pf := writePassfile(t, "original passphrase")
			lower := filepath.Join(tempDir(t), "lower")
			if err := os.Mkdir(lower, 0o700); err != nil {
				t.Fatal(err)
			}
			args := append(append([]string{"init", "--passfile", pf}, cheapKDF...), v.flags...)
			r := twincrypt(t, "", append(args, lower)...)
			r.expectExit(t, 0, "init")
			keyText := printedMasterKey(t, r.stdout)
			dir := tempDir(t)
			keyFile := filepath.Join(dir, "masterkey")
			if err := os.WriteFile(keyFile, []byte(keyText), 0o600); err != nil {
				t.Fatal(err)
			}
			// The same key with its last digit changed.
			last := keyText[len(keyText)-2]
			wrong := keyText[:len(keyText)-2] + map[bool]string{true: "1", false: "0"}[last == '0'] + "\n"
			wrongFile := filepath.Join(dir, "wrongkey")
			if err := os.WriteFile(wrongFile, []byte(wrong), 0o600); err != nil {
				t.Fatal(err)
			}

			mnt := newMountpoint(t)
			unmountOnCleanup(t, mnt)
			twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
			populate(t, mnt)
			want := plainTree(t, mnt)
			if len(want) != 11 {
				t.Fatalf("the populated tree has %d entries, want 11", len(want))
			}
			twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
			waitDaemonGone(t, mnt)

			if err := os.Remove(filepath.Join(lower, config.FileName)); err != nil {
				t.Fatal(err)
			}
			before := lowerListing(t, lower)

			// A wrong key: exit 12, nothing written, nothing mounted.
			pf2 := writePassfile(t, "recovered passphrase")
			r = twincrypt(t, "", append(append([]string{"init", "--masterkey-file", wrongFile, "--passfile", pf2}, v.flags...), lower)...)
			r.expectExit(t, exitWrongPassphrase, "init with a wrong master key")
			if !strings.Contains(r.stderr, "does not decrypt this volume") {
				t.Errorf("init with a wrong key: %q", r.stderr)
			}
			r = twincrypt(t, wrong, "mount", "-b", "--masterkey", lower, mnt)
			r.expectExit(t, exitConfigMissing, "mount --masterkey without a config")
			if !strings.Contains(r.stderr, "init --masterkey-file") {
				t.Errorf("mount without a config does not say how to recover: %q", r.stderr)
			}
			if got := lowerListing(t, lower); got != before {
				t.Fatalf("a refused recovery changed LOWER:\nbefore:\n%s\nafter:\n%s", before, got)
			}

			// The right key: a new config, the tree as it was.
			args = append(append([]string{"init", "--masterkey-file", keyFile, "--passfile", pf2}, cheapKDF...), v.flags...)
			r = twincrypt(t, "", append(args, lower)...)
			r.expectExit(t, 0, "init --masterkey-file")
			if !strings.Contains(r.stdout, "master key confirmed by") || strings.Contains(r.stdout, "Your master key") {
				t.Errorf("init --masterkey-file said:\n%s", r.stdout)
			}
			twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf2, lower, mnt).expectExit(t, 0, "mount with the new passphrase")
			sameTree(t, "after init --masterkey-file", plainTree(t, mnt), want)
			twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
			waitDaemonGone(t, mnt)

			// mount --masterkey: the key on stdin, no passphrase; a
			// wrong one is refused before anything is mounted.
			r = twincrypt(t, wrong, "mount", "-b", "--masterkey", lower, mnt)
			r.expectExit(t, exitWrongPassphrase, "mount with a wrong master key")
			if isMounted(t, mnt) {
				t.Fatal("mounted with a wrong master key")
			}
			twincrypt(t, keyText, "mount", "-b", "--quiet", "--masterkey", lower, mnt).expectExit(t, 0, "mount --masterkey")
			// The key went to the background process over a pipe: not
			// in its command line or environment, for ps to show.
			hexKey := string(keyDigits(keyText))
			for _, pid := range daemonPIDs(t, mnt) {
				for _, f := range []string{"cmdline", "environ"} {
					data, err := os.ReadFile(filepath.Join("/proc", fmt.Sprint(pid), f))
					if err != nil {
						t.Fatal(err)
					}
					if bytes.Contains(data, []byte(hexKey[:16])) {
						t.Errorf("the master key is in /proc/%d/%s", pid, f)
					}
				}
			}
			sameTree(t, "mount --masterkey", plainTree(t, mnt), want)
			twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
			waitDaemonGone(t, mnt)

			// passwd --masterkey: the passphrase is forgotten. A wrong
			// key changes nothing; the right one sets a new passphrase
			// and the old one stops working.
			conf := filepath.Join(lower, config.FileName)
			confBefore, err := os.ReadFile(conf)
			if err != nil {
				t.Fatal(err)
			}
			pf3 := writePassfile(t, "third passphrase")
			twincrypt(t, "", "passwd", "--masterkey-file", wrongFile, "--new-passfile", pf3, lower).
				expectExit(t, exitWrongPassphrase, "passwd with a wrong master key")
			if confAfter, _ := os.ReadFile(conf); !bytes.Equal(confAfter, confBefore) {
				t.Fatal("passwd with a wrong master key changed the config")
			}
			twincrypt(t, keyText+"third passphrase\n", "passwd", "--quiet", "--masterkey", lower).expectExit(t, 0, "passwd --masterkey")
			twincrypt(t, "", "mount", "-b", "--passfile", pf2, lower, mnt).expectExit(t, exitWrongPassphrase, "mount with the replaced passphrase")
			twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf3, lower, mnt).expectExit(t, 0, "mount after passwd --masterkey")
			sameTree(t, "after passwd --masterkey", plainTree(t, mnt), want)
		})
	}
}

// populate writes a tree with every kind of thing the key protects: files
// whose sizes end inside an extent and on its boundary, an empty file, a
// long name, a nested directory, a symlink and an xattr.
func populate(t *testing.T, mnt string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(mnt, "docs", "deep"), 0o755))
	for i, size := range []int{0, 1, 4096, 5000, 70000} {
		data := bytes.Repeat([]byte{byte('a' + i)}, size)
		must(os.WriteFile(filepath.Join(mnt, "docs", strings.Repeat("f", i+1)+".bin"), data, 0o644))
	}
	must(os.WriteFile(filepath.Join(mnt, "docs", "deep", strings.Repeat("long name ", 20)), []byte("deep\n"), 0o600))
	must(os.WriteFile(filepath.Join(mnt, "top.txt"), []byte("top secret\n"), 0o600))
	must(os.Symlink("docs/deep", filepath.Join(mnt, "shortcut")))
	must(unix.Setxattr(filepath.Join(mnt, "top.txt"), "user.note", []byte("xattr value"), 0))
}

// TestMasterKeyUnverifiable: an empty volume offers nothing to check a key
// against; init --masterkey says so and writes nothing unless --force.
func TestMasterKeyUnverifiable(t *testing.T) {
	pf := writePassfile(t, "pw")
	lower := initVolume(t, pf)
	if err := os.Remove(filepath.Join(lower, config.FileName)); err != nil {
		t.Fatal(err)
	}
	key := strings.Repeat("ab", 64) + "\n"
	r := twincrypt(t, key, append(append([]string{"init", "--masterkey", "--passfile", pf}, cheapKDF...), lower)...)
	r.expectExit(t, exitError, "init --masterkey on an empty volume")
	if !strings.Contains(r.stderr, "nothing in LOWER can confirm") || !strings.Contains(r.stderr, "--force") {
		t.Errorf("init --masterkey on an empty volume: %q", r.stderr)
	}
	if _, err := os.Lstat(filepath.Join(lower, config.FileName)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a config was written: %v", err)
	}
	r = twincrypt(t, key, append(append([]string{"init", "--masterkey", "--force", "--passfile", pf}, cheapKDF...), lower)...)
	r.expectExit(t, 0, "init --masterkey --force")
	if !strings.Contains(r.stdout, "NOT confirmed") {
		t.Errorf("init --force does not say the key is unconfirmed: %q", r.stdout)
	}
	// The key is never read from the command line.
	r = twincrypt(t, "", "mount", "--masterkey", strings.TrimSpace(key), lower, "/nonexistent")
	r.expectExit(t, exitUsage, "a key in argv")
	if !strings.Contains(r.stderr, "visible to every user") {
		t.Errorf("a key in argv: %q", r.stderr)
	}
}

// TestInitCreatesLower: init makes a missing LOWER with mode 0700 and
// says so; a missing parent is an error.
func TestInitCreatesLower(t *testing.T) {
	pf := writePassfile(t, "pw")
	lower := filepath.Join(tempDir(t), "new-vault")
	old := unix.Umask(0)
	defer unix.Umask(old)
	r := twincrypt(t, "", append(append([]string{"init", "--passfile", pf}, cheapKDF...), lower)...)
	r.expectExit(t, 0, "init on a missing LOWER")
	if !strings.Contains(r.stdout, "Created directory "+lower+" (mode 0700)") {
		t.Errorf("init does not say it created LOWER:\n%s", r.stdout)
	}
	fi, err := os.Stat(lower)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 || !fi.IsDir() {
		t.Errorf("LOWER mode %v, want drwx------", fi.Mode())
	}
	if _, err := config.Load(lower); err != nil {
		t.Errorf("config of the new LOWER: %v", err)
	}
	r = twincrypt(t, "", append(append([]string{"init", "--passfile", pf}, cheapKDF...), filepath.Join(lower+"-missing", "x"))...)
	if r.code == 0 {
		t.Errorf("init under a missing parent succeeded")
	}
}

// TestMasterKeyRecoveryVersion1: init --masterkey on an aes-cbc volume
// that an earlier twincrypt made (config version 1: CBC over whole
// extents, testdata/example-cbc) finds the version from the file headers
// and writes a version 1 config, under which every file reads back as the
// manifest says; a version 2 config would refuse the headers. New files
// written afterwards keep the volume's layout.
func TestMasterKeyRecoveryVersion1(t *testing.T) {
	requireFUSE(t)
	lower := filepath.Join(tempDir(t), "lower")
	if out, err := exec.Command("cp", "-r", "../../testdata/example-cbc", lower).CombinedOutput(); err != nil {
		t.Fatalf("copying the example volume: %v: %s", err, out)
	}
	cfg, err := config.Load(lower)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Version != 1 {
		t.Fatalf("example-cbc has config version %d, want 1", cfg.Version)
	}
	key, err := cfg.Unlock([]byte(integration.ExamplePassphrase))
	if err != nil {
		t.Fatal(err)
	}
	keyFile := filepath.Join(tempDir(t), "masterkey")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(lower, config.FileName)); err != nil {
		t.Fatal(err)
	}
	pf := writePassfile(t, "recovered passphrase")
	args := append(append([]string{"init", "--masterkey-file", keyFile, "--passfile", pf}, cheapKDF...), "--cipher", "aes-cbc", "--key-bytes", "32", lower)
	r := twincrypt(t, "", args...)
	r.expectExit(t, 0, "init --masterkey-file on a version 1 aes-cbc volume")
	if !strings.Contains(r.stdout, "version 1 volume") {
		t.Errorf("init --masterkey-file does not say it found a version 1 volume:\n%s", r.stdout)
	}
	if cfg, err = config.Load(lower); err != nil || cfg.Version != 1 || cfg.Cipher != "aes-cbc" {
		t.Fatalf("recovered config: %v, %+v", err, cfg)
	}

	m, err := integration.ReadManifest("../../testdata/" + integration.ManifestFile)
	if err != nil {
		t.Fatal(err)
	}
	var want map[string]string
	for _, v := range m.Volumes {
		if v.Name == "example-cbc" {
			want = map[string]string{}
			for _, e := range v.Entries {
				if e.Type == "file" {
					want[e.Path] = e.SHA256
				}
			}
		}
	}
	if len(want) < 10 {
		t.Fatalf("the manifest lists %d files of example-cbc", len(want))
	}
	mnt := newMountpoint(t)
	unmountOnCleanup(t, mnt)
	twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", pf, lower, mnt).expectExit(t, 0, "mount")
	for p, sum := range want {
		data, err := os.ReadFile(filepath.Join(mnt, p))
		if err != nil {
			t.Errorf("%s: %v", p, err)
		} else if got := integration.Hex(data); got != sum {
			t.Errorf("%s: content differs from the manifest", p)
		}
	}
	// A new file in a version 1 volume gets the version 1 header.
	if err := os.WriteFile(filepath.Join(mnt, "new"), bytes.Repeat([]byte("v1"), 3000), 0o644); err != nil {
		t.Fatal(err)
	}
	twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
	waitDaemonGone(t, mnt)
	ids := map[byte]int{}
	err = filepath.WalkDir(lower, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.HasPrefix(d.Name(), ".") || strings.HasSuffix(d.Name(), ".name") || strings.HasPrefix(d.Name(), "twincrypt.conf") {
			return err
		}
		h := make([]byte, 8)
		if f, err := os.Open(p); err == nil {
			if n, _ := f.Read(h); n == 8 && string(h[:4]) == "TwCr" {
				ids[h[6]]++
			}
			f.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ids[2] < len(want)-1 || len(ids) != 1 {
		t.Errorf("header cipher ids in the volume: %v, want only 2 (aes-cbc over extents)", ids)
	}
}

// TestKeyParserWipes: the parser wipes what it is fed as it goes, puts
// the key in locked memory, and destroys it when the input is not a key;
// its error messages hold no digit of the input.
func TestKeyParserWipes(t *testing.T) {
	key := make([]byte, 64)
	for i := range key {
		key[i] = byte(0xa5 ^ i*13)
	}
	text := []byte("# my vault\n" + strings.Join(formatMasterKey(key), "\n") + "\n")
	p := newKeyParser(true)
	p.feed(text)
	if !bytes.Equal(text, make([]byte, len(text))) {
		t.Errorf("the input is not wiped after parsing: %q", text)
	}
	lk, err := p.finish()
	if err != nil || !bytes.Equal(lk.Bytes(), key) {
		t.Fatalf("parsed %v", err)
	}
	lk.Destroy()

	h := hex.EncodeToString(key)
	for _, bad := range []string{h[:127] + "z", h[:100], h + "ab"} {
		p := newKeyParser(false)
		p.feed([]byte(bad))
		kept := p.key
		if lk, err := p.finish(); err == nil || lk != nil || len(kept.Bytes()) != 0 {
			t.Errorf("%d characters: %v, the key memory not destroyed", len(bad), err)
		} else if strings.Contains(err.Error(), h[:8]) {
			t.Errorf("the error shows the key: %v", err)
		}
	}
	// masterKeyText, the key the background child gets over the pipe,
	// is locked memory as well and parses back.
	text2 := masterKeyText(key)
	if os.Geteuid() == 0 && !text2.IsLocked() {
		t.Error("masterKeyText is not in locked memory")
	}
	lk, err = readMasterKeyLines(bytes.NewReader(text2.Bytes()))
	if err != nil || !bytes.Equal(lk.Bytes(), key) {
		t.Errorf("masterKeyText does not parse back: %v", err)
	}
	text2.Destroy()
	lk.Destroy()
}
