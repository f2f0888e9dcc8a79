package blockdev

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/luks"
)

// requireLoopExt4 skips unless this process can attach loop devices and
// make, mount and check ext4.
func requireLoopExt4(t *testing.T) {
	t.Helper()
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("skipping: loop devices and ext4 mounts need root")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skipf("skipping: no loop driver (%v)", err)
	}
	for _, tool := range []string{"losetup", "mkfs.ext4", "fsck.ext4"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("skipping: %s is not installed", tool)
		}
	}
}

// teardown is one resource of the stack (FUSE mount, loop device, ext4
// mount). release runs at most once: by the test, in order, or by
// t.Cleanup, in reverse order of acquisition, if the test failed first.
type teardown struct {
	what    string
	release func() error
	done    bool
}

func (r *teardown) run(t *testing.T) {
	t.Helper()
	if r.done {
		return
	}
	r.done = true
	if err := r.release(); err != nil {
		t.Errorf("release %s: %v", r.what, err)
	}
}

func hold(t *testing.T, what string, release func() error) *teardown {
	r := &teardown{what: what, release: release}
	t.Cleanup(func() { r.run(t) })
	return r
}

// stack is a volume in use: FUSE mount, loop device over MNT/volume, ext4
// mounted on the loop device.
type stack struct {
	loopDev        string
	fuse, loop, fs *teardown
}

// up mounts tv, attaches a loop device to the volume file and, with
// mountExt4, mounts its ext4 at dataDir.
func up(t *testing.T, tv *testVolume, mnt, dataDir string, mkfs, mountExt4 bool) *stack {
	t.Helper()
	srv, err := Mount(mnt, Options{Image: tv.image, Volume: tv.v})
	if err != nil {
		t.Fatal(err)
	}
	s := &stack{}
	s.fuse = hold(t, "FUSE mount "+mnt, func() error { return unmountReleased(srv) })
	vol := filepath.Join(mnt, VolumeName)
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=off", vol).CombinedOutput()
	if err != nil {
		t.Fatalf("losetup --find --show %s: %v: %s", vol, err, out)
	}
	s.loopDev = strings.TrimSpace(string(out))
	s.loop = hold(t, "loop device "+s.loopDev, func() error { return detachLoop(s.loopDev) })
	if mkfs {
		run(t, "mkfs.ext4", "-q", s.loopDev)
	}
	if mountExt4 {
		if err := unix.Mount(s.loopDev, dataDir, "ext4", 0, ""); err != nil {
			t.Fatalf("mount %s on %s: %v", s.loopDev, dataDir, err)
		}
		s.fs = hold(t, "ext4 mount "+dataDir, func() error { return unix.Unmount(dataDir, 0) })
	}
	return s
}

// down releases the stack top to bottom.
func (s *stack) down(t *testing.T) {
	t.Helper()
	if s.fs != nil {
		s.fs.run(t)
	}
	s.loop.run(t)
	s.fuse.run(t)
}

// detachLoop detaches dev and waits until the kernel has let go of the
// backing file (detach completes on the device's last close), so that the
// FUSE mount below is no longer busy.
func detachLoop(dev string) error {
	if out, err := exec.Command("losetup", "-d", dev).CombinedOutput(); err != nil {
		return fmt.Errorf("losetup -d %s: %v: %s", dev, err, out)
	}
	backing := filepath.Join("/sys/block", filepath.Base(dev), "loop", "backing_file")
	// The last close may be udev's probe of the device, late on a
	// loaded machine.
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(backing); err != nil {
			return nil
		}
	}
	return fmt.Errorf("%s still attached 60 s after losetup -d", dev)
}

// unmountReleased unmounts the FUSE mount of a volume whose loop device
// was just detached, retrying while the kernel refuses (for up to 60 s):
// the loop device drops its backing file through a deferred fput after
// its backing_file has gone from sysfs, and go-fuse's own retries (a few
// hundred ms) are too short for that on a loaded machine. (go-fuse's
// error is its fusermount fallback's, which does not wrap EBUSY: any
// error is retried.)
func unmountReleased(srv interface{ Unmount() error }) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := srv.Unmount()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// writeTree writes a few MB of files (some large with odd sizes, many
// small, some empty, in nested directories) and returns their sha256 sums
// by relative path.
func writeTree(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	sums := map[string][32]byte{}
	put := func(rel string, size int) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sums[rel] = sha256.Sum256(data)
	}
	put("big/a.bin", 3<<20+123)
	put("big/b.bin", 1<<20)
	put("big/c.bin", 2<<20-1)
	for i := range 60 {
		put(fmt.Sprintf("small/d%d/f%03d", i%7, i), rng.IntN(20000))
	}
	put("empty", 0)
	return sums
}

// readTree returns the sha256 sums of every regular file under dir.
func readTree(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	sums := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		sums[rel] = sha256.Sum256(data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

// ourLoops lists loop devices whose backing file is below dir.
func ourLoops(t *testing.T, dir string) []string {
	t.Helper()
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return devs
}

// TestLoopExt4 puts a real ext4 on the userspace dm-crypt path: mkfs
// through a loop device over the volume file, a tree of files, everything
// torn down, then brought up again from the image alone: the files must be
// intact and fsck must find the filesystem clean.
func TestLoopExt4(t *testing.T) {
	requireLoopExt4(t)
	for _, g := range []geometry{geometries[0], geometries[2]} {
		t.Run(g.name, func(t *testing.T) {
			dir, err := filepath.EvalSymlinks(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			// Registered first, so it runs after every release below.
			t.Cleanup(func() {
				if devs := ourLoops(t, dir); len(devs) > 0 {
					t.Errorf("loop devices still attached after the test: %v", devs)
				}
			})
			tv := newTestVolume(t, g)
			// 64 MiB of payload after the 1 MiB header, to the end of the image.
			if err := os.Truncate(tv.image, testOffset+64<<20); err != nil {
				t.Fatal(err)
			}
			tv.v = &luks.Volume{Cipher: tv.v.Cipher, Key: tv.v.Key, SectorSize: g.sectorSize,
				IVShift: g.ivShift, IVOffset: g.ivOffset, Offset: testOffset, Size: -1}
			mnt, data := filepath.Join(dir, "dev"), filepath.Join(dir, "data")
			for _, d := range []string{mnt, data} {
				if err := os.Mkdir(d, 0o700); err != nil {
					t.Fatal(err)
				}
			}

			s := up(t, tv, mnt, data, true, true)
			want := writeTree(t, data)
			s.down(t)
			if t.Failed() {
				t.FailNow()
			}
			if devs := ourLoops(t, dir); len(devs) > 0 {
				t.Fatalf("loop devices still attached after teardown: %v", devs)
			}
			header, err := os.ReadFile(tv.image)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(header[:testOffset], tv.outside[:testOffset]) {
				t.Error("the image's header area changed")
			}
			// The independent decoder finds the ext4 superblock magic where
			// mkfs put it; the raw image does not.
			const magicOff = 1024 + 56 // s_magic, little-endian 0xEF53
			if pt := tv.plaintext(t); pt[magicOff] != 0x53 || pt[magicOff+1] != 0xEF {
				t.Errorf("decrypted payload has no ext4 magic: % x", pt[magicOff:magicOff+2])
			}
			if header[testOffset+magicOff] == 0x53 && header[testOffset+magicOff+1] == 0xEF {
				t.Error("the image holds the ext4 superblock in plaintext")
			}

			s = up(t, tv, mnt, data, false, true)
			got := readTree(t, data)
			if len(got) != len(want) {
				t.Errorf("after remount: %d files, want %d", len(got), len(want))
			}
			for rel, sum := range want {
				if got[rel] != sum {
					t.Errorf("after remount: %s differs", rel)
				}
			}
			s.fs.run(t)
			out := run(t, "fsck.ext4", "-n", "-f", s.loopDev)
			t.Logf("fsck.ext4 -n -f: %s", strings.TrimSpace(out))
			s.down(t)
		})
	}
}
