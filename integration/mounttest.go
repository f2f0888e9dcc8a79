// Package integration holds twincrypt's end-to-end tests: the frozen
// example volumes in testdata/ (the on-disk format is a promise) and real
// applications (tar, git, compilers, sqlite, mmap users, gzip, cp) run on
// live in-process mounts.
//
// This file has the mount helpers the tests share. They are exported only
// for the tests of this package and for cmd/mkexample, which builds the
// example volumes; nothing else should use them.
package integration

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/fs"
)

// TestPass is the passphrase of the fresh volumes the tests create.
var TestPass = []byte("correct horse battery staple")

// CheapKDF returns argon2id parameters (1 pass, 1 MiB, 1 thread) with a
// fresh salt. They make a volume open in a millisecond: for tests and the
// example volumes only, never for real data.
func CheapKDF() kdf.Params {
	salt := make([]byte, kdf.SaltSize)
	if _, err := rand.Read(salt); err != nil {
		panic(err)
	}
	return kdf.Params{Algorithm: kdf.Argon2id, Salt: salt, Time: 1, MemoryKiB: 1024, Threads: 1}
}

// RequireFUSE skips the test when this machine cannot mount FUSE at all.
func RequireFUSE(t testing.TB) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine: FUSE mount tests cannot run")
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("not root and no fusermount3: FUSE mount tests cannot run")
		}
	}
}

// Variant names one kind of mount under test.
type Variant struct {
	Name           string
	Cipher         string // "" for the passthrough twin
	KeyBytes       int
	PlaintextNames bool
}

// Crypt reports whether v encrypts (everything but the twin).
func (v Variant) Crypt() bool { return v.Cipher != "" }

// EncryptedNames reports whether v hides names in the lower directory.
func (v Variant) EncryptedNames() bool { return v.Crypt() && !v.PlaintextNames }

// Variants are the three mounts every application test runs on.
var Variants = []Variant{
	{Name: "xts", Cipher: "aes-xts", KeyBytes: 64},
	{Name: "cbc", Cipher: "aes-cbc", KeyBytes: 32},
	{Name: "twin"},
}

// SyncBuffer collects the filesystem's log lines.
type SyncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Volume is a lower directory, its keys, and at most one live mount.
type Volume struct {
	Variant   Variant
	Lower     string
	Mnt       string
	Config    *config.Config
	MasterKey []byte
	Log       *SyncBuffer

	// AllowOther mounts with allow_other, for programs that run as
	// another user (PostgreSQL refuses to run as root). Set before Mount.
	AllowOther bool

	readOnly bool
	srv      *fuse.Server
	// cleanup is set once an unmount is registered with the test that
	// first mounted the volume; remounts (even from subtests) reuse it.
	cleanup bool
}

// NewVolume creates an empty lower directory for v (with a config for the
// crypt variants) and an empty mount point, both under t.TempDir().
func NewVolume(t testing.TB, v Variant) *Volume {
	t.Helper()
	base := t.TempDir()
	vol := &Volume{Variant: v, Lower: filepath.Join(base, "lower"), Mnt: filepath.Join(base, "mnt"), Log: &SyncBuffer{}}
	for _, d := range []string{vol.Lower, vol.Mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if v.Crypt() {
		cfg, master, err := config.Create(vol.Lower, TestPass, config.Options{
			Cipher: v.Cipher, KeyBytes: v.KeyBytes, PlaintextNames: v.PlaintextNames,
			KDF: CheapKDF(), Creator: "twincrypt integration test",
		})
		if err != nil {
			t.Fatalf("config.Create: %v", err)
		}
		vol.Config, vol.MasterKey = cfg, master
	}
	return vol
}

// Mount mounts vol (read-only if asked). The first Mount registers, with
// its t, an unmount of whatever mount the volume then has, and a dump of the
// filesystem's log if the test failed.
func (vol *Volume) Mount(t testing.TB, readOnly bool) {
	t.Helper()
	RequireFUSE(t)
	if vol.srv != nil {
		t.Fatalf("%s is already mounted", vol.Mnt)
	}
	transport, err := fs.ParseTransport(os.Getenv(TransportEnv))
	if err != nil {
		t.Fatalf("%s: %v", TransportEnv, err)
	}
	srv, err := MountDir(vol.Mnt, fs.Options{
		Lower: vol.Lower, Config: vol.Config, MasterKey: vol.MasterKey,
		ReadOnly: readOnly, Log: zerolog.New(vol.Log), Transport: transport,
		AllowOther: vol.AllowOther,
	})
	if err != nil {
		t.Fatal(err)
	}
	vol.srv, vol.readOnly = srv, readOnly
	defer func() {
		// A run over the ring must never pass on /dev/fuse.
		if got := fs.TransportOf(srv); transport == fs.TransportUring && got.Name != fs.TransportUring {
			t.Skipf("%s=uring but the mount runs on %s", TransportEnv, got)
		}
	}()
	if vol.cleanup {
		return
	}
	vol.cleanup = true
	t.Cleanup(func() {
		if t.Failed() {
			if l := vol.Log.String(); l != "" {
				t.Logf("filesystem log of %s:\n%s", vol.Mnt, l)
			}
		}
		vol.Unmount(t)
	})
}

// FUSEMagic is the f_type statfs reports for a FUSE mount.
const FUSEMagic = 0x65735546

// RequireMounted fails the test unless dir is the root of a FUSE mount.
func RequireMounted(t testing.TB, dir string) {
	t.Helper()
	var st, parent syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatalf("statfs %s: %v", dir, err)
	}
	if st.Type != FUSEMagic {
		t.Fatalf("%s is not a FUSE mount (f_type %#x)", dir, st.Type)
	}
	if err := syscall.Statfs(filepath.Dir(dir), &parent); err == nil && parent.Type == FUSEMagic {
		t.Fatalf("%s: its parent is a FUSE mount too; expected the mount root", dir)
	}
}

// Unmount unmounts vol if it is mounted.
func (vol *Volume) Unmount(t testing.TB) {
	t.Helper()
	if vol.srv == nil {
		return
	}
	srv := vol.srv
	vol.srv = nil
	if err := UnmountDir(srv, vol.Mnt); err != nil {
		t.Error(err)
	}
}

// Remount unmounts vol and mounts it again, so that what is read next
// comes from the lower directory and not from any cache of the old mount.
func (vol *Volume) Remount(t testing.TB) {
	t.Helper()
	ro := vol.readOnly
	vol.Unmount(t)
	vol.Mount(t, ro)
}

// MountVariant makes a fresh volume of kind v and mounts it read-write.
func MountVariant(t testing.TB, v Variant) *Volume {
	t.Helper()
	vol := NewVolume(t, v)
	vol.Mount(t, false)
	return vol
}

// TransportEnv selects the transport of the volumes the tests mount
// (Volume.Mount): "uring" runs them over FUSE over io_uring, "dev" or
// unset over /dev/fuse; scripts/test.sh runs the package both ways.
const TransportEnv = "TWINCRYPT_TEST_TRANSPORT"

// MountDir mounts o at mnt and waits until the mount is live.
func MountDir(mnt string, o fs.Options) (*fuse.Server, error) {
	srv, err := fs.Mount(mnt, o)
	if err != nil {
		return nil, fmt.Errorf("fs.Mount %s: %w", mnt, err)
	}
	if err := srv.WaitMount(); err != nil {
		UnmountDir(srv, mnt)
		return nil, fmt.Errorf("WaitMount %s: %w", mnt, err)
	}
	return srv, nil
}

// UnmountDir unmounts srv, retrying for a minute while the mount is busy
// (a child process may still be closing its files, late on a loaded
// machine). If it still
// cannot, it detaches the mount lazily so that none is left behind, and
// reports the error. After an unmount it waits until the filesystem has
// let go of its lower descriptors (fs.WaitEnd): a LOWER that is itself a
// mount (crashsim's recorder) can then be unmounted at once.
func UnmountDir(srv *fuse.Server, mnt string) error {
	var err error
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if err = srv.Unmount(); err == nil {
			fs.WaitEnd(srv)
			return nil
		}
	}
	if derr := syscall.Unmount(mnt, syscall.MNT_DETACH); derr != nil {
		return fmt.Errorf("unmount %s: %v; lazy unmount: %v", mnt, err, derr)
	}
	return fmt.Errorf("unmount %s: %v (detached lazily instead)", mnt, err)
}
