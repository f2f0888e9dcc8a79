package config

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/cipher/keys"
)

// cheapKDF keeps the tests fast: argon2id with 64 KiB and one pass.
func cheapKDF() kdf.Params {
	return kdf.Params{Algorithm: kdf.Argon2id, Time: 1, MemoryKiB: 64, Threads: 1}
}

var pass = []byte("correct horse battery staple")

func create(t *testing.T, opts Options) (string, *Config, []byte) {
	t.Helper()
	dir := t.TempDir()
	if opts.KDF.Algorithm == "" {
		opts.KDF = cheapKDF()
	}
	c, master, err := Create(dir, pass, opts)
	if err != nil {
		t.Fatal(err)
	}
	return dir, c, master
}

// rawConfig returns the config file as a generic JSON object.
func rawConfig(t *testing.T, dir string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func writeRaw(t *testing.T, dir string, m any) {
	t.Helper()
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	writeBytes(t, dir, data)
}

func writeBytes(t *testing.T, dir string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestCreateLoadUnlock(t *testing.T) {
	dir, c, master := create(t, Options{Creator: "twincrypt test"})
	if len(master) != keys.MasterKeySize {
		t.Fatalf("master key is %d bytes", len(master))
	}
	if c.Cipher != "aes-xts" || c.KeyBytes != 64 || c.Version != 3 || c.PlaintextNames || c.Creator != "twincrypt test" {
		t.Errorf("created %+v", c)
	}
	if len(c.KDF.Salt) != kdf.SaltSize {
		t.Errorf("salt is %d bytes", len(c.KDF.Salt))
	}
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.Cipher != c.Cipher || loaded.KeyBytes != c.KeyBytes || !bytes.Equal(loaded.WrappedKey, c.WrappedKey) ||
		!bytes.Equal(loaded.KDF.Salt, c.KDF.Salt) || loaded.Creator != c.Creator {
		t.Errorf("loaded %+v, created %+v", loaded, c)
	}
	got, err := loaded.Unlock(pass)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, master) {
		t.Fatal("Unlock returned another master key")
	}
	if loaded.ContentSpec() != "aes-xts-plain64" {
		t.Errorf("ContentSpec = %q", loaded.ContentSpec())
	}

	// Mode 0600, pretty-printed, nothing else left in the directory.
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", st.Mode().Perm())
	}
	data, _ := os.ReadFile(filepath.Join(dir, FileName))
	if !bytes.Contains(data, []byte("\n  \"cipher\": \"aes-xts\",\n")) || !bytes.HasSuffix(data, []byte("}\n")) {
		t.Errorf("not pretty-printed:\n%s", data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries", len(entries))
	}
	// Two volumes never share a master key or salt.
	_, c2, master2 := create(t, Options{})
	if bytes.Equal(master, master2) || bytes.Equal(c.KDF.Salt, c2.KDF.Salt) {
		t.Error("master key or salt repeated")
	}
}

func TestFileModeIgnoresUmask(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir, _, _ := create(t, Options{})
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v with umask 0", st.Mode().Perm())
	}
}

func TestCreateCiphers(t *testing.T) {
	for _, c := range []struct {
		cipher   string
		keyBytes int
		wantKB   int
		spec     string
		err      error
	}{
		{"", 0, 64, "aes-xts-plain64", nil},
		{"aes-xts", 0, 64, "aes-xts-plain64", nil},
		{"aes-xts", 32, 32, "aes-xts-plain64", nil},
		{"aes-xts", 64, 64, "aes-xts-plain64", nil},
		{"aes-cbc", 0, 32, "aes-cbc-essiv:sha256/512", nil},
		{"aes-cbc", 16, 16, "aes-cbc-essiv:sha256/512", nil},
		{"aes-cbc", 32, 32, "aes-cbc-essiv:sha256/512", nil},
		{"aes-xts", 16, 0, "", ErrKeyBytes},
		{"aes-xts", 48, 0, "", ErrKeyBytes},
		{"aes-cbc", 24, 0, "", ErrKeyBytes},
		{"aes-cbc", 64, 0, "", ErrKeyBytes},
		{"aes-xts", -1, 0, "", ErrKeyBytes},
		{"aes-gcm", 0, 0, "", ErrUnknownCipher},
		{"AES-XTS", 0, 0, "", ErrUnknownCipher},
		{"aes-xts-plain64", 0, 0, "", ErrUnknownCipher},
	} {
		dir := t.TempDir()
		cfg, _, err := Create(dir, pass, Options{Cipher: c.cipher, KeyBytes: c.keyBytes, KDF: cheapKDF()})
		if c.err != nil {
			if !errors.Is(err, c.err) {
				t.Errorf("%q/%d: %v, want %v", c.cipher, c.keyBytes, err, c.err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("%q/%d: failed Create left %d entries", c.cipher, c.keyBytes, len(entries))
			}
			continue
		}
		if err != nil {
			t.Errorf("%q/%d: %v", c.cipher, c.keyBytes, err)
			continue
		}
		loaded, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if loaded.KeyBytes != c.wantKB || loaded.ContentSpec() != c.spec || cfg.ContentSpec() != c.spec {
			t.Errorf("%q/%d: key_bytes %d, spec %q", c.cipher, c.keyBytes, loaded.KeyBytes, loaded.ContentSpec())
		}
	}
}

func TestCreateDefaultKDF(t *testing.T) {
	if testing.Short() {
		t.Skip("derives with the real default costs")
	}
	dir := t.TempDir()
	c, _, err := Create(dir, pass, Options{})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := kdf.Default(kdf.Argon2id)
	if c.KDF.Algorithm != kdf.Argon2id || c.KDF.Time != def.Time || c.KDF.MemoryKiB != def.MemoryKiB || c.KDF.Threads != def.Threads {
		t.Errorf("default KDF: %+v", c.KDF)
	}
}

func TestCreateKDFOptions(t *testing.T) {
	// A caller-supplied salt is kept; an absurd cost is refused before
	// anything is derived or written.
	salt := bytes.Repeat([]byte{9}, 16)
	p := cheapKDF()
	p.Salt = salt
	_, c, _ := create(t, Options{KDF: p})
	if !bytes.Equal(c.KDF.Salt, salt) {
		t.Error("supplied salt replaced")
	}
	for _, bad := range []kdf.Params{
		{Algorithm: kdf.Argon2id, Time: 1, MemoryKiB: 1 << 31, Threads: 1},
		{Algorithm: kdf.Scrypt, LogN: 30, R: 8, P: 1},
		{Algorithm: "md5"},
		{Time: 3}, // no algorithm: not the zero value, so no default
	} {
		dir := t.TempDir()
		if _, _, err := Create(dir, pass, Options{KDF: bad}); !errors.Is(err, kdf.ErrParams) {
			t.Errorf("%+v: %v", bad, err)
		}
		if entries, _ := os.ReadDir(dir); len(entries) != 0 {
			t.Error("failed Create left files")
		}
	}
}

func TestCreateRefusals(t *testing.T) {
	t.Run("empty passphrase", func(t *testing.T) {
		dir := t.TempDir()
		for _, p := range [][]byte{nil, {}} {
			if _, _, err := Create(dir, p, Options{KDF: cheapKDF()}); !errors.Is(err, ErrEmptyPassphrase) {
				t.Errorf("%v", err)
			}
		}
	})
	t.Run("non-empty dir", func(t *testing.T) {
		for _, name := range []string{"file", ".hidden", BackupName, "sub"} {
			dir := t.TempDir()
			if name == "sub" {
				os.Mkdir(filepath.Join(dir, name), 0o700)
			} else {
				os.WriteFile(filepath.Join(dir, name), nil, 0o600)
			}
			if _, _, err := Create(dir, pass, Options{KDF: cheapKDF()}); !errors.Is(err, ErrNotEmpty) {
				t.Errorf("dir with %s: %v", name, err)
			}
		}
	})
	t.Run("existing config", func(t *testing.T) {
		dir, _, master := create(t, Options{})
		before, _ := os.ReadFile(filepath.Join(dir, FileName))
		if _, _, err := Create(dir, pass, Options{KDF: cheapKDF()}); !errors.Is(err, ErrExists) {
			t.Errorf("second Create: %v", err)
		}
		// ErrExists wins over ErrNotEmpty.
		os.WriteFile(filepath.Join(dir, "other"), nil, 0o600)
		if _, _, err := Create(dir, pass, Options{KDF: cheapKDF()}); !errors.Is(err, ErrExists) {
			t.Errorf("with other files: %v", err)
		}
		after, _ := os.ReadFile(filepath.Join(dir, FileName))
		if !bytes.Equal(before, after) {
			t.Fatal("refused Create changed the config")
		}
		c, _ := Load(dir)
		if m, err := c.Unlock(pass); err != nil || !bytes.Equal(m, master) {
			t.Fatal("original config damaged")
		}
	})
	t.Run("config is a dangling symlink", func(t *testing.T) {
		dir := t.TempDir()
		os.Symlink("/nonexistent", filepath.Join(dir, FileName))
		if _, _, err := Create(dir, pass, Options{KDF: cheapKDF()}); !errors.Is(err, ErrExists) {
			t.Errorf("%v", err)
		}
	})
	t.Run("missing dir", func(t *testing.T) {
		if _, _, err := Create(filepath.Join(t.TempDir(), "nope"), pass, Options{KDF: cheapKDF()}); err == nil {
			t.Error("Create in a missing directory succeeded")
		}
	})
}

// TestCreateRace runs several Creates on one empty directory: at most one
// may succeed, and the file on disk must be that one's.
func TestCreateRace(t *testing.T) {
	for round := 0; round < 5; round++ {
		dir := t.TempDir()
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners [][]byte
		)
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, master, err := Create(dir, pass, Options{KDF: cheapKDF()})
				if err == nil {
					mu.Lock()
					winners = append(winners, master)
					mu.Unlock()
				} else if !errors.Is(err, ErrExists) && !errors.Is(err, ErrNotEmpty) {
					t.Errorf("unexpected error %v", err)
				}
			}()
		}
		wg.Wait()
		if len(winners) > 1 {
			t.Fatalf("%d concurrent Creates succeeded", len(winners))
		}
		if len(winners) == 1 {
			c, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			if m, err := c.Unlock(pass); err != nil || !bytes.Equal(m, winners[0]) {
				t.Fatal("config on disk is not the winner's")
			}
		}
	}
}

func TestUnlockWrongPassphrase(t *testing.T) {
	dir, _, _ := create(t, Options{})
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{nil, []byte("correct horse battery stapl"), []byte("correct horse battery staple "), []byte("Correct horse battery staple")} {
		if m, err := c.Unlock(p); !errors.Is(err, ErrWrongPassphrase) || m != nil {
			t.Errorf("Unlock(%q) = %x, %v", p, m, err)
		}
	}
}

// TestTamperedFields edits authenticated fields in the file. Each edited
// file still loads (it is well-formed) but must not unlock.
func TestTamperedFields(t *testing.T) {
	dir, _, master := create(t, Options{Cipher: "aes-xts", KeyBytes: 32})
	orig := rawConfig(t, dir)
	edits := map[string]func(m map[string]any){
		"cipher xts->cbc":  func(m map[string]any) { m["cipher"] = "aes-cbc" },
		"key_bytes 32->64": func(m map[string]any) { m["key_bytes"] = 64 },
		"plaintext_names":  func(m map[string]any) { m["plaintext_names"] = true },
		"kdf time":         func(m map[string]any) { m["kdf"].(map[string]any)["time"] = 2 },
		"kdf salt": func(m map[string]any) {
			m["kdf"].(map[string]any)["salt"] = base64.StdEncoding.EncodeToString(make([]byte, 32))
		},
		"wrapped_key flip": func(m map[string]any) { m["wrapped_key"] = flipBase64(m["wrapped_key"].(string)) },
		"kdf to pbkdf2": func(m map[string]any) {
			m["kdf"] = map[string]any{"algorithm": "pbkdf2", "salt": m["kdf"].(map[string]any)["salt"], "iterations": 1, "hash": "sha256"}
		},
		"kdf memory halved":          func(m map[string]any) { m["kdf"].(map[string]any)["memory_kib"] = 32 },
		"version 3->2, seal dropped": func(m map[string]any) { m["version"] = 2; delete(m, "sealed_settings") },
	}
	// What CheckSealed, which recovery uses instead of the passphrase,
	// says about each edit.
	sealedSays := map[string]string{
		"cipher xts->cbc":   "config says cipher=aes-cbc but the sealed settings say aes-xts",
		"key_bytes 32->64":  "config says key_bytes=64 but the sealed settings say 32",
		"plaintext_names":   "config says plaintext_names=true but the sealed settings say false",
		"kdf time":          "config says kdf=argon2id (t=2, m=64 KiB, p=1) but the sealed settings say argon2id (t=1, m=64 KiB, p=1)",
		"kdf salt":          "config says kdf.salt=AAAA",
		"kdf to pbkdf2":     "config says kdf=pbkdf2-sha256 (1 iterations) but the sealed settings say argon2id (t=1, m=64 KiB, p=1)",
		"kdf memory halved": "config says kdf=argon2id (t=1, m=32 KiB, p=1)",
	}
	for name, edit := range edits {
		t.Run(name, func(t *testing.T) {
			m := cloneJSON(t, orig)
			edit(m)
			writeRaw(t, dir, m)
			c, err := Load(dir)
			if err != nil {
				t.Fatalf("tampered file does not load: %v", err)
			}
			if got, err := c.Unlock(pass); !errors.Is(err, ErrWrongPassphrase) {
				t.Fatalf("tampered config unlocked: %x, %v", got, err)
			}
			err = c.CheckSealed(master)
			switch want, ok := sealedSays[name]; {
			case ok:
				if !errors.Is(err, ErrAltered) || !strings.Contains(err.Error(), want) || !strings.HasSuffix(err.Error(), "; refusing") {
					t.Errorf("CheckSealed = %v, want ErrAltered saying %q", err, want)
				}
			case name == "wrapped_key flip":
				if err != nil {
					t.Errorf("CheckSealed after a wrapped_key flip = %v (the seal does not cover the wrapped key)", err)
				}
			default:
				if !errors.Is(err, ErrUnsealed) {
					t.Errorf("CheckSealed of a downgraded config = %v, want ErrUnsealed", err)
				}
			}
		})
	}
	// The seal itself: flipped, or opened with another master key.
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		key  []byte
	}{
		{"seal flipped", func(m map[string]any) { m["sealed_settings"] = flipBase64(m["sealed_settings"].(string)) }, master},
		{"other master key", func(map[string]any) {}, bytes.Repeat([]byte{7}, keys.MasterKeySize)},
	} {
		m := cloneJSON(t, orig)
		tc.edit(m)
		writeRaw(t, dir, m)
		c, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.CheckSealed(tc.key); !errors.Is(err, ErrSealKey) {
			t.Errorf("%s: CheckSealed = %v, want ErrSealKey", tc.name, err)
		}
	}
	for _, bad := range []func(m map[string]any){
		func(m map[string]any) { delete(m, "sealed_settings") },
		func(m map[string]any) { m["sealed_settings"] = "AAAA" },
		func(m map[string]any) { m["version"] = 1 },
	} {
		m := cloneJSON(t, orig)
		bad(m)
		writeRaw(t, dir, m)
		if _, err := Load(dir); !errors.Is(err, ErrCorrupt) {
			t.Errorf("sealed_settings missing, short, or in a version 1 config: Load = %v, want ErrCorrupt", err)
		}
	}
	writeRaw(t, dir, orig)
	if c, err := Load(dir); err != nil || c.CheckSealed(master) != nil {
		t.Fatalf("the untouched config: %v", err)
	}
	// The creator is informational and not authenticated.
	m := cloneJSON(t, orig)
	m["creator"] = "someone else"
	writeRaw(t, dir, m)
	c, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Unlock(pass); err != nil || !bytes.Equal(got, master) {
		t.Fatalf("creator edit broke unlock: %v", err)
	}
	// Tampering with the in-memory struct is caught the same way.
	c.Cipher = "aes-cbc"
	if _, err := c.Unlock(pass); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("in-memory tamper: %v", err)
	}
}

// TestVersions: Create writes version 3, sealed, unless told otherwise;
// versions 1 and 2 are raised to 3 by a passphrase change; a version 1
// config (what twincrypt wrote before 512-byte CBC sectors) loads, unlocks
// and names the extent-long CBC, and keeps its version through a
// passphrase change; editing a version 1 aes-cbc config into version 2,
// which would read its files with the other CBC layout, fails to unlock.
func TestVersions(t *testing.T) {
	pass := []byte("pw")
	dir := t.TempDir()
	c, master, err := Create(dir, pass, Options{Cipher: "aes-cbc", KDF: cheapKDF()})
	if err != nil {
		t.Fatal(err)
	}
	if c.Version != 3 || c.ContentSpec() != "aes-cbc-essiv:sha256/512" || c.CheckSealed(master) != nil {
		t.Fatalf("new aes-cbc config: version %d, spec %q", c.Version, c.ContentSpec())
	}
	if c, m, err := Create(t.TempDir(), pass, Options{KDF: cheapKDF()}); err != nil || c.Version != 3 || c.CheckSealed(m) != nil {
		t.Fatalf("new aes-xts config: %v, version %d", err, c.Version)
	}
	// Versions 1 and 2 are still written on request, without a seal, and
	// a passphrase change raises them to 3 (their content reads the same).
	for _, o := range []Options{{Version: 1}, {Version: 2}, {Version: 2, Cipher: "aes-cbc"}} {
		o.KDF = cheapKDF()
		d := t.TempDir()
		c, m, err := Create(d, pass, o)
		if err != nil || c.Version != o.Version || c.SealedSettings != nil || !errors.Is(c.CheckSealed(m), ErrUnsealed) {
			t.Fatalf("%+v: %v, %+v", o, err, c)
		}
		spec := c.ContentSpec()
		if err := c.ChangePassphrase(pass, []byte("new"), cheapKDF()); err != nil {
			t.Fatal(err)
		}
		if err := c.Save(d); err != nil {
			t.Fatal(err)
		}
		if c, err = Load(d); err != nil || c.Version != 3 || c.ContentSpec() != spec || c.CheckSealed(m) != nil {
			t.Fatalf("%+v after a passphrase change: %v, version %d, spec %q", o, err, c.Version, c.ContentSpec())
		}
	}
	for _, v := range []int{-1, 4} {
		if _, _, err := Create(t.TempDir(), pass, Options{Version: v, KDF: cheapKDF()}); !errors.Is(err, ErrUnsupportedVersion) {
			t.Errorf("Create version %d: %v", v, err)
		}
	}
	old := t.TempDir()
	if _, err := Recreate(old, pass, master, Options{Version: 1, Cipher: "aes-cbc", KDF: cheapKDF()}); err != nil {
		t.Fatal(err)
	}
	c1, err := Load(old)
	if err != nil {
		t.Fatal(err)
	}
	if c1.Version != 1 || c1.ContentSpec() != "aes-cbc-essiv:sha256" {
		t.Fatalf("version 1 aes-cbc: version %d, spec %q", c1.Version, c1.ContentSpec())
	}
	if got, err := c1.Unlock(pass); err != nil || !bytes.Equal(got, master) {
		t.Fatalf("version 1 unlock: %v", err)
	}
	if err := c1.ChangePassphrase(pass, []byte("new"), cheapKDF()); err != nil {
		t.Fatal(err)
	}
	if err := c1.Save(old); err != nil {
		t.Fatal(err)
	}
	if c1, err = Load(old); err != nil || c1.Version != 1 {
		t.Fatalf("after passwd: %v, version %d", err, c1.Version)
	}
	if _, err := c1.Unlock([]byte("new")); err != nil {
		t.Fatal(err)
	}
	m := cloneJSON(t, rawConfig(t, old))
	m["version"] = 2
	writeRaw(t, old, m)
	c2, err := Load(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Unlock([]byte("new")); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("version 1 edited to 2 unlocked: %v", err)
	}
	xts := t.TempDir()
	if _, err := Recreate(xts, pass, master, Options{Version: 1, KDF: cheapKDF()}); err != nil {
		t.Fatal(err)
	}
	if c, err := Load(xts); err != nil || c.ContentSpec() != "aes-xts-plain64" {
		t.Fatalf("version 1 aes-xts: %v", err)
	}
}

func flipBase64(s string) string {
	b := []byte(s)
	if b[10] == 'A' {
		b[10] = 'B'
	} else {
		b[10] = 'A'
	}
	return string(b)
}

func cloneJSON(t *testing.T, m map[string]any) map[string]any {
	data, _ := json.Marshal(m)
	var out map[string]any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadMissing(t *testing.T) {
	dir := t.TempDir()
	_, err := Load(dir)
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), filepath.Join(dir, FileName)) {
		t.Errorf("empty dir: %v", err)
	}
	if _, err := Load(filepath.Join(dir, "no", "such")); !errors.Is(err, ErrMissing) {
		t.Errorf("missing dir: %v", err)
	}
	// A backup alone is not a config.
	os.WriteFile(filepath.Join(dir, BackupName), []byte("{}"), 0o600)
	if _, err := Load(dir); !errors.Is(err, ErrMissing) {
		t.Errorf("only a backup: %v", err)
	}
}

func TestLoadTruncated(t *testing.T) {
	dir, _, _ := create(t, Options{})
	data, _ := os.ReadFile(filepath.Join(dir, FileName))
	full := bytes.TrimRight(data, "\n")
	for n := 0; n < len(full); n++ {
		writeBytes(t, dir, full[:n])
		if _, err := Load(dir); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d bytes: %v", n, err)
		}
	}
	writeBytes(t, dir, full)
	if _, err := Load(dir); err != nil {
		t.Fatalf("without trailing newline: %v", err)
	}
}

func TestLoadRejects(t *testing.T) {
	dir, _, _ := create(t, Options{})
	orig := rawConfig(t, dir)
	type edit func(m map[string]any)
	del := func(k string) edit { return func(m map[string]any) { delete(m, k) } }
	set := func(k string, v any) edit { return func(m map[string]any) { m[k] = v } }
	setKDF := func(k string, v any) edit {
		return func(m map[string]any) { m["kdf"].(map[string]any)[k] = v }
	}
	cases := []struct {
		name   string
		edit   edit
		want   error
		params bool // the error must also wrap kdf.ErrParams
	}{
		{"unknown cipher", set("cipher", "serpent-xts"), ErrUnknownCipher, false},
		{"empty cipher", set("cipher", ""), ErrUnknownCipher, false},
		{"version 4", set("version", 4), ErrUnsupportedVersion, false},
		{"version 0", set("version", 0), ErrUnsupportedVersion, false},
		{"version -1", set("version", -1), ErrUnsupportedVersion, false},
		{"version string", set("version", "1"), ErrCorrupt, false},
		{"version float", set("version", 1.5), ErrCorrupt, false},
		{"version null", set("version", nil), ErrCorrupt, false},
		{"missing version", del("version"), ErrCorrupt, false},
		{"missing cipher", del("cipher"), ErrCorrupt, false},
		{"missing key_bytes", del("key_bytes"), ErrCorrupt, false},
		{"missing plaintext_names", del("plaintext_names"), ErrCorrupt, false},
		{"missing kdf", del("kdf"), ErrCorrupt, false},
		{"missing wrapped_key", del("wrapped_key"), ErrCorrupt, false},
		{"plaintext_names null", set("plaintext_names", nil), ErrCorrupt, false},
		{"cipher null", set("cipher", nil), ErrCorrupt, false},
		{"unknown field", set("extra", 1), ErrCorrupt, false},
		{"case variant field", set("Cipher", "aes-cbc"), ErrCorrupt, false},
		{"unknown kdf field", setKDF("pepper", 1), ErrCorrupt, false},
		{"case variant kdf field", setKDF("Time", 1), ErrCorrupt, false},
		{"bad key_bytes", set("key_bytes", 48), ErrCorrupt, false},
		{"key_bytes string", set("key_bytes", "64"), ErrCorrupt, false},
		{"plaintext_names string", set("plaintext_names", "false"), ErrCorrupt, false},
		{"wrapped_key short", set("wrapped_key", "AAAA"), ErrCorrupt, false},
		{"wrapped_key null", set("wrapped_key", nil), ErrCorrupt, false},
		{"wrapped_key not base64", set("wrapped_key", "!!!!"), ErrCorrupt, false},
		{"kdf null", set("kdf", nil), ErrCorrupt, false},
		{"kdf array", set("kdf", []any{}), ErrCorrupt, false},
		{"kdf unknown algorithm", setKDF("algorithm", "bcrypt"), ErrCorrupt, true},
		{"kdf short salt", setKDF("salt", "AAAA"), ErrCorrupt, true},
		{"kdf negative time", setKDF("time", -1), ErrCorrupt, false},
		// Absurd costs: Load must refuse them before Unlock spends them.
		{"argon2 memory 4TiB", setKDF("memory_kib", 1<<32-1), ErrCorrupt, true},
		{"argon2 time 1e9", setKDF("time", 1e9), ErrCorrupt, true},
		{"argon2 threads 0", setKDF("threads", 0), ErrCorrupt, true},
		{"scrypt huge", set("kdf", map[string]any{"algorithm": "scrypt", "salt": orig["kdf"].(map[string]any)["salt"], "log_n": 40, "r": 8, "p": 1}), ErrCorrupt, true},
		{"scrypt endless", set("kdf", map[string]any{"algorithm": "scrypt", "salt": orig["kdf"].(map[string]any)["salt"], "log_n": 20, "r": 8, "p": 1 << 20}), ErrCorrupt, true},
		{"pbkdf2 1e12", set("kdf", map[string]any{"algorithm": "pbkdf2", "salt": orig["kdf"].(map[string]any)["salt"], "iterations": 1e12, "hash": "sha256"}), ErrCorrupt, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := cloneJSON(t, orig)
			c.edit(m)
			writeRaw(t, dir, m)
			_, err := Load(dir)
			if !errors.Is(err, c.want) {
				t.Fatalf("Load = %v, want %v", err, c.want)
			}
			if c.params && !errors.Is(err, kdf.ErrParams) {
				t.Errorf("kdf error not wrapped: %v", err)
			}
		})
	}
}

func TestLoadRejectsBadFiles(t *testing.T) {
	dir, _, _ := create(t, Options{})
	good, _ := os.ReadFile(filepath.Join(dir, FileName))
	for name, data := range map[string][]byte{
		"empty":           {},
		"null":            []byte("null"),
		"array":           []byte("[]"),
		"string":          []byte(`"twincrypt"`),
		"number":          []byte("1"),
		"trailing object": append(bytes.Clone(good), []byte("{}")...),
		"trailing junk":   append(bytes.Clone(good), 'x'),
		"binary":          {0xff, 0xfe, 0, 1},
		"deep nesting":    bytes.Repeat([]byte("["), 10000),
	} {
		writeBytes(t, dir, data)
		if _, err := Load(dir); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Larger than 64 KiB, even though it is a valid config with padding.
	big := append(bytes.Clone(good[:len(good)-2]), bytes.Repeat([]byte(" "), MaxFileSize)...)
	big = append(big, '}')
	writeBytes(t, dir, big)
	if _, err := Load(dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("oversized: %v", err)
	}
	// Exactly at the limit is still fine.
	atLimit := append(bytes.Clone(good[:len(good)-2]), bytes.Repeat([]byte(" "), MaxFileSize-len(good)+1)...)
	atLimit = append(atLimit, '}')
	if len(atLimit) != MaxFileSize {
		t.Fatalf("test bug: %d bytes", len(atLimit))
	}
	writeBytes(t, dir, atLimit)
	if _, err := Load(dir); err != nil {
		t.Errorf("64 KiB config: %v", err)
	}

	// Not a regular file.
	path := filepath.Join(dir, FileName)
	os.Remove(path)
	os.Mkdir(path, 0o700)
	if _, err := Load(dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("directory: %v", err)
	}
	os.Remove(path)
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := Load(dir); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrCorrupt) {
			t.Errorf("fifo: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Load blocked on a FIFO")
	}
	os.Remove(path)
	os.Symlink("/dev/zero", path)
	if _, err := Load(dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("symlink to /dev/zero: %v", err)
	}
}

func TestRewrapSave(t *testing.T) {
	dir, c, master := create(t, Options{})
	oldSalt := bytes.Clone(c.KDF.Salt)
	newPass := []byte("new passphrase")
	p := kdf.Params{Algorithm: kdf.Scrypt, LogN: 4, R: 8, P: 1}
	if err := c.Rewrap(newPass, master, p); err != nil {
		t.Fatal(err)
	}
	if err := c.Save(dir); err != nil {
		t.Fatal(err)
	}
	loaded, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if loaded.KDF.Algorithm != kdf.Scrypt || bytes.Equal(loaded.KDF.Salt, oldSalt) || len(loaded.KDF.Salt) != kdf.SaltSize {
		t.Errorf("new KDF: %+v", loaded.KDF)
	}
	if m, err := loaded.Unlock(newPass); err != nil || !bytes.Equal(m, master) {
		t.Fatalf("new passphrase: %v", err)
	}
	if _, err := loaded.Unlock(pass); !errors.Is(err, ErrWrongPassphrase) {
		t.Fatalf("old passphrase still works: %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("after Save the directory holds %d entries", len(entries))
	}
	st, _ := os.Stat(filepath.Join(dir, FileName))
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode after Save: %v", st.Mode().Perm())
	}

	// ChangePassphrase checks the old passphrase first.
	if err := loaded.ChangePassphrase(pass, []byte("x"), cheapKDF()); !errors.Is(err, ErrWrongPassphrase) {
		t.Errorf("ChangePassphrase with wrong old passphrase: %v", err)
	}
	if err := loaded.ChangePassphrase(newPass, []byte("third"), cheapKDF()); err != nil {
		t.Fatal(err)
	}
	if m, err := loaded.Unlock([]byte("third")); err != nil || !bytes.Equal(m, master) {
		t.Fatalf("after ChangePassphrase: %v", err)
	}
}

func TestRewrapRefusals(t *testing.T) {
	_, c, master := create(t, Options{})
	before := *c
	if err := c.Rewrap(nil, master, cheapKDF()); !errors.Is(err, ErrEmptyPassphrase) {
		t.Errorf("empty passphrase: %v", err)
	}
	if err := c.Rewrap([]byte("x"), master[:32], cheapKDF()); err == nil {
		t.Error("short master accepted")
	}
	if err := c.Rewrap([]byte("x"), master, kdf.Params{Algorithm: kdf.PBKDF2, Iterations: 1e9, Hash: "sha256"}); !errors.Is(err, kdf.ErrParams) {
		t.Errorf("absurd KDF: %v", err)
	}
	if !bytes.Equal(before.WrappedKey, c.WrappedKey) || !bytes.Equal(before.KDF.Salt, c.KDF.Salt) {
		t.Error("failed Rewrap changed the config")
	}
}

// TestSaveInterrupted stops Save after each step and checks that a
// complete config (old or new) survives, as the doc comment promises.
func TestSaveInterrupted(t *testing.T) {
	defer func() { saveHook = func(string) error { return nil } }()
	for _, step := range []string{"backup", "written"} {
		t.Run(step, func(t *testing.T) {
			dir, c, master := create(t, Options{})
			oldData, _ := os.ReadFile(filepath.Join(dir, FileName))
			if err := c.Rewrap([]byte("new"), master, cheapKDF()); err != nil {
				t.Fatal(err)
			}
			crash := errors.New("simulated crash")
			saveHook = func(s string) error {
				if s == step {
					return crash
				}
				return nil
			}
			if err := c.Save(dir); !errors.Is(err, crash) {
				t.Fatalf("Save = %v", err)
			}
			saveHook = func(string) error { return nil }
			bak, err := os.ReadFile(filepath.Join(dir, BackupName))
			if err != nil || !bytes.Equal(bak, oldData) {
				t.Fatalf("backup missing or wrong: %v", err)
			}
			loaded, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			want := pass
			if step == "written" {
				want = []byte("new")
			}
			if m, err := loaded.Unlock(want); err != nil || !bytes.Equal(m, master) {
				t.Fatalf("config after interrupted Save: %v", err)
			}
			// A later Save completes and removes the backup.
			if err := c.Save(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, BackupName)); !os.IsNotExist(err) {
				t.Fatalf("backup left behind: %v", err)
			}
		})
	}
}

func TestSaveRefusesInvalid(t *testing.T) {
	dir, c, _ := create(t, Options{})
	before, _ := os.ReadFile(filepath.Join(dir, FileName))
	c.KDF.MemoryKiB = 1 << 31
	if err := c.Save(dir); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Save of invalid config: %v", err)
	}
	after, _ := os.ReadFile(filepath.Join(dir, FileName))
	if !bytes.Equal(before, after) {
		t.Error("refused Save changed the file")
	}
}

func TestIsReserved(t *testing.T) {
	for _, n := range []string{FileName, BackupName, tempPrefix + "123"} {
		if !IsReserved(n) {
			t.Errorf("%q not reserved", n)
		}
	}
	for _, n := range []string{"twincrypt.con", "twincrypt.conf2", "x" + FileName, ".twincrypt.diriv"} {
		if IsReserved(n) {
			t.Errorf("%q reserved", n)
		}
	}
	// Whatever CreateTemp names our temporary files is reserved.
	dir := t.TempDir()
	f, err := os.CreateTemp(dir, tempPrefix+"*")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if !IsReserved(filepath.Base(f.Name())) {
		t.Errorf("temp file %q not reserved", f.Name())
	}
}

// FuzzLoad feeds arbitrary bytes to the parser behind Load. It must not
// panic, must fail only with the documented sentinels, and whatever it
// accepts must be valid and survive a write/read cycle unchanged.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	_, _, err := Create(dir, pass, Options{KDF: cheapKDF()})
	if err != nil {
		f.Fatal(err)
	}
	good, _ := os.ReadFile(filepath.Join(dir, FileName))
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(bytes.Replace(good, []byte(`"aes-xts"`), []byte(`"aes-cbc"`), 1))
	f.Add(bytes.Replace(good, []byte(`"version": 1`), []byte(`"version": 2`), 1))
	f.Add(bytes.Replace(good, []byte(`"version": 1`), []byte(`"version": 3`), 1))
	f.Add(bytes.Replace(good, []byte(`"memory_kib": 64`), []byte(`"memory_kib": 4294967295`), 1))
	f.Add(bytes.Replace(good, []byte(`"cipher"`), []byte(`"Cipher"`), 1))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`{"version":1,"cipher":"aes-xts","key_bytes":64,"plaintext_names":false,"kdf":{"algorithm":"scrypt","salt":"AAAAAAAAAAAAAAAAAAAAAA==","log_n":24,"r":256,"p":1},"wrapped_key":"AAAA"}`))
	f.Add([]byte("null"))
	f.Add([]byte("{}"))
	f.Add([]byte(""))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := parse(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrUnsupportedVersion) && !errors.Is(err, ErrUnknownCipher) {
				t.Fatalf("undocumented error %v", err)
			}
			return
		}
		if err := c.validate(); err != nil {
			t.Fatalf("accepted invalid config: %v", err)
		}
		if c.ContentSpec() == "" {
			t.Fatal("accepted config without content spec")
		}
		out, err := c.marshal()
		if err != nil {
			t.Fatal(err)
		}
		c2, err := parse(out)
		if err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		out2, _ := c2.marshal()
		if !bytes.Equal(out, out2) {
			t.Fatalf("not stable:\n%s\n%s", out, out2)
		}
	})
}

// TestLoadRefusesSymlinkedConfig: a config planted as a symlink is not
// followed out of LOWER, even to a valid config elsewhere.
func TestLoadRefusesSymlinkedConfig(t *testing.T) {
	elsewhere := t.TempDir()
	if _, _, err := Create(elsewhere, []byte("pass"), Options{Cipher: "aes-xts", KDF: cheapKDF()}); err != nil {
		t.Fatal(err)
	}
	lower := t.TempDir()
	if err := os.Symlink(filepath.Join(elsewhere, FileName), filepath.Join(lower, FileName)); err != nil {
		t.Fatal(err)
	}
	_, err := Load(lower)
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Load of a symlinked config: %v, want ErrCorrupt", err)
	}
}

// TestLoadRefusesDevice: a device node planted as the config (LOWER may
// come from anyone, and a mount reads the config as root) is refused
// without its driver's open. The device is 0:0, which no driver serves:
// its open fails ENXIO in the driver lookup, so ENXIO shows that Load
// opened it. Before the fix Load opened with O_NONBLOCK and checked the
// type afterwards, and said "no such device or address".
func TestLoadRefusesDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a device node needs root (CAP_MKNOD)")
	}
	dir := t.TempDir()
	if err := syscall.Mknod(filepath.Join(dir, FileName), syscall.S_IFCHR|0o600, 0); err != nil {
		t.Skipf("mknod: %v", err)
	}
	_, err := Load(dir)
	if !errors.Is(err, ErrCorrupt) || errors.Is(err, syscall.ENXIO) || !strings.Contains(err.Error(), "character device") {
		t.Errorf("Load of a config that is a character device: %v, want ErrCorrupt naming the type, without opening it", err)
	}
}
