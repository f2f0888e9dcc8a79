package blockdev

import (
	"bytes"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// requireFUSE skips tests that mount when this machine cannot.
func requireFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("skipping: mounting needs /dev/fuse (%v)", err)
	}
	if os.Geteuid() != 0 {
		if _, err := exec.LookPath("fusermount3"); err != nil {
			t.Skip("skipping: not root and fusermount3 is not installed, so nothing can be mounted")
		}
	}
}

// mountTest mounts tv at a fresh directory and unmounts it in t.Cleanup.
// It returns the path of the volume file.
func mountTest(t *testing.T, tv *testVolume, o Options) string {
	t.Helper()
	requireFUSE(t)
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	o.Image, o.Volume = tv.image, tv.v
	srv, err := Mount(mnt, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	return filepath.Join(mnt, VolumeName)
}

func TestMountReadWrite(t *testing.T) {
	for _, g := range mountGeometries {
		t.Run(g.name, func(t *testing.T) {
			tv := newTestVolume(t, g)
			vol := mountTest(t, tv, Options{})

			fi, err := os.Stat(vol)
			if err != nil {
				t.Fatal(err)
			}
			if !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || fi.Size() != testPayload {
				t.Fatalf("volume: mode %v size %d, want a 0600 regular file of %d bytes", fi.Mode(), fi.Size(), testPayload)
			}
			names, err := os.ReadDir(filepath.Dir(vol))
			if err != nil || len(names) != 1 || names[0].Name() != VolumeName {
				t.Fatalf("mount root lists %v, %v; want only %s", names, err, VolumeName)
			}

			model := tv.plaintext(t)
			f, err := os.OpenFile(vol, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range ioCases(g.sectorSize) {
				data := randBytes(tc.n)
				if n, err := f.WriteAt(data, tc.off); err != nil || n != tc.n {
					t.Fatalf("write %d at %d: %d, %v", tc.n, tc.off, n, err)
				}
				copy(model[tc.off:], data)
				// The kernel sends WRITE through at once (no writeback
				// cache), so the image holds the data now.
				if i := firstDiff(tv.plaintext(t), model); i >= 0 {
					t.Fatalf("after writing %d at %d: image decrypts differently at payload offset %d", tc.n, tc.off, i)
				}
				got := make([]byte, tc.n)
				if n, err := f.ReadAt(got, tc.off); err != nil || n != tc.n || !bytes.Equal(got, data) {
					t.Fatalf("read back %d at %d: %d, %v", tc.n, tc.off, n, err)
				}
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			tv.checkOutside(t)

			// The reverse: sectors encrypted straight into the image read
			// back through the mount (an open drops the kernel's cache).
			ss := int64(g.sectorSize)
			for _, off := range []int64{0, 7 * ss, testPayload - 3*ss} {
				pt := randBytes(int(2 * ss))
				tv.putPlain(t, off, pt)
				copy(model[off:], pt)
			}
			got, err := os.ReadFile(vol)
			if err != nil {
				t.Fatal(err)
			}
			if i := firstDiff(got, model); i >= 0 {
				t.Fatalf("volume read through the mount differs from the image at payload offset %d", i)
			}
		})
	}
}

// TestMountDirectIO bypasses the kernel's page cache, so that unaligned
// requests reach the daemon as they are (losetup --direct-io=on does this).
func TestMountDirectIO(t *testing.T) {
	g := mountGeometries[1]
	tv := newTestVolume(t, g)
	vol := mountTest(t, tv, Options{})
	f, err := os.OpenFile(vol, os.O_RDWR|syscall.O_DIRECT, 0)
	if err != nil {
		t.Fatalf("O_DIRECT open: %v", err)
	}
	defer f.Close()
	model := tv.plaintext(t)
	for _, tc := range ioCases(g.sectorSize) {
		data := randBytes(tc.n)
		if n, err := f.WriteAt(data, tc.off); err != nil || n != tc.n {
			t.Fatalf("write %d at %d: %d, %v", tc.n, tc.off, n, err)
		}
		copy(model[tc.off:], data)
		// Read a little more than was written, from 3 bytes before it.
		roff := max(0, tc.off-3)
		got := make([]byte, tc.n+3)
		n, err := f.ReadAt(got, roff)
		want := model[roff:min(roff+int64(len(got)), testPayload)]
		if (err != nil && n != len(want)) || !bytes.Equal(got[:n], want) {
			t.Fatalf("read %d at %d: %d, %v", len(got), roff, n, err)
		}
	}
	if i := firstDiff(tv.plaintext(t), model); i >= 0 {
		t.Fatalf("image decrypts differently at payload offset %d", i)
	}
}

// TestMountFixedSize: the volume behaves as a block device, not a file.
func TestMountFixedSize(t *testing.T) {
	tv := newTestVolume(t, mountGeometries[0])
	vol := mountTest(t, tv, Options{})
	if err := os.Truncate(vol, testPayload/2); !errors.Is(err, syscall.EPERM) {
		t.Errorf("truncate: %v, want EPERM", err)
	}
	if err := os.Truncate(vol, testPayload); err != nil {
		t.Errorf("truncate to the same size: %v, want success", err)
	}
	if _, err := os.OpenFile(vol, os.O_WRONLY|os.O_TRUNC, 0); !errors.Is(err, syscall.EPERM) {
		t.Errorf("open with O_TRUNC: %v, want EPERM", err)
	}
	if err := os.Chmod(vol, 0o644); !errors.Is(err, syscall.EPERM) {
		t.Errorf("chmod: %v, want EPERM", err)
	}
	f, err := os.OpenFile(vol, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt([]byte("x"), testPayload); !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write at the end: %v, want ENOSPC", err)
	}
	if fi, err := os.Stat(vol); err != nil || fi.Size() != testPayload {
		t.Errorf("size after a write at the end: %v, %v", fi.Size(), err)
	}
	if err := unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 0, 4096); !errors.Is(err, syscall.EOPNOTSUPP) {
		t.Errorf("punch hole: %v, want EOPNOTSUPP", err)
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, 4096); err != nil {
		t.Errorf("fallocate inside the volume: %v", err)
	}
	if err := f.Sync(); err != nil {
		t.Errorf("fsync: %v", err)
	}
	tv.checkOutside(t)
}

func TestMountReadOnly(t *testing.T) {
	tv := newTestVolume(t, mountGeometries[0])
	want := tv.plaintext(t)
	vol := mountTest(t, tv, Options{ReadOnly: true})
	if _, err := os.OpenFile(vol, os.O_RDWR, 0); !errors.Is(err, syscall.EROFS) {
		t.Errorf("open for writing: %v, want EROFS", err)
	}
	got, err := os.ReadFile(vol)
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("read of a read-only volume: %v, equal %v", err, bytes.Equal(got, want))
	}
}

// TestMountRecorder checks that READ and WRITE are timed with their bytes
// and with crypto and image time apart.
func TestMountRecorder(t *testing.T) {
	tv := newTestVolume(t, mountGeometries[0])
	rec := measure.NewRecorder("test")
	vol := mountTest(t, tv, Options{Recorder: rec})
	f, err := os.OpenFile(vol, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(randBytes(1<<20), 0); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// A fresh open drops the cache, so these bytes are READ from the daemon.
	if _, err := os.ReadFile(vol); err != nil {
		t.Fatal(err)
	}
	snap := rec.Snapshot()
	ops := map[string]measure.Stats{}
	for _, s := range snap.Ops {
		ops[s.Op] = s
	}
	for _, op := range []string{"read", "write"} {
		s, ok := ops[op]
		if !ok {
			t.Errorf("no %s recorded (ops: %v)", op, slices.Sorted(maps.Keys(ops)))
			continue
		}
		if s.Bytes < 1<<20 || s.CryptoNs <= 0 || s.LowerNs <= 0 || s.TotalNs < s.CryptoNs+s.LowerNs {
			t.Errorf("%s: %+v; want >= 1 MiB, crypto and lower time within the total", op, s)
		}
	}
	for _, op := range []string{"open", "fsync", "flush", "getattr", "lookup"} {
		if ops[op].Count == 0 {
			t.Errorf("no %s recorded", op)
		}
	}
}
