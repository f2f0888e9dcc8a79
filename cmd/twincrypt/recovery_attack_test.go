package main

// Issue 39, finding 2: recovery with the master key cannot open the
// wrapped key, so it must not take security parameters from the config,
// which anyone who can write LOWER can edit. Each test here edits the
// config on disk as such a writer would, then does what the user would do
// next, and checks that the edit is refused with a message that says what
// was changed, and that nothing was written.

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/config"
)

// recoveryVolume is a volume made by init, its master key saved to a file
// as the user would, and a file written through a mount when content is
// wanted (the data then confirms the key).
type recoveryVolume struct {
	lower, passfile, keyFile string
}

func newRecoveryVolume(t *testing.T, withContent bool, initFlags ...string) recoveryVolume {
	t.Helper()
	v := recoveryVolume{passfile: writePassfile(t, "the passphrase")}
	v.lower = filepath.Join(tempDir(t), "lower")
	if err := os.Mkdir(v.lower, 0o700); err != nil {
		t.Fatal(err)
	}
	args := append(append([]string{"init", "--passfile", v.passfile}, cheapKDF...), initFlags...)
	r := twincrypt(t, "", append(args, v.lower)...)
	r.expectExit(t, 0, "init")
	v.keyFile = filepath.Join(tempDir(t), "masterkey")
	if err := os.WriteFile(v.keyFile, []byte(printedMasterKey(t, r.stdout)), 0o600); err != nil {
		t.Fatal(err)
	}
	if withContent {
		mnt := newMountpoint(t)
		unmountOnCleanup(t, mnt)
		twincrypt(t, "", "mount", "-b", "--quiet", "--passfile", v.passfile, v.lower, mnt).expectExit(t, 0, "mount")
		for _, name := range []string{"secret plan.txt", "budget.ods"} {
			if err := os.WriteFile(filepath.Join(mnt, name), []byte("content that ends inside an extent\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		twincrypt(t, "", "umount", mnt).expectExit(t, 0, "umount")
		waitDaemonGone(t, mnt)
	}
	return v
}

// editConfig changes the config as a LOWER writer would: a text editor on
// the JSON, no key needed.
func editConfig(t *testing.T, lower string, edit func(m map[string]any)) []byte {
	t.Helper()
	path := filepath.Join(lower, config.FileName)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	edit(m)
	if data, err = json.MarshalIndent(m, "", "  "); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return data
}

// weakenKDF is the attack's edit: PBKDF2 with one iteration, the salt kept.
func weakenKDF(m map[string]any) {
	salt := m["kdf"].(map[string]any)["salt"]
	m["kdf"] = map[string]any{"algorithm": "pbkdf2", "salt": salt, "iterations": 1, "hash": "sha256"}
}

// plaintextNames is the other attack's edit; the root IV goes too.
func plaintextNames(lower string) func(m map[string]any) {
	return func(m map[string]any) {
		m["plaintext_names"] = true
		_ = os.Remove(filepath.Join(lower, ".twincrypt.diriv"))
	}
}

// dropSeal turns a sealed config back into an older version without it.
func dropSeal(m map[string]any) {
	m["version"] = 2
	delete(m, "sealed_settings")
}

func expectConfigUnchanged(t *testing.T, lower string, want []byte, what string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(lower, config.FileName))
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s changed the config (%v):\n%s", what, err, got)
	}
}

// TestRecoveryRefusesWeakenedKDF: a LOWER writer sets the KDF to PBKDF2 x 1.
// The normal mount says what is wrong (not just "wrong passphrase"), and
// passwd --masterkey-file, where the user turns next, neither wraps the key
// under that KDF nor goes ahead silently: on a sealed config it refuses and
// names the change; on an unsealed (version 1) config, whose KDF nothing
// authenticates, it wraps under the defaults.
func TestRecoveryRefusesWeakenedKDF(t *testing.T) {
	requireFUSE(t)
	t.Run("sealed", func(t *testing.T) {
		v := newRecoveryVolume(t, false)
		edited := editConfig(t, v.lower, weakenKDF)

		r := twincrypt(t, "", "mount", "-b", "--passfile", v.passfile, v.lower, newMountpoint(t))
		r.expectExit(t, exitConfigInvalid, "mount of a config with a weakened KDF")
		if !strings.Contains(r.stderr, "pbkdf2-sha256 with 1 iterations") || !strings.Contains(r.stderr, "the config was altered") {
			t.Errorf("mount of a weakened config: %q", r.stderr)
		}

		newPF := writePassfile(t, "new passphrase")
		r = twincrypt(t, "", "passwd", "--masterkey-file", v.keyFile, "--new-passfile", newPF, v.lower)
		r.expectExit(t, exitConfigInvalid, "passwd --masterkey-file on a config with a weakened KDF")
		if !strings.Contains(r.stderr, "config says kdf=pbkdf2-sha256 (1 iterations) but the sealed settings say argon2id (t=5, m=7 MiB, p=1)") ||
			!strings.Contains(r.stderr, "the config was altered") || !strings.Contains(r.stderr, "refusing") {
			t.Errorf("passwd --masterkey-file of a weakened config: %q", r.stderr)
		}
		expectConfigUnchanged(t, v.lower, edited, "a refused passwd --masterkey-file")
	})
	t.Run("unsealed", func(t *testing.T) {
		v := newRecoveryVolume(t, true, "--format-version", "1")
		editConfig(t, v.lower, weakenKDF)
		newPF := writePassfile(t, "new passphrase")
		r := twincrypt(t, "", "passwd", "--masterkey-file", v.keyFile, "--new-passfile", newPF, v.lower)
		r.expectExit(t, exitOK, "passwd --masterkey-file on an unsealed config with a weakened KDF")
		cfg, err := config.Load(v.lower)
		if err != nil {
			t.Fatal(err)
		}
		if cfg.KDF.Algorithm != "argon2id" || cfg.KDF.MemoryKiB != 64*1024 || cfg.KDF.Time != 3 {
			t.Errorf("passwd --masterkey-file wrapped the key under the config's KDF: %+v", cfg.KDF)
		}
		if data, _ := os.ReadFile(filepath.Join(v.lower, config.FileName)); cfg.Version != 3 || !bytes.Contains(data, []byte(`"sealed_settings"`)) {
			t.Errorf("passwd --masterkey-file left version %d without sealed settings", cfg.Version)
		}
		twincrypt(t, "", "fsck", "--quick", "--passfile", newPF, v.lower).expectExit(t, exitOK, "fsck with the new passphrase")
	})
}

// TestRecoveryRefusesPlaintextNames: a LOWER writer sets
// plaintext_names=true and deletes the root IV. mount --masterkey-file
// would store new names in the clear, and passwd --masterkey would seal that
// setting in; both refuse, saying what was changed. The same with the seal
// stripped (the config downgraded to version 2), and on a volume made as
// version 1, which never had a seal.
func TestRecoveryRefusesPlaintextNames(t *testing.T) {
	requireFUSE(t)
	for _, c := range []struct {
		name      string
		initFlags []string
		edit      func(lower string) func(m map[string]any)
		says      string
	}{
		{"sealed", nil, plaintextNames,
			"config says plaintext_names=true but the sealed settings say false"},
		{"seal stripped", nil, func(lower string) func(m map[string]any) {
			return func(m map[string]any) { plaintextNames(lower)(m); dropSeal(m) }
		}, "says plaintext_names=true, which recovery does not take from a config without sealed settings"},
		{"version 1", []string{"--format-version", "1"}, plaintextNames,
			"says plaintext_names=true, which recovery does not take from a config without sealed settings"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newRecoveryVolume(t, true, c.initFlags...)
			edited := editConfig(t, v.lower, c.edit(v.lower))
			before := lowerListing(t, v.lower)

			mnt := newMountpoint(t)
			unmountOnCleanup(t, mnt)
			r := twincrypt(t, "", "mount", "-b", "--masterkey-file", v.keyFile, v.lower, mnt)
			if r.code == 0 {
				// What the attack gets on the code before the fix.
				_ = os.WriteFile(filepath.Join(mnt, "new secret name.txt"), []byte("x"), 0o600)
				if _, err := os.Lstat(filepath.Join(v.lower, "new secret name.txt")); err == nil {
					t.Errorf("mount --masterkey-file took plaintext_names from the config: a new name is stored in the clear in LOWER")
				}
			}
			r.expectExit(t, exitConfigInvalid, "mount --masterkey-file of an altered config")
			if !strings.Contains(r.stderr, c.says) || !strings.Contains(r.stderr, "refusing") {
				t.Errorf("mount --masterkey-file: %q, want it to say %q", r.stderr, c.says)
			}
			if isMounted(t, mnt) {
				t.Fatal("mounted")
			}

			keyText, err := os.ReadFile(v.keyFile)
			if err != nil {
				t.Fatal(err)
			}
			r = twincrypt(t, string(keyText)+"new passphrase\n", "passwd", "--masterkey", v.lower)
			r.expectExit(t, exitConfigInvalid, "passwd --masterkey of an altered config")
			if !strings.Contains(r.stderr, c.says) {
				t.Errorf("passwd --masterkey: %q, want it to say %q", r.stderr, c.says)
			}
			expectConfigUnchanged(t, v.lower, edited, "a refused passwd --masterkey")
			if after := lowerListing(t, v.lower); after != before {
				t.Errorf("a refused recovery changed LOWER:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// TestRecoveryRefusesUnconfirmedCipher: on an empty volume with an
// unsealed config, nothing in LOWER can confirm a master key, and mount
// --masterkey-file used to go ahead with a warning under whatever cipher the
// config named. A LOWER writer's aes-cbc with 16-byte keys is now refused;
// on a sealed config the seal names the change.
func TestRecoveryRefusesUnconfirmedCipher(t *testing.T) {
	requireFUSE(t)
	toCBC := func(m map[string]any) { m["cipher"] = "aes-cbc"; m["key_bytes"] = 16 }
	for _, c := range []struct {
		name string
		edit func(m map[string]any)
		says string
	}{
		{"sealed", toCBC, "config says cipher=aes-cbc but the sealed settings say aes-xts; config says key_bytes=16 but the sealed settings say 64"},
		{"seal stripped", func(m map[string]any) { toCBC(m); dropSeal(m) }, "says aes-cbc with 16-byte keys, and no file content in LOWER confirms it"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := newRecoveryVolume(t, false)
			editConfig(t, v.lower, c.edit)
			mnt := newMountpoint(t)
			unmountOnCleanup(t, mnt)
			r := twincrypt(t, "", "mount", "-b", "--masterkey-file", v.keyFile, v.lower, mnt)
			r.expectExit(t, exitConfigInvalid, "mount --masterkey-file of a config whose cipher was changed")
			if !strings.Contains(r.stderr, c.says) {
				t.Errorf("mount --masterkey-file: %q, want it to say %q", r.stderr, c.says)
			}
		})
	}
}

// TestRecoveryWritesFreshInitVersion (issue 40): init --masterkey-file
// writes the config version a fresh init writes, for both ciphers.
func TestRecoveryWritesFreshInitVersion(t *testing.T) {
	for _, flags := range [][]string{nil, {"--cipher", "aes-cbc"}} {
		v := newRecoveryVolume(t, false, flags...)
		fresh, err := config.Load(v.lower)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(v.lower, config.FileName)); err != nil {
			t.Fatal(err)
		}
		// An empty volume confirms no key: --force.
		args := append(append([]string{"init", "--quiet", "--force", "--masterkey-file", v.keyFile, "--passfile", v.passfile}, cheapKDF...), flags...)
		twincrypt(t, "", append(args, v.lower)...).expectExit(t, 0, "init --masterkey-file")
		recovered, err := config.Load(v.lower)
		if err != nil {
			t.Fatal(err)
		}
		if recovered.Version != fresh.Version {
			t.Errorf("init %v writes version %d, init --masterkey-file %d", flags, fresh.Version, recovered.Version)
		}
	}
}
