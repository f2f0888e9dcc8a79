package fs

import (
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
)

// testPass is the passphrase of every test volume.
var testPass = []byte("correct horse battery staple")

// cheapKDF keeps volume creation fast in tests; never use it for real data.
func cheapKDF(t testing.TB) kdf.Params {
	salt := make([]byte, 32)
	rand.Read(salt)
	return kdf.Params{Algorithm: "argon2id", Salt: salt, Time: 1, MemoryKiB: 1024, Threads: 1}
}

// requireFUSE skips the test when this machine cannot mount FUSE at all.
func requireFUSE(t testing.TB) {
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

// variant names one kind of mount under test.
type variant struct {
	name           string
	cipher         string // "" for the twin
	keyBytes       int
	plaintextNames bool
	// noXattr mounts with Options.NoXattr.
	noXattr bool
}

var variants = []variant{
	{name: "xts", cipher: "aes-xts", keyBytes: 64},
	{name: "cbc", cipher: "aes-cbc", keyBytes: 32},
	{name: "twin"},
}

// testMount is one mounted filesystem for a test.
type testMount struct {
	lower, mnt string
	cfg        *config.Config
	master     []byte
	log        *syncBuffer
	srv        *fuse.Server
	// root is the daemon's root of a mount made by mount (nil otherwise).
	root      *root
	unmounted bool
}

// unmountNow unmounts before the test ends (the daemon's last ops are in).
func (tm *testMount) unmountNow(t testing.TB) {
	t.Helper()
	if err := tm.srv.Unmount(); err != nil {
		t.Fatalf("unmount: %v", err)
	}
	WaitEnd(tm.srv)
	tm.unmounted = true
}

// runtimeGOROOT is where the Go toolchain running the tests lives, as
// `go env GOROOT` of the go command on PATH says ("" without one).
// (runtime.GOROOT is deprecated: it is where the binary was built.)
var runtimeGOROOT = sync.OnceValue(func() string {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return os.Getenv("GOROOT")
	}
	out, err := exec.Command(goBin, "env", "GOROOT").Output()
	if err != nil {
		return os.Getenv("GOROOT")
	}
	return strings.TrimSpace(string(out))
})

type syncBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	return len(p), nil
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// newVolume creates a lower directory for v (a config for crypt variants).
func newVolume(t testing.TB, v variant) *testMount {
	t.Helper()
	return newVolumeIn(t, v, t.TempDir())
}

// newVolumeIn is newVolume with LOWER in the directory base (a lower
// filesystem of the test's choice); the mount point is a temporary one.
func newVolumeIn(t testing.TB, v variant, base string) *testMount {
	t.Helper()
	tm := &testMount{lower: filepath.Join(base, "lower"), mnt: filepath.Join(t.TempDir(), "mnt"), log: &syncBuffer{}}
	for _, d := range []string{tm.lower, tm.mnt} {
		if err := os.Mkdir(d, 0755); err != nil {
			t.Fatal(err)
		}
	}
	if v.cipher != "" {
		cfg, master, err := config.Create(tm.lower, testPass, config.Options{
			Cipher: v.cipher, KeyBytes: v.keyBytes, PlaintextNames: v.plaintextNames, KDF: cheapKDF(t), Creator: "fs test",
		})
		if err != nil {
			t.Fatalf("config.Create: %v", err)
		}
		tm.cfg, tm.master = cfg, master
		must(t, InitLower(tm.lower, cfg))
	}
	return tm
}

// mount mounts tm and unmounts it at cleanup.
func (tm *testMount) mount(t testing.TB, mutate ...func(*Options)) {
	t.Helper()
	requireFUSE(t)
	o := Options{Lower: tm.lower, Config: tm.cfg, MasterKey: tm.master, Log: zerolog.New(tm.log),
		Transport: testTransport(t)}
	envTransport := o.Transport
	for _, m := range mutate {
		m(&o)
	}
	r, srv, err := mountRoot(tm.mnt, o)
	if err != nil {
		t.Fatalf("Mount: %v", err)
	}
	tm.root = r
	if err := srv.WaitMount(); err != nil {
		t.Fatalf("WaitMount: %v", err)
	}
	tm.served(t, srv)
	if o.Transport == envTransport {
		// A test that picks its transport checks it itself.
		requireTransport(t, srv, o.Transport)
	}
}

// served records srv as tm's server and unmounts it at cleanup (unless the
// test did), retrying while the mount is busy.
func (tm *testMount) served(t testing.TB, srv *fuse.Server) {
	tm.srv = srv
	t.Cleanup(func() {
		if tm.unmounted {
			return
		}
		if err := unmountRetrying(srv); err != nil {
			t.Errorf("unmount %s: %v", tm.mnt, err)
			return
		}
		WaitEnd(srv)
	})
}

// unmountRetrying unmounts srv, trying again while the kernel refuses
// (the clients' last RELEASEs and a lower descriptor's deferred close
// reach it late on a loaded machine), for up to a minute.
func unmountRetrying(srv *fuse.Server) error {
	deadline := time.Now().Add(time.Minute)
	for {
		err := srv.Unmount()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// mountVariant makes and mounts a fresh volume of kind v.
func mountVariant(t testing.TB, v variant) *testMount {
	tm := newVolume(t, v)
	tm.mount(t, func(o *Options) { o.NoXattr = v.noXattr })
	return tm
}
