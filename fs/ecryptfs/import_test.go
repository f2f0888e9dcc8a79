package ecryptfs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
)

const testPassphrase = "fs/ecryptfs test passphrase"

// plainTree is what lowerTree encrypts: path -> content ("" for a
// directory when the path ends in "/", "->target" for a symlink).
var plainTree = []struct {
	path, content string
	mode          os.FileMode
}{
	{"a.txt", "hello\n", 0o640},
	{"empty", "", 0o600},
	{"dir/", "", 0o750},
	{"dir/big", strings.Repeat("0123456789abcdef", 1000), 0o644},
	{"dir/sub/", "", 0o700},
	{"dir/sub/ünï cødé", "x", 0o755},
	{"link", "->dir/big", 0o777},
	{"dangling", "->nowhere/at all", 0o777},
}

var testMtime = time.Date(2021, 3, 4, 5, 6, 7, 8, time.UTC)

// lowerTree writes an eCryptfs lower tree the way the kernel lays it out
// (cipher/ecryptfs's writer, checked against kernel-written data there),
// with FNEK names when fnek, a hard link, an xattr, and given extras.
func lowerTree(t *testing.T, fnek bool) (string, *ecryptfs.Keyring) {
	t.Helper()
	root := t.TempDir()
	key, _ := ecryptfs.DeriveKey(testPassphrase, ecryptfs.DefaultSalt)
	nk, _ := ecryptfs.DeriveKey(testPassphrase, ecryptfs.FNEKSalt)
	kr := ecryptfs.NewKeyring()
	kr.Add(key)
	kr.Add(nk)
	enc := func(p string) string {
		if !fnek {
			return p
		}
		var parts []string
		for _, c := range strings.Split(p, "/") {
			parts = append(parts, ecryptfs.EncryptName(c, nk, 16))
		}
		return strings.Join(parts, "/")
	}
	for _, e := range plainTree {
		lp := filepath.Join(root, enc(strings.TrimSuffix(e.path, "/")))
		switch {
		case strings.HasSuffix(e.path, "/"):
			must(t, os.Mkdir(lp, e.mode))
			defer os.Chtimes(lp, testMtime, testMtime) // after the children
		case strings.HasPrefix(e.content, "->"):
			// The kernel encrypts a link target whole, slashes and all,
			// as one name (ecryptfs_symlink).
			target := e.content[2:]
			if fnek {
				target = ecryptfs.EncryptName(target, nk, 16)
			}
			must(t, os.Symlink(target, lp))
			must(t, unix.UtimesNanoAt(unix.AT_FDCWD, lp, []unix.Timespec{unix.NsecToTimespec(testMtime.UnixNano()), unix.NsecToTimespec(testMtime.UnixNano())}, unix.AT_SYMLINK_NOFOLLOW))
		default:
			lower, _, err := ecryptfs.EncryptFile([]byte(e.content), key, ecryptfs.DefaultSalt, ecryptfs.WriteOptions{})
			must(t, err)
			must(t, os.WriteFile(lp, lower, e.mode))
			must(t, os.Chmod(lp, e.mode))
			must(t, os.Chtimes(lp, testMtime, testMtime))
		}
	}
	must(t, os.Link(filepath.Join(root, enc("a.txt")), filepath.Join(root, enc("hard-a"))))
	// eCryptfs keeps fifos and device nodes as plain lower nodes.
	must(t, unix.Mkfifo(filepath.Join(root, enc("pipe")), 0o640))
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(root, enc("pipe")), []unix.Timespec{unix.NsecToTimespec(testMtime.UnixNano()), unix.NsecToTimespec(testMtime.UnixNano())}, 0))
	if err := unix.Setxattr(filepath.Join(root, enc("a.txt")), "user.colour", []byte("blue"), 0); err != nil {
		t.Logf("no user xattrs on %s: %v", root, err)
	}
	return root, kr
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot records every byte and inode change time of a tree, to show
// that the source was not written.
func snapshot(t *testing.T, root string) string {
	var b strings.Builder
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		must(t, err)
		fi, _ := os.Lstat(p)
		st := fi.Sys().(*syscall.Stat_t)
		fmt.Fprintf(&b, "%s %v %v %v", p, fi.Mode(), st.Ctim, st.Mtim)
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			fmt.Fprintf(&b, " %x", c)
		}
		b.WriteByte('\n')
		return nil
	})
	return b.String()
}

// checkImported compares dst with plainTree.
func checkImported(t *testing.T, dst string) {
	t.Helper()
	for _, e := range plainTree {
		p := filepath.Join(dst, strings.TrimSuffix(e.path, "/"))
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", e.path, err)
			continue
		}
		switch {
		case strings.HasSuffix(e.path, "/"):
			if !fi.IsDir() || fi.Mode().Perm() != e.mode {
				t.Errorf("%s: %v, want a directory %v", e.path, fi.Mode(), e.mode)
			}
		case strings.HasPrefix(e.content, "->"):
			if got, _ := os.Readlink(p); got != e.content[2:] {
				t.Errorf("%s: target %q, want %q", e.path, got, e.content[2:])
			}
		default:
			got, _ := os.ReadFile(p)
			if string(got) != e.content || fi.Mode().Perm() != e.mode {
				t.Errorf("%s: %d bytes mode %v, want %d bytes mode %v", e.path, len(got), fi.Mode().Perm(), len(e.content), e.mode)
			}
		}
		if !fi.ModTime().Equal(testMtime) {
			t.Errorf("%s: mtime %v, want %v", e.path, fi.ModTime(), testMtime)
		}
	}
	a, err1 := os.Stat(filepath.Join(dst, "a.txt"))
	h, err2 := os.Stat(filepath.Join(dst, "hard-a"))
	if err1 != nil || err2 != nil || !os.SameFile(a, h) {
		t.Errorf("hard-a is not a hard link of a.txt (%v %v)", err1, err2)
	}
	if fi, err := os.Lstat(filepath.Join(dst, "pipe")); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 || fi.Mode().Perm() != 0o640 {
		t.Errorf("pipe: %v, %v; want a fifo of mode 0640", fi, err)
	}
	buf := make([]byte, 16)
	if n, err := unix.Getxattr(filepath.Join(dst, "a.txt"), "user.colour", buf); err == nil && string(buf[:n]) != "blue" {
		t.Errorf("xattr user.colour = %q", buf[:n])
	}
}

func TestImportToDirectory(t *testing.T) {
	for _, fnek := range []bool{true, false} {
		t.Run(fmt.Sprintf("fnek=%v", fnek), func(t *testing.T) {
			src, kr := lowerTree(t, fnek)
			before := snapshot(t, src)
			dst := t.TempDir()
			journal := filepath.Join(t.TempDir(), "journal")
			var calls int
			rep, err := Import(src, kr, dst, ImportOptions{Journal: journal, Progress: func(Progress) error { calls++; return nil }})
			if err != nil {
				t.Fatalf("import: %v (%+v)", err, rep.Failures)
			}
			checkImported(t, dst)
			if rep.Files != 4 || rep.Special != 1 || rep.HardLinks != 1 || rep.Symlinks != 2 || rep.Dirs != 2 || calls != rep.Entries {
				t.Errorf("report %+v, %d progress calls", rep, calls)
			}
			if after := snapshot(t, src); after != before {
				t.Errorf("the source changed:\n%s\n%s", before, after)
			}
			// Run again: everything is in the journal, nothing is copied.
			rep, err = Import(src, kr, dst, ImportOptions{Journal: journal})
			if err != nil || rep.Bytes != 0 || rep.Resumed != rep.Entries-rep.Dirs {
				t.Errorf("second run: %v, %+v", err, rep)
			}
			checkImported(t, dst)
		})
	}
}

// An import stopped half-way resumes from its journal and ends with the
// same tree.
func TestImportResume(t *testing.T) {
	src, kr := lowerTree(t, true)
	dst := t.TempDir()
	journal := filepath.Join(t.TempDir(), "journal")
	stop := errors.New("interrupted")
	_, err := Import(src, kr, dst, ImportOptions{Journal: journal, Progress: func(p Progress) error {
		if p.Entries == 4 {
			return stop
		}
		return nil
	}})
	if !errors.Is(err, stop) {
		t.Fatalf("first run: %v", err)
	}
	j, _ := os.ReadFile(journal)
	if n := strings.Count(string(j), "\n"); n == 0 || n >= 9 {
		t.Fatalf("journal after the interruption has %d entries", n)
	}
	rep, err := Import(src, kr, dst, ImportOptions{Journal: journal})
	if err != nil {
		t.Fatalf("resumed run: %v %+v", err, rep.Failures)
	}
	if rep.Resumed == 0 {
		t.Errorf("resumed run redid everything: %+v", rep)
	}
	checkImported(t, dst)
}

// A truncated and a corrupt lower file, and a name that cannot be
// decrypted, fail alone: everything else is imported.
func TestImportDamagedSource(t *testing.T) {
	src, kr := lowerTree(t, false)
	big := filepath.Join(src, "dir", "big")
	fi, _ := os.Stat(big)
	must(t, os.Truncate(big, fi.Size()-4096))
	must(t, os.WriteFile(filepath.Join(src, "not-ecryptfs"), bytes.Repeat([]byte{1}, 9000), 0o644))
	other, _ := ecryptfs.DeriveKey("another passphrase", ecryptfs.FNEKSalt)
	must(t, os.WriteFile(filepath.Join(src, ecryptfs.EncryptName("foreign", other, 16)), nil, 0o644))
	dst := t.TempDir()
	rep, err := Import(src, kr, dst, ImportOptions{Journal: filepath.Join(t.TempDir(), "j")})
	if !errors.Is(err, ErrSomeFailed) || rep.Failed != 3 {
		t.Fatalf("got %v, %d failures, want 3: %+v", err, rep.Failed, rep.Failures)
	}
	msgs := fmt.Sprint(rep.Failures)
	for _, want := range []string{"truncated", "no eCryptfs marker", "wrong passphrase"} {
		if !strings.Contains(msgs, want) {
			t.Errorf("failures %s do not say %q", msgs, want)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "dir", "big")); !os.IsNotExist(err) {
		t.Errorf("the truncated file left a partial copy: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(dst, "a.txt")); string(got) != "hello\n" {
		t.Errorf("a.txt not imported beside the damaged files")
	}
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse on this machine: FUSE mount tests cannot run")
	}
	if os.Geteuid() != 0 {
		t.Skip("not root: the import test mounts FUSE in-process")
	}
}

// A journal line cut short by a crash does not count: "ok\tdir/bi" must
// not mark anything done, whole lines must.
func TestJournalCutLine(t *testing.T) {
	j := filepath.Join(t.TempDir(), "journal")
	must(t, os.WriteFile(j, []byte("ok\ta.txt\nok\tline\\nwith newline\nok\tdir/bi"), 0o600))
	done, err := loadJournal(j)
	must(t, err)
	if len(done) != 2 || !done["a.txt"] || !done["line\nwith newline"] || done["dir/bi"] {
		t.Fatalf("journal read as %v", done)
	}
}
