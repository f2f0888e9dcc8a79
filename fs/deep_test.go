package fs

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// Deep trees. A path in the mounted view has no length limit of its own:
// programs reach any depth with *at calls from a directory descriptor (or
// chdir), each call's own path under PATH_MAX. The mount must go as deep
// as the native filesystem, although the lower path of a deep node, with
// encrypted names longer than the plaintext ones, passes PATH_MAX long
// before the plaintext path does.

// deepChain is a chain of directories, levels deep, with names of nameLen
// bytes: far longer than PATH_MAX as one path.
type deepChain struct {
	levels, nameLen int
}

var deepChains = []deepChain{{levels: 60, nameLen: 100}, {levels: 500, nameLen: 10}}

func (c deepChain) String() string { return fmt.Sprintf("%dx%d", c.levels, c.nameLen) }

// name is the directory name of level i (1-based).
func (c deepChain) name(i int) string { return fmt.Sprintf("%0*d", c.nameLen, i) }

// deepVariants are the mounts compared with the native directory: both
// ciphers, plaintext names, the twin, and an encrypted mount in mirror
// mode (whose twin directory must receive the deep tree too).
var deepVariants = append(append([]variant{}, variants...),
	variant{name: "plainnames", cipher: "aes-xts", keyBytes: 64, plaintextNames: true},
	variant{name: "mirror", cipher: "aes-xts", keyBytes: 64},
)

// openPath opens name in dir as an O_PATH directory descriptor, not
// following a symlink.
func openPath(dir int, name string) (int, error) {
	return unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// errStr is an errno for a transcript ("ok" for none).
func errStr(err error) string {
	if err == nil {
		return "ok"
	}
	if errno, ok := err.(syscall.Errno); ok {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

// listAt lists the directory name in dir, sorted, without "." and "..".
func listAt(dir int, name string) ([]string, error) {
	fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	list, err := f.Readdirnames(-1)
	sort.Strings(list)
	return list, err
}

// deepWalk builds chain c in the directory root and operates at its
// bottom (create, write, read, stat, rename, link, symlink, readlink,
// chmod, xattrs, mkdir, rmdir, unlink, listing, rename of a directory on
// the way down), then removes the tree with os.RemoveAll. It returns a
// transcript of every result, to compare with the native directory's;
// inspect, if set, runs on the finished tree before it is removed.
func deepWalk(t *testing.T, root string, c deepChain, inspect func()) string {
	t.Helper()
	var tr strings.Builder
	say := func(format string, args ...any) { fmt.Fprintf(&tr, format+"\n", args...) }

	top, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fds := []int{top}
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	for i := 1; i <= c.levels; i++ {
		err := unix.Mkdirat(fds[i-1], c.name(i), 0755)
		var fd int
		if err == nil {
			fd, err = openPath(fds[i-1], c.name(i))
		}
		if err != nil {
			say("mkdir level %d: %s", i, errStr(err))
			return tr.String()
		}
		fds = append(fds, fd)
	}
	say("mkdir %d levels: ok", c.levels)
	bottom, mid := fds[c.levels], fds[c.levels/2]

	data := bytes.Repeat([]byte("deep tree content "), 600) // spans extents
	fd, err := unix.Openat(bottom, "file", unix.O_CREAT|unix.O_EXCL|unix.O_RDWR|unix.O_CLOEXEC, 0640)
	say("create: %s", errStr(err))
	if err == nil {
		n, err := unix.Write(fd, data)
		say("write: %d %s", n, errStr(err))
		unix.Close(fd)
	}
	stat := func(dir int, name string) string {
		var st unix.Stat_t
		if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errStr(err)
		}
		s := fmt.Sprintf("mode %#o nlink %d", st.Mode, st.Nlink)
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			s += fmt.Sprintf(" size %d", st.Size)
		}
		return s
	}
	read := func(dir int, name string) string {
		fd, err := unix.Openat(dir, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return errStr(err)
		}
		defer unix.Close(fd)
		buf := make([]byte, 2*len(data))
		n, err := preadFull(fd, buf, 0)
		if err != nil {
			return errStr(err)
		}
		return fmt.Sprintf("%d bytes, as written: %v", n, bytes.Equal(buf[:n], data[:min(n, len(data))]))
	}
	say("stat file: %s", stat(bottom, "file"))
	say("read file: %s", read(bottom, "file"))
	say("rename file renamed: %s", errStr(unix.Renameat(bottom, "file", bottom, "renamed")))
	say("stat file: %s", stat(bottom, "file"))
	say("link renamed hard: %s", errStr(unix.Linkat(bottom, "renamed", bottom, "hard", 0)))
	say("stat hard: %s", stat(bottom, "hard"))
	say("chmod hard: %s", errStr(unix.Fchmodat(bottom, "hard", 0600, 0)))
	say("stat renamed: %s", stat(bottom, "renamed"))
	say("symlink: %s", errStr(unix.Symlinkat("../../some/target", bottom, "link")))
	buf := make([]byte, 256)
	n, err := unix.Readlinkat(bottom, "link", buf)
	say("readlink: %q %s", buf[:max(n, 0)], errStr(err))
	say("stat link: %s", stat(bottom, "link"))
	if fd, err := unix.Openat(bottom, "hard", unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		say("open hard: %s", errStr(err))
	} else {
		say("setxattr: %s", errStr(unix.Fsetxattr(fd, "user.deep", []byte("value"), 0)))
		v := make([]byte, 64)
		n, err := unix.Fgetxattr(fd, "user.deep", v)
		say("getxattr: %q %s", v[:max(n, 0)], errStr(err))
		say("ftruncate: %s", errStr(unix.Ftruncate(fd, 100)))
		unix.Close(fd)
	}
	say("stat hard: %s", stat(bottom, "hard"))
	say("mkdir sub: %s", errStr(unix.Mkdirat(bottom, "sub", 0750)))
	say("stat sub: %s", stat(bottom, "sub"))
	say("mknod fifo: %s", errStr(unix.Mkfifoat(bottom, "fifo", 0644)))
	list, err := listAt(bottom, ".")
	say("list: %q %s", list, errStr(err))
	say("rmdir sub: %s", errStr(unix.Unlinkat(bottom, "sub", unix.AT_REMOVEDIR)))
	say("unlink link: %s", errStr(unix.Unlinkat(bottom, "link", 0)))
	say("unlink fifo: %s", errStr(unix.Unlinkat(bottom, "fifo", 0)))
	say("unlink renamed: %s", errStr(unix.Unlinkat(bottom, "renamed", 0)))
	say("stat hard: %s", stat(bottom, "hard"))
	// Across the tree: a file from the bottom to the middle and back, a
	// directory halfway down renamed (the bottom's path changes under its
	// open descriptor).
	say("rename hard up: %s", errStr(unix.Renameat(bottom, "hard", mid, "up")))
	say("stat up: %s", stat(mid, "up"))
	say("rename up down: %s", errStr(unix.Renameat(mid, "up", bottom, "down")))
	k := c.levels / 2
	say("rename level %d: %s", k+1, errStr(unix.Renameat(fds[k], c.name(k+1), fds[k], "moved")))
	say("stat down: %s", stat(bottom, "down"))
	say("read down: %s", read(bottom, "down"))
	say("create again: %s", errStr(unix.Mkdirat(bottom, "again", 0755)))
	list, err = listAt(bottom, ".")
	say("list: %q %s", list, errStr(err))

	if inspect != nil {
		inspect()
	}
	say("remove tree: %s", errStr(os.RemoveAll(filepath.Join(root, c.name(1)))))
	list, err = listAt(top, ".")
	say("list root: %q %s", list, errStr(err))
	return tr.String()
}

// firstDiff shows the first line where the transcript got differs from the
// native one, and got from there on.
func firstDiff(native, got, name string) string {
	nl, gl := strings.Split(native, "\n"), strings.Split(got, "\n")
	for i := range gl {
		if i >= len(nl) || nl[i] != gl[i] {
			ref := ""
			if i < len(nl) {
				ref = nl[i]
			}
			return fmt.Sprintf("native: %s\n%s: %s\n%s from there:\n%s", ref, name, gl[i], name, strings.Join(gl[i:], "\n"))
		}
	}
	return "native transcript is longer:\n" + strings.Join(nl[len(gl):], "\n")
}

// lowerChain follows the only subdirectory of each lower directory from
// dir down (metadata files aside) and returns their names, top first.
func lowerChain(t *testing.T, dir string) []string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var chain []string
	for {
		list, err := listAt(fd, ".")
		if err != nil {
			unix.Close(fd)
			t.Fatalf("lower level %d: %v", len(chain), err)
		}
		next := ""
		for _, n := range list {
			var st unix.Stat_t
			if unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
				next = n
			}
		}
		if next == "" {
			unix.Close(fd)
			return chain
		}
		nfd, err := openPath(fd, next)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("lower level %d: %v", len(chain)+1, err)
		}
		fd = nfd
		chain = append(chain, next)
	}
}

// openChain opens dir/chain[0]/.../chain[len-1] as O_PATH, level by level.
func openChain(t *testing.T, dir string, chain []string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	for i, n := range chain {
		next, err := openPath(fd, n)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("level %d: %v", i+1, err)
		}
		fd = next
	}
	return fd
}

// TestDeepPaths builds trees far deeper than PATH_MAX on every variant
// and on a native directory, works at the bottom and removes them: the
// transcripts must be the same. Each lower tree is checked to be deeper
// than PATH_MAX too (with encrypted names it is longer than the
// plaintext one); in mirror mode the twin directory must hold the tree.
func TestDeepPaths(t *testing.T) {
	for _, c := range deepChains {
		t.Run(c.String(), func(t *testing.T) {
			native := deepWalk(t, t.TempDir(), c, nil)
			if !strings.Contains(native, fmt.Sprintf("mkdir %d levels: ok", c.levels)) {
				t.Fatalf("the native directory cannot build the chain:\n%s", native)
			}
			for _, v := range deepVariants {
				t.Run(v.name, func(t *testing.T) {
					tm := newVolume(t, v)
					mirror := ""
					if v.name == "mirror" {
						mirror = t.TempDir()
						tm.mount(t, func(o *Options) { o.Mirror = mirror })
					} else {
						tm.mount(t)
					}
					inspect := func() {
						for _, dir := range []string{tm.lower, mirror} {
							if dir == "" {
								continue
							}
							chain := lowerChain(t, dir)
							levels, n := len(chain), len(strings.Join(chain, "/"))
							// The bottom holds one more directory ("again").
							if levels != c.levels+1 || n < unix.PathMax {
								t.Errorf("lower tree %s: %d levels, path %d bytes; want %d levels and more than PATH_MAX", dir, levels, n, c.levels+1)
							}
						}
					}
					got := deepWalk(t, tm.mnt, c, inspect)
					if got != native {
						t.Errorf("transcript differs from the native directory's:\n%s\nnative:\n%s\nlog:\n%s", firstDiff(native, got, v.name), native, tm.log.String())
					}
				})
			}
		})
	}
}

// TestDeepPathsGoOS runs the os package's own tests of RemoveAll, MkdirAll
// and long paths with TMPDIR on each mount; among them TestRemoveAllLongPath
// is a real program's deep tree (41 names of 100 bytes, built with chdir
// and relative paths) removed by os.RemoveAll. (All of "go test os" passes
// on the mounts too, but for TestNonpollableDeadline: a file on any FUSE
// mount can be polled, one on ext4 cannot; and it takes minutes.)
func TestDeepPathsGoOS(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtimeGOROOT(), "bin", "go")
		if _, err := os.Stat(goBin); err != nil {
			t.Skip("skipping: no go command to build the os package's tests")
		}
	}
	requireFUSE(t)
	bin := filepath.Join(t.TempDir(), "os.test")
	if out, err := exec.Command(goBin, "test", "-c", "-o", bin, "os").CombinedOutput(); err != nil {
		t.Fatalf("go test -c os: %v\n%s", err, out)
	}
	srcOS := filepath.Join(runtimeGOROOT(), "src", "os")
	for _, v := range deepVariants[:4] {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			tmp := filepath.Join(tm.mnt, "tmp")
			must(t, os.Mkdir(tmp, 0755))
			// The test binary starts outside the mount; only TMPDIR is on it.
			cmd := exec.Command(bin, "-test.run", "^(TestRemoveAll.*|TestMkdirAll.*|TestLongPath|TestLongSymlink)$", "-test.short", "-test.v", "-test.count=1")
			cmd.Dir = srcOS
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			out, err := cmd.CombinedOutput()
			if err != nil || !bytes.Contains(out, []byte("--- PASS: TestRemoveAllLongPath")) {
				t.Errorf("os.test (RemoveAll, MkdirAll and long-path tests) with TMPDIR on the mount: %v\n%s\nlog:\n%s", err, out, tm.log.String())
			}
		})
	}
}

// TestOpenBeneathChunks resolves a path in pieces of every size: the
// right object is opened whatever the cut, and a directory on the way
// replaced by a symlink out of the tree gives ELOOP for every cut (the
// first component of a piece is resolved under the same rules as the
// others), with nothing created outside.
func TestOpenBeneathChunks(t *testing.T) {
	base := t.TempDir()
	root, out := filepath.Join(base, "root"), filepath.Join(base, "out")
	must(t, os.Mkdir(out, 0755))
	var comps []string
	for i := 0; i < 8; i++ {
		comps = append(comps, fmt.Sprintf("d%d", i))
	}
	must(t, os.MkdirAll(filepath.Join(root, filepath.Join(comps...)), 0755))
	must(t, os.WriteFile(filepath.Join(root, filepath.Join(comps...), "f"), []byte("bottom"), 0644))
	rootFd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(rootFd)
	rel := strings.Join(comps, "/") + "/f"

	open := func(chunk int, flags int) (string, error) {
		fd, err := openBeneathIn(rootFd, rel, flags, 0644, chunk)
		if err != nil {
			return "", err
		}
		defer unix.Close(fd)
		buf := make([]byte, 64)
		n, err := unix.Pread(fd, buf, 0)
		return string(buf[:max(n, 0)]), err
	}
	for _, fallback := range []bool{false, true} {
		old := noOpenat2.Swap(fallback)
		for chunk := 2; chunk <= len(rel)+1; chunk++ {
			if got, err := open(chunk, unix.O_RDONLY); err != nil || got != "bottom" {
				t.Errorf("fallback %v, pieces of %d bytes: read %q, %v; want \"bottom\"", fallback, chunk, got, err)
			}
		}
		noOpenat2.Store(old)
	}
	if _, err := open(1, unix.O_RDONLY); err != syscall.ENAMETOOLONG {
		t.Errorf("pieces shorter than a component: %v, want ENAMETOOLONG", err)
	}

	for k := range comps {
		// comps[k] becomes a symlink to a copy of itself outside root;
		// every other k runs without openat2 (openStepwise).
		fallback := k%2 == 1
		old := noOpenat2.Swap(fallback)
		dir := filepath.Join(root, filepath.Join(comps[:k+1]...))
		moved := filepath.Join(out, comps[k])
		must(t, os.Rename(dir, moved))
		must(t, os.Symlink(moved, dir))
		for chunk := 2; chunk <= len(rel)+1; chunk++ {
			if got, err := open(chunk, unix.O_RDONLY); err != syscall.ELOOP {
				t.Errorf("%s a symlink, pieces of %d bytes (fallback %v): read %q, %v; want ELOOP", comps[k], chunk, fallback, got, err)
			}
			fd, err := openBeneathIn(rootFd, strings.Join(comps, "/")+"/new", unix.O_CREAT|unix.O_WRONLY, 0644, chunk)
			if err == nil {
				unix.Close(fd)
			}
			if err != syscall.ELOOP {
				t.Errorf("%s a symlink, pieces of %d bytes (fallback %v): create %v; want ELOOP", comps[k], chunk, fallback, err)
			}
		}
		noOpenat2.Store(old)
		if _, err := os.Lstat(filepath.Join(moved, filepath.Join(comps[k+1:]...), "new")); !os.IsNotExist(err) {
			t.Fatalf("a file was created outside the tree: %v", err)
		}
		must(t, os.Remove(dir))
		must(t, os.Rename(moved, dir))
	}
}

// TestDeepHostileSwap swaps a lower directory deep in a tree longer than
// PATH_MAX (past the first piece of a path) for a symlink to its content
// moved outside LOWER: the operations at the bottom, reached through nodes
// the kernel still holds, fail with ELOOP and the outside is unchanged.
func TestDeepHostileSwap(t *testing.T) {
	c := deepChains[0]
	for _, v := range deepVariants[:4] {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			must(t, os.WriteFile(filepath.Join(tm.mnt, "keep"), []byte("keep"), 0644))
			var plain []string
			for i := 1; i <= c.levels; i++ {
				plain = append(plain, c.name(i))
				fd := openChain(t, tm.mnt, plain[:i-1])
				err := unix.Mkdirat(fd, c.name(i), 0755)
				unix.Close(fd)
				must(t, err)
			}
			bottom := openChain(t, tm.mnt, plain)
			defer unix.Close(bottom)
			fd, err := unix.Openat(bottom, "victim", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
			must(t, err)
			unix.Close(fd)

			chain := lowerChain(t, tm.lower)
			const k = 50 // levels 1..k-1 are longer than one piece
			if n := len(strings.Join(chain[:k-1], "/")); n <= maxPathArg {
				t.Fatalf("the lower path above the swap is %d bytes: too short to need pieces", n)
			}
			out := outsideTree(t)
			parent := openChain(t, tm.lower, chain[:k-1])
			defer unix.Close(parent)
			outFd, err := unix.Open(out, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			must(t, err)
			defer unix.Close(outFd)
			must(t, unix.Renameat(parent, chain[k-1], outFd, "moved"))
			must(t, unix.Symlinkat(filepath.Join(out, "moved"), parent, chain[k-1]))
			ageTree(t, out)
			before := snapshot(t, out)

			fail := func(what string, err error) {
				if !errors.Is(err, syscall.ELOOP) {
					t.Errorf("%s at the bottom: %v, want ELOOP", what, err)
				}
			}
			fd, err = unix.Openat(bottom, "created", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
			if err == nil {
				unix.Close(fd)
			}
			fail("create", err)
			fd, err = unix.Openat(bottom, "victim", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err == nil {
				unix.Write(fd, []byte("evil"))
				unix.Close(fd)
			}
			fail("open", err)
			fail("mkdir", unix.Mkdirat(bottom, "newdir", 0755))
			fail("unlink", unix.Unlinkat(bottom, "victim", 0))
			fail("rename", unix.Renameat(bottom, "victim", bottom, "renamed"))
			_, err = os.ReadDir(procPath(bottom))
			fail("readdir", err)
			fail("setxattr", unix.Setxattr(procPath(bottom), "user.evil", []byte("x"), 0))
			alive(t, tm)
			requireUnchanged(t, out, before)
		})
	}
}
