package fs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/fs/fsck"
)

// loopFS mounts a fresh filesystem of type fstype (xfs, btrfs: a sparse
// image on a loop device) for the test and returns its root; it is
// unmounted, and the loop device freed, at cleanup. It skips where the
// machine cannot: not root, no mkfs.TYPE (Debian: xfsprogs,
// btrfs-progs), or a kernel without the filesystem.
func loopFS(t *testing.T, fstype string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("mounting a %s image needs root", fstype)
	}
	mkfs := "mkfs." + fstype
	if _, err := exec.LookPath(mkfs); err != nil {
		t.Skipf("no %s (apt-get install xfsprogs btrfs-progs): cannot make a %s lower filesystem", mkfs, fstype)
	}
	dir := t.TempDir()
	img, root := filepath.Join(dir, fstype+".img"), filepath.Join(dir, "root")
	must(t, os.Mkdir(root, 0o755))
	f, err := os.Create(img)
	must(t, err)
	must(t, f.Truncate(320<<20)) // XFS's smallest filesystem is 300 MiB
	f.Close()
	if out, err := exec.Command(mkfs, "-q", img).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", mkfs, err, out)
	}
	// mount(8) sets the loop device up with autoclear: unmounting frees it.
	if out, err := exec.Command("mount", "-t", fstype, "-o", "loop", img, root).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s image here: %v: %s", fstype, err, out)
	}
	t.Cleanup(func() {
		var err error
		for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if err = unix.Unmount(root, 0); err == nil {
				return
			}
		}
		t.Errorf("unmount the %s image: %v", fstype, err)
		unix.Unmount(root, unix.MNT_DETACH)
	})
	return root
}

// mountBeside mounts a fresh volume of kind v with LOWER in base/v.name
// and returns it with a native directory next to it on the same
// filesystem, the reference.
func mountBeside(t *testing.T, v variant, base string) (native string, tm *testMount) {
	t.Helper()
	vdir := filepath.Join(base, v.name)
	native = filepath.Join(vdir, "native")
	must(t, os.MkdirAll(native, 0o755))
	tm = newVolumeIn(t, v, vdir)
	tm.mount(t)
	return native, tm
}

// TestXFSLower runs what differs on an XFS lower filesystem against a
// native directory on the same XFS, on every variant:
//   - XFS takes symlink targets of at most 1023 bytes, where ext4, btrfs
//     and tmpfs take 4095. The sealed form of a target longer than about
//     740 bytes does not fit there: the mount keeps it as a long link
//     (a marker and a sidecar), and refuses with ENAMETOOLONG exactly the
//     targets the native directory refuses (before: 741-1023 bytes were
//     refused and 3044-4095 accepted);
//   - a rename over a non-empty directory fails with EEXIST on XFS
//     (ENOTEMPTY on ext4): the mount must give the lower filesystem's
//     errno, not its own idea of it;
//   - XFS keeps POSIX ACLs as trusted.SGI_ACL_FILE and
//     trusted.SGI_ACL_DEFAULT too, which root lists: the encrypted mounts
//     must not take them for sealed trusted.* values (they gave EIO).
func TestXFSLower(t *testing.T) {
	base := loopFS(t, "xfs")
	lens := []int{1, 700, 740, 741, 760, 1000, 1022, 1023, 1024, 2000, 3043, 3044, 4095}
	for _, v := range linkVariants {
		t.Run(v.name, func(t *testing.T) {
			native, tm := mountBeside(t, v, base)
			made := map[int]bool{}
			for _, n := range lens {
				rel := fmt.Sprintf("l%d", n)
				wantErr := errnoOf(unix.Symlink(longTarget(n), filepath.Join(native, rel)))
				gotErr := errnoOf(unix.Symlink(longTarget(n), filepath.Join(tm.mnt, rel)))
				if wantErr != gotErr {
					t.Errorf("symlink of a %d-byte target: native %v, mount %v", n, wantErr, gotErr)
				}
				if wantErr == 0 {
					made[n] = true
					sameLink(t, native, tm.mnt, rel)
				}
			}
			if !made[1023] || made[1024] {
				t.Fatalf("native symlinks made: %v; want up to 1023 bytes (is this XFS?)", made)
			}

			// Rename a directory over a non-empty one, and over an
			// empty one.
			for _, root := range []string{native, tm.mnt} {
				for _, d := range []string{"src", "full", "empty", "src2"} {
					must(t, os.Mkdir(filepath.Join(root, d), 0o755))
				}
				must(t, os.WriteFile(filepath.Join(root, "full", "f"), []byte("x"), 0o644))
			}
			for _, c := range [][2]string{{"src", "full"}, {"src2", "empty"}} {
				// (os.Rename refuses a directory target itself.)
				want := errnoOf(syscall.Rename(filepath.Join(native, c[0]), filepath.Join(native, c[1])))
				got := errnoOf(syscall.Rename(filepath.Join(tm.mnt, c[0]), filepath.Join(tm.mnt, c[1])))
				if want != got {
					t.Errorf("rename %s over %s: native %v, mount %v", c[0], c[1], want, got)
				}
			}
			for _, d := range []string{"full", "empty"} {
				want := errnoOf(syscall.Rmdir(filepath.Join(native, d)))
				got := errnoOf(syscall.Rmdir(filepath.Join(tm.mnt, d)))
				if want != got {
					t.Errorf("rmdir %s: native %v, mount %v", d, want, got)
				}
			}

			// ACLs set through the mount and natively: every xattr
			// name and value alike (as root, who sees trusted.*).
			for _, root := range []string{native, tm.mnt} {
				must(t, os.WriteFile(filepath.Join(root, "acl"), []byte("x"), 0o640))
				must(t, os.Mkdir(filepath.Join(root, "acld"), 0o755))
				must(t, unix.Lsetxattr(filepath.Join(root, "acl"), "system.posix_acl_access", aclValue(1021828774), 0))
				must(t, unix.Lsetxattr(filepath.Join(root, "acld"), "system.posix_acl_default", aclValue(822084128), 0))
			}
			for _, rel := range []string{"acl", "acld"} {
				want, got := xattrDump(filepath.Join(native, rel)), xattrDump(filepath.Join(tm.mnt, rel))
				if !strings.Contains(want, "trusted.SGI_ACL") {
					t.Errorf("native %s: no trusted.SGI_ACL_* in %s (is this XFS?)", rel, want)
				}
				if want != got {
					t.Errorf("xattrs of %s:\nnative %s\nmount  %s", rel, want, got)
				}
			}

			// After a remount (the markers read afresh) and in fsck's eyes.
			tm.unmountNow(t)
			if v.cipher != "" {
				rep, err := fsck.Check(tm.lower, tm.cfg, tm.master, fsck.Options{})
				if err != nil || len(rep.Problems) != 0 {
					t.Errorf("fsck: %v, %+v", err, rep)
				}
			}
			tm.unmounted = false
			tm.mount(t)
			for n := range made {
				if got, err := os.Readlink(filepath.Join(tm.mnt, fmt.Sprintf("l%d", n))); err != nil || got != longTarget(n) {
					t.Errorf("after a remount, readlink of the %d-byte target: %d bytes, %v", n, len(got), err)
				}
			}
			if ents, err := os.ReadDir(tm.mnt); err == nil {
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), ".twincrypt") {
						t.Errorf("the listing shows %s", e.Name())
					}
				}
			}
		})
	}
}

// TestBtrfsLower: btrfs lists only the entries a directory held when it
// was opened or last rewound (since Linux 6.5; POSIX leaves it open
// whether entries added since are listed): a listing through a
// descriptor opened before files were created misses them natively. The
// mounts list them (as ext4, XFS and tmpfs do): the daemon starts every
// listing with a seek to the start, which on btrfs is a rewind, and the
// kernel's cached listing must never be a stale snapshot (docs/differences.md,
// btrfs). After a rewind both list them. And a subvolume inside LOWER
// (another st_dev) is an ordinary directory there.
func TestBtrfsLower(t *testing.T) {
	base := loopFS(t, "btrfs")
	for _, v := range linkVariants {
		t.Run(v.name, func(t *testing.T) {
			native, tm := mountBeside(t, v, base)
			list := func(fd int) string {
				l, errno := listingFd(fd, true)
				return fmt.Sprintf("%s errno %d", strings.ReplaceAll(string(l), "\n", ", "), errno)
			}
			var got [2][2]string
			for i, root := range []string{native, tm.mnt} {
				must(t, os.Mkdir(filepath.Join(root, "d"), 0o755))
				fd, err := unix.Open(filepath.Join(root, "d"), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				must(t, err)
				for _, n := range []string{"a", "b"} {
					must(t, os.WriteFile(filepath.Join(root, "d", n), []byte(n), 0o644))
				}
				got[i][0] = list(fd)
				_, err = unix.Seek(fd, 0, 0)
				must(t, err)
				got[i][1] = list(fd)
				unix.Close(fd)
			}
			if got[0][1] != got[1][1] {
				t.Errorf("listing after a rewind:\nnative %s\nmount  %s", got[0][1], got[1][1])
			}
			if !strings.Contains(got[1][0], "a type") || !strings.Contains(got[1][0], "b type") {
				t.Errorf("listing through a descriptor opened before a and b were made: %s, want both", got[1][0])
			}
			if strings.Contains(got[0][0], "a type") {
				t.Logf("this kernel's btrfs lists entries made after the open (before Linux 6.5): %s", got[0][0])
			}
		})
	}
	// A subvolume inside the twin's LOWER.
	must(t, os.Mkdir(filepath.Join(base, "subvol"), 0o755))
	tm := newVolumeIn(t, variant{name: "twin"}, filepath.Join(base, "subvol"))
	if out, err := exec.Command("btrfs", "subvolume", "create", filepath.Join(tm.lower, "sv")).CombinedOutput(); err != nil {
		t.Skipf("btrfs subvolume create: %v: %s", err, out)
	}
	must(t, os.WriteFile(filepath.Join(tm.lower, "sv", "f"), []byte("in a subvolume"), 0o644))
	tm.mount(t)
	if b, err := os.ReadFile(filepath.Join(tm.mnt, "sv", "f")); err != nil || string(b) != "in a subvolume" {
		t.Errorf("a file in a subvolume through the twin: %q, %v", b, err)
	}
	must(t, os.WriteFile(filepath.Join(tm.mnt, "sv", "g"), []byte("new"), 0o644))
	if b, err := os.ReadFile(filepath.Join(tm.lower, "sv", "g")); err != nil || string(b) != "new" {
		t.Errorf("a file written into a subvolume: %q, %v", b, err)
	}
}
