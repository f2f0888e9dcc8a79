package fs

// Hostile LOWER: whatever someone with write access to the lower tree puts
// there (symlinks out of LOWER, directories swapped for symlinks while the
// kernel holds nodes for them, names that decrypt to "../x" or "a/b",
// absurd sizes), the daemon must never read or write outside LOWER, panic,
// or allocate without bound.
//
// Outside LOWER every test keeps a sentinel tree whose bytes, modes,
// owners, times (atime included: its atime is set before its mtime, so
// that under relatime any read would move it), xattrs and listings are
// compared before and after. Only the daemon is under test: on the twin a
// symlink is shown as a symlink, and an application that follows it (open
// without O_NOFOLLOW, a path through it) is the kernel following a link in
// that application's name, as on any filesystem; those steps run on the
// crypt variants only, where a planted link's target does not decrypt.

import (
	"bytes"
	"crypto/aes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rfjakob/eme"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// outsideTree makes the sentinel tree outside LOWER: a file, a directory
// holding a file, each with an xattr, times set with atime < mtime.
func outsideTree(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "outside")
	must(t, os.MkdirAll(filepath.Join(out, "dir"), 0755))
	must(t, os.WriteFile(filepath.Join(out, "sentinel"), []byte("sentinel: must not change\n"), 0644))
	must(t, os.WriteFile(filepath.Join(out, "dir", "inner"), []byte("inner sentinel\n"), 0640))
	for _, p := range []string{"sentinel", "dir", "dir/inner", "."} {
		full := filepath.Join(out, p)
		if err := unix.Lsetxattr(full, "user.sentinel", []byte("keep"), 0); err != nil && p == "sentinel" {
			t.Logf("no user xattrs on %s (%v): xattr comparison is weaker", out, err)
		}
	}
	ageTree(t, out)
	return out
}

// ageTree gives every object below root (root included) an atime before
// its mtime, so that a later read under relatime moves the atime.
func ageTree(t *testing.T, root string) {
	t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(1_000_000_000_123), unix.NsecToTimespec(2_000_000_000_456)}
	// Listed first, then set: listing a directory moves its atime.
	var all []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		must(t, err)
		all = append(all, p)
		return nil
	})
	for _, p := range all {
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
	}
}

// snapshot describes every object below root without changing any atime:
// type, mode, owner, size, times, link target, content hash, xattrs.
func snapshot(t *testing.T, root string) string {
	t.Helper()
	var lines []string
	var walk func(rel string)
	walk = func(rel string) {
		p := filepath.Join(root, rel)
		var st unix.Stat_t
		must(t, unix.Lstat(p, &st))
		line := fmt.Sprintf("%s mode=%o uid=%d gid=%d size=%d nlink=%d atime=%d.%d mtime=%d.%d",
			rel, st.Mode, st.Uid, st.Gid, st.Size, st.Nlink, st.Atim.Sec, st.Atim.Nsec, st.Mtim.Sec, st.Mtim.Nsec)
		buf := make([]byte, 4096)
		if n, err := unix.Llistxattr(p, buf); err == nil {
			var xs []string
			for _, x := range strings.Split(string(buf[:n]), "\x00") {
				if x == "" {
					continue
				}
				v := make([]byte, 4096)
				vn, _ := unix.Lgetxattr(p, x, v)
				xs = append(xs, x+"="+string(v[:max(vn, 0)]))
			}
			sort.Strings(xs)
			line += " xattrs=" + strings.Join(xs, ",")
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case unix.S_IFREG:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NOATIME|unix.O_CLOEXEC, 0)
			must(t, err)
			f := os.NewFile(uintptr(fd), p)
			h := sha256.New()
			_, err = f.WriteTo(h)
			f.Close()
			must(t, err)
			line += fmt.Sprintf(" sha256=%x", h.Sum(nil))
		case unix.S_IFDIR:
			fd, err := unix.Open(p, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
			must(t, err)
			f := os.NewFile(uintptr(fd), p)
			ents, err := f.Readdirnames(-1)
			f.Close()
			must(t, err)
			sort.Strings(ents)
			line += " entries=" + strings.Join(ents, ",")
			lines = append(lines, line)
			for _, e := range ents {
				walk(filepath.Join(rel, e))
			}
			return
		}
		lines = append(lines, line)
	}
	walk(".")
	return strings.Join(lines, "\n")
}

// requireUnchanged fails unless the tree below root is as in before.
func requireUnchanged(t *testing.T, root, before string) {
	t.Helper()
	if after := snapshot(t, root); after != before {
		t.Errorf("the tree outside LOWER changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// nameCipher is the volume's name cipher, derived as the mount does.
func nameCipher(t *testing.T, tm *testMount) *names.Cipher {
	t.Helper()
	key := keys.Derive(tm.master, "names", nil, names.KeySize)
	c, err := names.New(key)
	must(t, err)
	return c
}

// lowerPath is the lower path of the plaintext path rel (slash separated)
// of tm, computed with the package's own name functions.
func lowerPath(t *testing.T, tm *testMount, rel string) string {
	t.Helper()
	p := tm.lower
	for _, c := range strings.Split(rel, "/") {
		if tm.cfg == nil || tm.cfg.PlaintextNames {
			p = filepath.Join(p, c)
			continue
		}
		iv, err := os.ReadFile(filepath.Join(p, names.DirIVFile))
		must(t, err)
		cName, err := nameCipher(t, tm).Encrypt(c, iv)
		must(t, err)
		l, _ := names.Lower(cName)
		p = filepath.Join(p, l)
	}
	return p
}

// alive checks that the daemon still serves a normal file after the abuse.
func alive(t *testing.T, tm *testMount) {
	t.Helper()
	if got, err := os.ReadFile(filepath.Join(tm.mnt, "keep")); err != nil || string(got) != "keep" {
		t.Fatalf("daemon not serving an ordinary file afterwards: %q, %v", got, err)
	}
	p := filepath.Join(tm.mnt, "after-"+strconv.Itoa(os.Getpid()))
	must(t, os.WriteFile(p, []byte("after"), 0644))
	if got, err := os.ReadFile(p); err != nil || string(got) != "after" {
		t.Fatalf("new file after the abuse reads %q, %v", got, err)
	}
	must(t, os.Remove(p))
}

// waitReleased waits until the daemon of tm holds no open file: the
// kernel sends RELEASE after close(2) has returned, asynchronously.
func waitReleased(t *testing.T, tm *testMount) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); tm.root.census().files > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("files written through the mount are still open in the daemon a minute after their close")
		}
	}
}

// procPath is the /proc path of our own descriptor fd. Opening it, or
// calling chmod, truncate, setxattr... on it, reaches the FUSE inode the
// descriptor holds without a lookup: the kernel does not revalidate it,
// so a swap in LOWER behind that inode's back is seen by the daemon only.
func procPath(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// opath opens p on the mount as O_PATH (a lookup, no FUSE OPEN): the
// kernel keeps the node while the descriptor is open.
func opath(t *testing.T, p string, flags int) int {
	t.Helper()
	fd, err := unix.Open(p, unix.O_PATH|unix.O_CLOEXEC|flags, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
	return fd
}

// expectFail records an operation that must fail; it returns the error.
func expectFail(t *testing.T, what string, err error) error {
	t.Helper()
	if err == nil {
		t.Errorf("%s: succeeded, want an error (the lower object is a symlink out of LOWER)", what)
	}
	return err
}

// TestHostileLowerSymlinks mounts over a lower tree in which the entries
// the mount uses were replaced by symlinks out of LOWER: a file and a
// directory (whose real lower content was moved outside, so that following
// the link would find everything the mount expects), a directory IV and a
// long-name sidecar (crypt). The mount shows the symlinks as symlinks, and
// no operation through it reaches the outside tree.
func TestHostileLowerSymlinks(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			crypt := v.cipher != ""
			tm := mountVariant(t, v)
			long := strings.Repeat("L", 200)
			must(t, os.WriteFile(filepath.Join(tm.mnt, "keep"), []byte("keep"), 0644))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "f"), []byte("mine"), 0644))
			must(t, os.Mkdir(filepath.Join(tm.mnt, "d"), 0755))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "d", "victim"), []byte("victim"), 0644))
			must(t, os.Mkdir(filepath.Join(tm.mnt, "d2"), 0755))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "d2", "x"), []byte("x"), 0644))
			tm.unmountNow(t)

			out := outsideTree(t)
			lf, ld := lowerPath(t, tm, "f"), lowerPath(t, tm, "d")
			must(t, os.Rename(lf, filepath.Join(out, "f-moved")))
			must(t, os.Symlink(filepath.Join(out, "sentinel"), lf))
			must(t, os.Rename(ld, filepath.Join(out, "d-moved")))
			must(t, os.Symlink(filepath.Join(out, "d-moved"), ld))
			var longSidecar string
			if crypt {
				// d2's IV becomes a link to a copy outside: following it
				// would decrypt d2's names.
				iv := filepath.Join(lowerPath(t, tm, "d2"), names.DirIVFile)
				b, err := os.ReadFile(iv)
				must(t, err)
				must(t, os.WriteFile(filepath.Join(out, "iv-copy"), b, 0644))
				must(t, os.Remove(iv))
				must(t, os.Symlink(filepath.Join(out, "iv-copy"), iv))
				// The sidecar of a long name the mount will create.
				longSidecar = lowerPath(t, tm, long) + names.LongSuffix
				must(t, os.Symlink(filepath.Join(out, "sentinel"), longSidecar))
			}
			ageTree(t, out)
			before := snapshot(t, out)

			tm.unmounted = false
			tm.mount(t)
			mnt := tm.mnt
			f, d := filepath.Join(mnt, "f"), filepath.Join(mnt, "d")

			// What the mount shows: two symlinks.
			for _, p := range []string{f, d} {
				fi, err := os.Lstat(p)
				must(t, err)
				if fi.Mode()&os.ModeSymlink == 0 {
					t.Errorf("%s: mode %v, want a symlink (that is what LOWER holds)", p, fi.Mode())
				}
			}
			ents, err := os.ReadDir(mnt)
			must(t, err)
			var listed []string
			for _, e := range ents {
				listed = append(listed, e.Name())
			}
			if got := strings.Join(listed, ","); got != "d,d2,f,keep" {
				t.Errorf("root lists %s", got)
			}
			_, err = os.Readlink(f)
			if crypt && !errors.Is(err, syscall.EIO) {
				t.Errorf("readlink of a planted link: %v, want EIO (its target is not sealed by us)", err)
			}

			// Operations that do not follow the last link.
			ts := []unix.Timespec{unix.NsecToTimespec(5e9), unix.NsecToTimespec(6e9)}
			for _, p := range []string{f, d} {
				_, err := unix.Open(p, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				expectFail(t, "open O_NOFOLLOW "+p, err)
				// These change the lower symlink itself, inside LOWER.
				unix.Lchown(p, 4321, 4321)
				unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
				unix.Fchmodat(unix.AT_FDCWD, p, 0600, unix.AT_SYMLINK_NOFOLLOW)
				unix.Lsetxattr(p, "user.evil", []byte("x"), 0)
				unix.Lsetxattr(p, "trusted.evil", []byte("x"), 0)
				unix.Lremovexattr(p, "user.sentinel")
				unix.Lremovexattr(p, "trusted.sentinel")
			}

			if crypt {
				// An application that follows the links: the targets do
				// not decrypt, so nothing reaches the outside.
				_, err := os.ReadFile(f)
				expectFail(t, "read through a planted link", err)
				expectFail(t, "write through a planted link", os.WriteFile(f, []byte("evil"), 0644))
				expectFail(t, "truncate through a planted link", os.Truncate(f, 0))
				expectFail(t, "chmod through a planted link", os.Chmod(f, 0600))
				expectFail(t, "chown through a planted link", os.Chown(f, 4321, 4321))
				expectFail(t, "utimes through a planted link", unix.UtimesNanoAt(unix.AT_FDCWD, f, ts, 0))
				expectFail(t, "setxattr through a planted link", unix.Setxattr(f, "user.evil", []byte("x"), 0))
				_, err = os.Stat(f)
				expectFail(t, "stat through a planted link", err)
				expectFail(t, "create in a linked directory", os.WriteFile(filepath.Join(d, "new"), []byte("evil"), 0644))
				expectFail(t, "mkdir in a linked directory", os.Mkdir(filepath.Join(d, "newdir"), 0755))
				expectFail(t, "unlink in a linked directory", os.Remove(filepath.Join(d, "victim")))
				expectFail(t, "rename into a linked directory", os.Rename(filepath.Join(mnt, "keep"), filepath.Join(d, "keep")))
				expectFail(t, "rename out of a linked directory", os.Rename(filepath.Join(d, "victim"), filepath.Join(mnt, "victim")))
				_, err = os.ReadDir(d)
				expectFail(t, "readdir of a linked directory", err)

				// d2's IV is a link: d2 is unreadable, and is not "healed"
				// by writing through the link either.
				d2 := filepath.Join(mnt, "d2")
				_, err = os.ReadDir(d2)
				if !errors.Is(err, syscall.EIO) {
					t.Errorf("readdir of a directory whose IV is a link: %v, want EIO", err)
				}
				expectFail(t, "create in a directory whose IV is a link", os.WriteFile(filepath.Join(d2, "y"), []byte("y"), 0644))
				_, err = os.ReadFile(filepath.Join(d2, "x"))
				expectFail(t, "read in a directory whose IV is a link", err)

				// A long name whose sidecar slot holds a link: the
				// sidecar is written to a new file renamed over the
				// link, never through it (the outside tree is checked
				// below), and the long name works.
				must(t, os.WriteFile(filepath.Join(mnt, long), []byte("x"), 0644))
				if fi, err := os.Lstat(longSidecar); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("sidecar slot after the create: %v, %v; want the sidecar written over the link", fi, err)
				}
				if got, err := os.ReadFile(filepath.Join(mnt, long)); err != nil || string(got) != "x" {
					t.Errorf("long name created over a planted sidecar link reads %q, %v", got, err)
				}
			}

			// The links themselves can be renamed and removed: renameat2
			// and unlinkat act on the lower link, not on its target.
			must(t, os.Rename(f, filepath.Join(mnt, "f2")))
			must(t, os.Remove(filepath.Join(mnt, "f2")))
			must(t, os.Remove(d))
			alive(t, tm)
			requireUnchanged(t, out, before)
		})
	}
}

// TestHostileSwap is the swap race made deterministic: the kernel holds
// nodes for a directory and a file (O_PATH descriptors on the mount, used
// through *at calls and /proc/self/fd paths, so the kernel never looks
// them up again); then in LOWER the directory is moved outside and a
// symlink to it put in its place, and the file likewise. Every operation
// inside the directory and on the file reaches the daemon for a node whose
// lower path now crosses a symlink: it must fail (ELOOP) and leave the
// outside alone. No file of the mount may be open in the daemon then: a
// chmod, chown or utimes without a file handle goes through an open file
// of the node when there is one (Setattr), which is the very inode
// wherever LOWER has moved it (as a write through it would be), and
// resolves no path.
func TestHostileSwap(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			mnt := tm.mnt
			w := func(rel, s string) { must(t, os.WriteFile(filepath.Join(mnt, rel), []byte(s), 0644)) }
			w("keep", "keep")
			w("g", "file g")
			w("into", "to move into d")
			must(t, os.Mkdir(filepath.Join(mnt, "d"), 0755))
			w("d/victim", "victim")
			w("d/f", "file f")
			must(t, os.Mkdir(filepath.Join(mnt, "d", "sub"), 0755))
			w("d/sub/deep", "deep")

			mfd := opath(t, mnt, unix.O_DIRECTORY)
			dfd := opath(t, filepath.Join(mnt, "d"), unix.O_DIRECTORY)
			subfd := opath(t, filepath.Join(mnt, "d", "sub"), unix.O_DIRECTORY)
			gfd := opath(t, filepath.Join(mnt, "g"), 0)
			// Lower paths before the swap (names depend on d's IV).
			ld, lg := lowerPath(t, tm, "d"), lowerPath(t, tm, "g")
			// The files written above are still open in the daemon until
			// their RELEASE, which the kernel sends after close(2) has
			// returned: on a loaded machine, during the operations below.
			waitReleased(t, tm)

			out := outsideTree(t)
			must(t, os.Rename(ld, filepath.Join(out, "d-moved")))
			must(t, os.Symlink(filepath.Join(out, "d-moved"), ld))
			must(t, os.Rename(lg, filepath.Join(out, "g-moved")))
			must(t, os.Symlink(filepath.Join(out, "g-moved"), lg))
			ageTree(t, out)
			before := snapshot(t, out)

			var errs []string
			note := func(what string, err error) {
				if expectFail(t, what, err) != nil {
					errs = append(errs, fmt.Sprintf("%s: %v", what, err))
				}
			}
			// Inside the swapped directory.
			fd, err := unix.Openat(dfd, "created", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
			if err == nil {
				unix.Close(fd)
			}
			note("create in d", err)
			note("mkdir in d", unix.Mkdirat(dfd, "newdir", 0755))
			note("mknod in d", unix.Mknodat(dfd, "fifo", unix.S_IFIFO|0644, 0))
			note("symlink in d", unix.Symlinkat("target", dfd, "link"))
			note("unlink in d", unix.Unlinkat(dfd, "victim", 0))
			note("rmdir in d", unix.Unlinkat(dfd, "sub", unix.AT_REMOVEDIR))
			note("rename out of d", unix.Renameat(dfd, "f", mfd, "f-out"))
			note("rename into d", unix.Renameat(mfd, "into", dfd, "into"))
			note("rename within d", unix.Renameat(dfd, "f", dfd, "f-renamed"))
			note("link into d", unix.Linkat(mfd, "keep", dfd, "keep-link", 0))
			fd, err = unix.Openat(dfd, "f", unix.O_WRONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Write(fd, []byte("evil"))
				unix.Close(fd)
			}
			note("open for write in d", err)
			fd, err = unix.Openat(dfd, "victim", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Read(fd, make([]byte, 64))
				unix.Close(fd)
			}
			note("open for read in d", err)
			note("chmod in d", unix.Fchmodat(dfd, "f", 0600, 0))
			note("chown in d", unix.Fchownat(dfd, "f", 4321, 4321, 0))
			note("utimens in d", unix.UtimesNanoAt(dfd, "f", []unix.Timespec{unix.NsecToTimespec(7e9), unix.NsecToTimespec(8e9)}, 0))
			_, err = os.ReadDir(procPath(dfd))
			note("readdir of d", err)
			fd, err = unix.Openat(subfd, "deep", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Pwrite(fd, []byte("evil"), 0)
				unix.Close(fd)
			}
			note("open d/sub/deep", err)
			note("setxattr on d/sub", unix.Setxattr(procPath(subfd), "user.evil", []byte("x"), 0))
			note("removexattr on d/sub", unix.Removexattr(procPath(subfd), "user.sentinel"))
			note("chmod d/sub", os.Chmod(procPath(subfd), 0700))
			_, err = os.ReadDir(procPath(subfd))
			note("readdir of d/sub", err)

			// The swapped file, by its node (no open file: path-based
			// SETATTR, OPEN, xattrs).
			gp := procPath(gfd)
			_, err = os.ReadFile(gp)
			note("read g", err)
			note("write g", os.WriteFile(gp, []byte("evil"), 0644))
			note("truncate g", os.Truncate(gp, 1))
			note("chmod g", os.Chmod(gp, 0600))
			note("setxattr g", unix.Setxattr(gp, "user.evil", []byte("x"), 0))
			_, err = unix.Getxattr(gp, "user.sentinel", make([]byte, 64))
			note("getxattr g", err)
			// chown and utimens act on the lower link itself (no escape
			// either way): no error required.
			os.Chown(gp, 4321, 4321)
			unix.UtimesNanoAt(unix.AT_FDCWD, gp, []unix.Timespec{unix.NsecToTimespec(7e9), unix.NsecToTimespec(8e9)}, 0)

			// The error is ELOOP wherever the daemon met the link.
			loops := 0
			for _, e := range errs {
				if strings.HasSuffix(e, syscall.ELOOP.Error()) {
					loops++
				}
			}
			if loops == 0 {
				t.Errorf("no operation reported ELOOP:\n%s", strings.Join(errs, "\n"))
			}
			t.Logf("errors seen:\n%s", strings.Join(errs, "\n"))
			alive(t, tm)
			requireUnchanged(t, out, before)
		})
	}
}

// rawName is the lower name of an arbitrary byte string enciphered under
// dir IV iv as Encrypt would (which itself refuses such names).
func rawName(t *testing.T, tm *testMount, plain string, iv []byte) string {
	t.Helper()
	key := keys.Derive(tm.master, "names", nil, names.KeySize)
	block, err := aes.NewCipher(key)
	must(t, err)
	n := 16 - len(plain)%16
	padded := append([]byte(plain), bytes.Repeat([]byte{byte(n)}, n)...)
	return base64.RawURLEncoding.EncodeToString(eme.New(block).Encrypt(iv, padded))
}

// TestHostileNames plants lower names that are valid ciphertexts of names
// no directory entry can have ("a/b", "..", NUL, "" ...), short and through
// the long-name sidecar, as files and directories: listings hide them with
// a warning naming the lower entry, and no lookup reaches them. (That the
// name cipher refuses them is cipher/names' TestDecryptBadNames.)
func TestHostileNames(t *testing.T) {
	for _, v := range variants[:2] {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			mnt := tm.mnt
			must(t, os.WriteFile(filepath.Join(mnt, "keep"), []byte("keep"), 0644))
			must(t, os.Mkdir(filepath.Join(mnt, "sub"), 0755))
			must(t, os.WriteFile(filepath.Join(mnt, "sub", "ok"), []byte("ok"), 0644))
			bad := []string{"a/b", "/", "..", ".", "", "x\x00y", "../../etc/passwd", "../" + strings.Repeat("z", 200), strings.Repeat("q", 256)}
			var planted []string
			for _, dir := range []string{tm.lower, lowerPath(t, tm, "sub")} {
				iv, err := os.ReadFile(filepath.Join(dir, names.DirIVFile))
				must(t, err)
				for i, b := range bad {
					cName := rawName(t, tm, b, iv)
					if _, err := nameCipher(t, tm).Decrypt(cName, iv); err == nil {
						t.Fatalf("%q decrypts", b)
					}
					lower, long := names.Lower(cName)
					p := filepath.Join(dir, lower)
					if long {
						must(t, os.WriteFile(p+names.LongSuffix, []byte(cName), 0400))
					}
					if i%2 == 0 {
						must(t, os.WriteFile(p, []byte("planted"), 0644))
					} else {
						must(t, os.Mkdir(p, 0755))
					}
					planted = append(planted, lower)
				}
			}
			for dir, want := range map[string]string{mnt: "keep,sub", filepath.Join(mnt, "sub"): "ok"} {
				ents, err := os.ReadDir(dir)
				must(t, err)
				var got []string
				for _, e := range ents {
					got = append(got, e.Name())
				}
				if strings.Join(got, ",") != want {
					t.Errorf("%s lists %q, want %s", dir, got, want)
				}
			}
			log := tm.log.String()
			for _, l := range planted {
				if !strings.Contains(log, l) {
					t.Errorf("no warning naming planted %s", l)
				}
			}
			// Every name the kernel could ask for around them: ENOENT.
			for _, name := range []string{"a", "b", "x", "y", "etc", "passwd", "z", strings.Repeat("q", 255)} {
				for _, dir := range []string{mnt, filepath.Join(mnt, "sub")} {
					if _, err := os.Lstat(filepath.Join(dir, name)); !errors.Is(err, syscall.ENOENT) {
						t.Errorf("lookup %s in %s: %v, want ENOENT", name, dir, err)
					}
				}
			}
			alive(t, tm)
		})
	}
}

// heapGrowth runs f and returns how many bytes were allocated meanwhile
// (the daemon runs in this process).
func heapGrowth(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

// TestHostileSizes extends TestBadInput with absurd sizes: a file made
// sparse to a terabyte (valid header, and garbled header), a 1 GiB
// directory IV, a 1 GiB long-name sidecar, a 4095-byte symlink target of
// garbage. Each gives its error (or a hole's zeros) with bounded
// allocation in the daemon, and the volume keeps working.
func TestHostileSizes(t *testing.T) {
	const huge = 1 << 40
	const allocBound = 64 << 20
	for _, v := range variants[:2] {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			mnt := tm.mnt
			must(t, os.WriteFile(filepath.Join(mnt, "keep"), []byte("keep"), 0644))
			must(t, os.WriteFile(filepath.Join(mnt, "big"), bytes.Repeat([]byte("b"), 5000), 0644))
			must(t, os.WriteFile(filepath.Join(mnt, "bigbad"), bytes.Repeat([]byte("c"), 5000), 0644))
			must(t, os.Mkdir(filepath.Join(mnt, "ivdir"), 0755))
			must(t, os.WriteFile(filepath.Join(mnt, "ivdir", "f"), []byte("f"), 0644))
			must(t, os.WriteFile(filepath.Join(mnt, strings.Repeat("n", 200)), []byte("long"), 0644))
			must(t, os.Symlink("target", filepath.Join(mnt, "ln")))
			tm.unmountNow(t)

			must(t, os.Truncate(lowerPath(t, tm, "big"), huge))
			bb := lowerPath(t, tm, "bigbad")
			must(t, os.Truncate(bb, huge))
			fb, err := os.OpenFile(bb, os.O_WRONLY, 0)
			must(t, err)
			_, err = fb.WriteAt([]byte("XXXXXXXXXXXX"), 0)
			must(t, err)
			fb.Close()
			must(t, os.Truncate(filepath.Join(lowerPath(t, tm, "ivdir"), names.DirIVFile), 1<<30))
			sidecar := lowerPath(t, tm, strings.Repeat("n", 200)) + names.LongSuffix
			must(t, os.Truncate(sidecar, 1<<30))
			ln := lowerPath(t, tm, "ln")
			must(t, os.Remove(ln))
			must(t, os.Symlink(strings.Repeat("A", 4095), ln))

			tm.unmounted = false
			tm.mount(t)
			grew := heapGrowth(func() {
				fi, err := os.Stat(filepath.Join(mnt, "big"))
				must(t, err)
				if want := huge - int64(content.HeaderSize+content.TrailerSize); fi.Size() != want {
					t.Errorf("big: size %d, want %d", fi.Size(), want)
				}
				f, err := os.Open(filepath.Join(mnt, "big"))
				must(t, err)
				defer f.Close()
				buf := make([]byte, 1<<20)
				// Its first extent is intact (the second, the old tail
				// unit, now reads as a full extent: garbage, no error).
				if n, err := f.ReadAt(buf[:5000], 0); n != 5000 || !bytes.Equal(buf[:4096], bytes.Repeat([]byte("b"), 4096)) {
					t.Errorf("head of big: %d bytes, %v", n, err)
				}
				// Far out: holes read as zeros.
				for _, off := range []int64{fi.Size() - 1<<20, fi.Size() / 2} {
					n, err := f.ReadAt(buf, off)
					if n != len(buf) || err != nil || !content.IsZero(buf) {
						t.Errorf("big at %d: %d bytes, %v (zero: %v)", off, n, err, content.IsZero(buf[:n]))
					}
				}
				if n, err := f.ReadAt(buf, fi.Size()-10); n != 10 {
					t.Errorf("big at its end: %d bytes, %v", n, err)
				}
				// (Not os.ReadFile: it would size its buffer by the stat.)
				fb, err := os.Open(filepath.Join(mnt, "bigbad"))
				must(t, err)
				defer fb.Close()
				if _, err := fb.Read(buf); !errors.Is(err, syscall.EIO) {
					t.Errorf("bigbad: %v, want EIO", err)
				}
				if _, err := os.ReadDir(filepath.Join(mnt, "ivdir")); !errors.Is(err, syscall.EIO) {
					t.Errorf("directory with a 1 GiB IV: %v, want EIO", err)
				}
				ents, err := os.ReadDir(mnt)
				must(t, err)
				for _, e := range ents {
					if strings.HasPrefix(e.Name(), "nnn") {
						t.Errorf("entry with a 1 GiB sidecar is listed")
					}
				}
				if _, err := os.Readlink(filepath.Join(mnt, "ln")); !errors.Is(err, syscall.EIO) {
					t.Errorf("readlink of a 4095-byte garbage target: %v, want EIO", err)
				}
			})
			t.Logf("allocated %d KiB while reading the absurd files", grew>>10)
			if grew > allocBound {
				t.Errorf("allocated %d MiB, more than %d MiB", grew>>20, allocBound>>20)
			}
			alive(t, tm)
		})
	}
}

// TestNoOpenat2Fallback runs TestOps, the static hostile tree and the
// swapped directories on the path taken where the kernel has no openat2
// (or seccomp refuses it): lower paths walked one component at a time
// (openStepwise). The race against a swapping directory is
// TestNoOpenat2SwapRace.
func TestNoOpenat2Fallback(t *testing.T) {
	forceNoOpenat2(t)
	TestOps(t)
	TestHostileLowerSymlinks(t)
	TestHostileSwap(t)
	TestDeepHostileSwap(t)
}

// TestHostileDirectoryLoop: a lower directory that contains itself (here
// a bind mount of a/ at a/b/c; a lower filesystem that repeats inode
// numbers does the same) must give ELOOP, as the kernel gives natively
// for such an alias, and leave the daemon serving. Before, go-fuse's tree
// became a cycle and the next path walk through it grew without end
// until the kernel killed the daemon for memory.
func TestHostileDirectoryLoop(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a bind mount in LOWER")
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.mount(t)
			must(t, os.MkdirAll(filepath.Join(tm.mnt, "a", "b", "c"), 0755))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "a", "f"), []byte("f"), 0644))
			// The lower paths of a and a/b/c, found by inode number.
			lowerOf := func(p string) string {
				var st syscall.Stat_t
				must(t, syscall.Stat(filepath.Join(tm.mnt, p), &st))
				var found string
				filepath.Walk(tm.lower, func(q string, fi os.FileInfo, err error) error {
					if err == nil && fi.Sys().(*syscall.Stat_t).Ino == st.Ino {
						found = q
					}
					return nil
				})
				if found == "" {
					t.Fatalf("no lower object for %s", p)
				}
				return found
			}
			la, lc := lowerOf("a"), lowerOf("a/b/c")
			// A fresh mount over the looped LOWER: the kernel knows
			// nothing of a/b/c yet.
			tm.unmountNow(t)
			if err := syscall.Mount(la, lc, "", syscall.MS_BIND, ""); err != nil {
				t.Skipf("bind mount: %v", err)
			}
			t.Cleanup(func() { syscall.Unmount(lc, syscall.MNT_DETACH) })
			tm.unmounted = false
			tm.mount(t)

			for _, p := range []string{"a/b/c", "a/b/c/f", "a/b/c/b/c/f"} {
				var st syscall.Stat_t
				err := syscall.Lstat(filepath.Join(tm.mnt, p), &st)
				if err != syscall.ELOOP {
					t.Errorf("lstat %s through the loop: %v, want ELOOP", p, err)
				}
			}
			// A listing of a/b names c (its READDIRPLUS lookup of c is
			// refused the same way) and stays usable.
			if names, err := os.ReadDir(filepath.Join(tm.mnt, "a", "b")); err != nil || len(names) != 1 || names[0].Name() != "c" {
				t.Errorf("listing of a/b: %v, %v; want c", names, err)
			}
			if err := os.WriteFile(filepath.Join(tm.mnt, "a", "b", "c", "new"), nil, 0644); !errors.Is(err, syscall.ELOOP) {
				t.Errorf("create through the loop: %v, want ELOOP", err)
			}
			// The daemon still serves.
			b, err := os.ReadFile(filepath.Join(tm.mnt, "a", "f"))
			if err != nil || string(b) != "f" {
				t.Fatalf("after the loop: read a/f: %q, %v", b, err)
			}
			if !strings.Contains(tm.log.String(), "its own ancestor") {
				t.Errorf("no warning about the loop in the log:\n%s", tm.log.String())
			}
		})
	}
}
