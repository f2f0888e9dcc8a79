package fsck

import (
	"bytes"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/names"
	"github.com/twincrypt/twincrypt/fs"
)

var testPass = []byte("fsck test passphrase")

// cheapKDF keeps volume creation fast; never for real data.
func cheapKDF() kdf.Params {
	salt := make([]byte, 32)
	rand.Read(salt)
	return kdf.Params{Algorithm: "argon2id", Salt: salt, Time: 1, MemoryKiB: 1024, Threads: 1}
}

// requireFUSE skips a test that mounts when this machine cannot.
func requireFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("skipping: no /dev/fuse, so no volume can be built through a mount")
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("skipping: not root and no fusermount3, so no volume can be built through a mount")
		}
	}
}

// volume is a lower directory with its config and key.
type volume struct {
	lower  string
	cfg    *config.Config
	master []byte
	names  *names.Cipher
}

func newVolume(t *testing.T, opts config.Options) *volume {
	t.Helper()
	lower := filepath.Join(t.TempDir(), "lower")
	if err := os.Mkdir(lower, 0o700); err != nil {
		t.Fatal(err)
	}
	opts.KDF = cheapKDF()
	opts.Creator = "fsck test"
	cfg, master, err := config.Create(lower, testPass, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.InitLower(lower, cfg); err != nil {
		t.Fatal(err)
	}
	v := &volume{lower: lower, cfg: cfg, master: master}
	if !cfg.PlaintextNames {
		key := keys.Derive(master, "names", nil, names.KeySize)
		v.names, err = names.New(key)
		if err != nil {
			t.Fatal(err)
		}
	}
	return v
}

// mounted is a volume mounted in-process.
type mounted struct {
	dir  string
	srv  *fuse.Server
	done bool
}

func (v *volume) mount(t *testing.T) *mounted {
	t.Helper()
	requireFUSE(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	srv, err := fs.Mount(mnt, fs.Options{Lower: v.lower, Config: v.cfg, MasterKey: v.master, Log: zerolog.Nop()})
	if err != nil {
		t.Fatalf("mount: %v", err)
	}
	if err := srv.WaitMount(); err != nil {
		t.Fatalf("WaitMount: %v", err)
	}
	m := &mounted{dir: mnt, srv: srv}
	t.Cleanup(func() { m.unmount(t) })
	return m
}

func (m *mounted) unmount(t *testing.T) {
	t.Helper()
	if m.done {
		return
	}
	// Retried for up to a minute: the last RELEASEs reach the daemon
	// late on a loaded machine.
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if err = m.srv.Unmount(); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Fatalf("unmount %s: %v", m.dir, err)
	}
	m.done = true
}

func (m *mounted) path(p string) string { return filepath.Join(m.dir, p) }

// lowerRel maps a plaintext path ("/a/b") to its lower path relative to
// LOWER, as the mount names it.
func (v *volume) lowerRel(t *testing.T, plain string) string {
	t.Helper()
	var rel []string
	for _, comp := range strings.Split(strings.Trim(plain, "/"), "/") {
		if v.names == nil {
			rel = append(rel, comp)
			continue
		}
		iv, err := os.ReadFile(filepath.Join(append([]string{v.lower}, append(rel, names.DirIVFile)...)...))
		if err != nil {
			t.Fatalf("IV for %s: %v", plain, err)
		}
		cName, err := v.names.Encrypt(comp, iv)
		if err != nil {
			t.Fatal(err)
		}
		lower, _ := names.Lower(cName)
		rel = append(rel, lower)
	}
	return strings.Join(rel, "/")
}

func (v *volume) abs(rel string) string { return filepath.Join(v.lower, rel) }

func (v *volume) check(t *testing.T, opts Options) *Report {
	t.Helper()
	rep, err := Check(v.lower, v.cfg, v.master, opts)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	return rep
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(path), 0o755))
	must(t, os.WriteFile(path, data, 0o644))
}

// pattern returns n bytes that are not all zero anywhere.
func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed | 1
	}
	return b
}

// patchLower overwrites bytes of a lower file at off.
func patchLower(t *testing.T, path string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	must(t, err)
	defer f.Close()
	_, err = f.WriteAt(data, off)
	must(t, err)
}

// problemSet renders problems as "kind lower[ xattr]" lines for comparison.
func problemSet(ps []Problem, quarantined bool) []string {
	var out []string
	for _, p := range ps {
		if p.Quarantined != quarantined {
			continue
		}
		s := string(p.Kind) + " " + p.Lower
		if p.Xattr != "" {
			s += " " + p.Xattr
		}
		out = append(out, s)
	}
	return out
}

func sameSet(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	count := map[string]int{}
	for _, s := range a {
		count[s]++
	}
	for _, s := range b {
		count[s]--
	}
	for _, n := range count {
		if n != 0 {
			return false
		}
	}
	return true
}

func readMounted(t *testing.T, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Errorf("read %s: %v", path, err)
		return
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s: read %d bytes, want %d (content differs)", path, len(got), len(want))
	}
}
