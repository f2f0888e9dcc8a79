package fs

// Fault injection (issue 6, item 4): the lower filesystem read-only, full,
// failing with EIO, or changed behind the mount's back. Every fault runs on
// the xts, cbc and twin mounts and, where it means something, on a plain
// directory ("native"); the application must see the same errno on the
// encrypted mounts as on the twin, and afterwards the config, every other
// file and the tree must be intact and the mount must still work. Each test
// logs a table of the errnos it saw.
//
// The faults that need a separate daemon process (out of descriptors, a
// client killed mid-write) are in cmd/twincrypt/faults_test.go.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	gofs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/fs/fsck"
)

// faultTarget is one place a fault test runs: a mount of one variant, or a
// plain directory ("native") for comparison.
type faultTarget struct {
	name string
	// dir is where the application works.
	dir string
	// backing is the real directory below everything (the volume's lower
	// directory before it was moved under a bind mount or a FUSE layer):
	// the place to check the config and run fsck from.
	backing string
	tm      *testMount // nil for native
	conf    []byte     // the config file at the start (crypt only)
}

func (ft *faultTarget) crypt() bool { return ft.tm != nil && ft.tm.cfg != nil }

// faultTargets makes a native directory (if native) and a volume of each
// variant. prep, if not nil, gets each fresh lower directory (the native
// one too) and returns the directory to use in its place: the mount's
// LOWER, or for native the directory the application works in.
func faultTargets(t *testing.T, native bool, prep func(t *testing.T, name, lower string) string, mutate ...func(*Options)) []*faultTarget {
	t.Helper()
	requireFUSE(t)
	var out []*faultTarget
	if native {
		dir := filepath.Join(t.TempDir(), "native")
		must(t, os.Mkdir(dir, 0755))
		ft := &faultTarget{name: "native", dir: dir, backing: dir}
		if prep != nil {
			ft.dir = prep(t, "native", dir)
		}
		out = append(out, ft)
	}
	for _, v := range variants {
		tm := newVolume(t, v)
		ft := &faultTarget{name: v.name, backing: tm.lower, tm: tm}
		if v.cipher != "" {
			b, err := os.ReadFile(filepath.Join(tm.lower, config.FileName))
			must(t, err)
			ft.conf = b
		}
		if prep != nil {
			tm.lower = prep(t, v.name, tm.lower)
		}
		tm.mount(t, mutate...)
		ft.dir = tm.mnt
		out = append(out, ft)
	}
	return out
}

// faultErrno is the errno behind err (0 for nil; EPROTO for an error that
// is not a system call error, so that it shows as a difference).
func faultErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return e
	}
	return syscall.EPROTO
}

func faultErrnoName(e syscall.Errno) string {
	if e == 0 {
		return "ok"
	}
	if n := unix.ErrnoName(e); n != "" {
		return n
	}
	return fmt.Sprintf("errno%d", int(e))
}

// faultTable records the errno of each case on each target.
type faultTable struct {
	mu      sync.Mutex
	cases   []string
	targets []string
	got     map[string]map[string]syscall.Errno
}

func newFaultTable(targets []*faultTarget) *faultTable {
	et := &faultTable{got: map[string]map[string]syscall.Errno{}}
	for _, ft := range targets {
		et.targets = append(et.targets, ft.name)
	}
	return et
}

func (et *faultTable) set(c, target string, err error) syscall.Errno {
	et.mu.Lock()
	defer et.mu.Unlock()
	if et.got[c] == nil {
		et.got[c] = map[string]syscall.Errno{}
		et.cases = append(et.cases, c)
	}
	e := faultErrno(err)
	et.got[c][target] = e
	return e
}

func (et *faultTable) get(c, target string) (syscall.Errno, bool) {
	et.mu.Lock()
	defer et.mu.Unlock()
	e, ok := et.got[c][target]
	return e, ok
}

// log prints the table.
func (et *faultTable) log(t *testing.T) {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%-28s", "case")
	for _, n := range et.targets {
		fmt.Fprintf(&b, " %-9s", n)
	}
	for _, c := range et.cases {
		fmt.Fprintf(&b, "\n%-28s", c)
		for _, n := range et.targets {
			s := "-"
			if e, ok := et.got[c][n]; ok {
				s = faultErrnoName(e)
			}
			fmt.Fprintf(&b, " %-9s", s)
		}
	}
	t.Logf("errnos seen by the application:\n%s", b.String())
}

// agree checks that every target of the table saw the errno of ref for
// each case, except those listed in except (case -> targets).
func (et *faultTable) agree(t *testing.T, ref string, except map[string][]string) {
	t.Helper()
	for _, c := range et.cases {
		want, ok := et.get(c, ref)
		if !ok {
			continue
		}
	next:
		for _, n := range et.targets {
			for _, x := range except[c] {
				if x == n {
					continue next
				}
			}
			if got, ok := et.get(c, n); ok && got != want {
				t.Errorf("%s: %s gives %s, %s gives %s", c, n, faultErrnoName(got), ref, faultErrnoName(want))
			}
		}
	}
}

// faultData is the deterministic content of a test file.
func faultData(name string, n int) []byte {
	r := rand.New(rand.NewChaCha8([32]byte(sha256.Sum256([]byte(name)))))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// faultLongName encrypts to a long name (sidecar) on the crypt mounts.
var faultLongName = "long-" + strings.Repeat("n", 200)

// faultPopulate writes a small tree of every kind of entry into dir.
func faultPopulate(t *testing.T, dir string) {
	t.Helper()
	for _, d := range []string{"sub", "sub/deep", "empty"} {
		must(t, os.Mkdir(filepath.Join(dir, d), 0755))
	}
	for name, size := range map[string]int{
		"a.txt":       1000,
		"b.bin":       3*4096 + 123,
		"sub/c.txt":   5000,
		"sub/deep/d":  4096,
		"zero":        0,
		faultLongName: 300,
	} {
		must(t, os.WriteFile(filepath.Join(dir, name), faultData(name, size), 0644))
	}
	must(t, os.Symlink("a.txt", filepath.Join(dir, "link")))
	must(t, unix.Setxattr(filepath.Join(dir, "a.txt"), "user.k", []byte("xattr value"), 0))
}

// faultSnapshot describes every entry below dir (names, types, modes,
// sizes, content hashes, link targets, the user.k xattr), skipping the
// names in skip (relative paths) and, for a lower directory, the config.
func faultSnapshot(t *testing.T, dir string, skip ...string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(dir, p)
		if err != nil {
			snap[rel] = "walk error: " + faultErrnoName(faultErrno(err))
			return nil
		}
		if rel == "." {
			return nil
		}
		for _, s := range skip {
			if rel == s {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
		}
		fi, err := os.Lstat(p)
		if err != nil {
			snap[rel] = "lstat: " + faultErrnoName(faultErrno(err))
			return nil
		}
		switch {
		case fi.IsDir():
			snap[rel] = fmt.Sprintf("dir %v", fi.Mode())
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			snap[rel] = fmt.Sprintf("link %q %s", target, faultErrnoName(faultErrno(err)))
		default:
			b, err := os.ReadFile(p)
			x := make([]byte, 256)
			n, xerr := unix.Lgetxattr(p, "user.k", x)
			snap[rel] = fmt.Sprintf("file %v size %d read %s sha %x xattr %q/%s",
				fi.Mode(), fi.Size(), faultErrnoName(faultErrno(err)), sha256.Sum256(b), x[:max(n, 0)], faultErrnoName(faultErrno(xerr)))
		}
		return nil
	})
	must(t, err)
	return snap
}

func faultCompareSnap(t *testing.T, what string, before, after map[string]string) {
	t.Helper()
	var keys []string
	for k := range before {
		keys = append(keys, k)
	}
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if before[k] != after[k] {
			t.Errorf("%s: %s was %q, is %q", what, k, before[k], after[k])
		}
	}
}

// checkVolume checks the config bytes and, for crypt volumes, runs fsck on
// the backing directory: nothing may be damaged.
func (ft *faultTarget) checkVolume(t *testing.T) {
	t.Helper()
	if !ft.crypt() {
		return
	}
	b, err := os.ReadFile(filepath.Join(ft.backing, config.FileName))
	if err != nil || !bytes.Equal(b, ft.conf) {
		t.Errorf("%s: config changed or unreadable: %v", ft.name, err)
	}
	rep, err := fsck.Check(ft.backing, ft.tm.cfg, ft.tm.master, fsck.Options{})
	if err != nil {
		t.Errorf("%s: fsck: %v", ft.name, err)
		return
	}
	for _, p := range rep.Problems {
		t.Errorf("%s: fsck: %s %s (%s): %s", ft.name, p.Kind, p.Lower, p.Plain, p.Detail)
	}
}

// checkWorks writes, reads back and removes a new file and directory.
func (ft *faultTarget) checkWorks(t *testing.T, tag string) {
	t.Helper()
	d := filepath.Join(ft.dir, "works-"+tag)
	if err := os.Mkdir(d, 0755); err != nil {
		t.Errorf("%s: mkdir after the fault: %v", ft.name, err)
		return
	}
	want := faultData(tag, 3*4096+7)
	p := filepath.Join(d, "f")
	if err := os.WriteFile(p, want, 0644); err != nil {
		t.Errorf("%s: write after the fault: %v", ft.name, err)
	}
	if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
		t.Errorf("%s: read back after the fault: %v (equal %v)", ft.name, err, bytes.Equal(got, want))
	}
	if err := os.RemoveAll(d); err != nil {
		t.Errorf("%s: remove after the fault: %v", ft.name, err)
	}
}

// faultLowerOf finds the entry under lower that the mounted path p stands for,
// by inode number (the mount shows the lower inode numbers).
func faultLowerOf(t *testing.T, lower, p string) string {
	t.Helper()
	fi, err := os.Lstat(p)
	must(t, err)
	ino := fi.Sys().(*syscall.Stat_t).Ino
	var found string
	filepath.WalkDir(lower, func(q string, d fs.DirEntry, err error) error {
		if err != nil || found != "" {
			return nil
		}
		if li, err := d.Info(); err == nil && li.Sys().(*syscall.Stat_t).Ino == ino {
			found = q
			return filepath.SkipAll
		}
		return nil
	})
	if found == "" {
		t.Fatalf("no lower entry of %s (inode %d) under %s", p, ino, lower)
	}
	return found
}

// faultLogSummary counts the distinct warnings of a mount's log (without paths).
func faultLogSummary(log string) string {
	count := map[string]int{}
	var order []string
	for _, line := range strings.Split(strings.TrimSpace(log), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		key := line
		if json.Unmarshal([]byte(line), &m) == nil {
			key = fmt.Sprintf("%v: %v", m["message"], m["error"])
		}
		if count[key] == 0 {
			order = append(order, key)
		}
		count[key]++
	}
	var b strings.Builder
	for _, k := range order {
		fmt.Fprintf(&b, "  %3d× %s\n", count[k], k)
	}
	return b.String()
}

func faultRequireRoot(t *testing.T, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skipf("%s needs root", what)
	}
}

// TestFaultReadOnlyLower: LOWER is a bind mount remounted read-only under
// a read-write FUSE mount. Every change gives EROFS, as on a read-only
// native directory; reads, listings, links and xattrs keep working; after a
// remount read-write everything works again and nothing was damaged.
func TestFaultReadOnlyLower(t *testing.T) {
	faultRequireRoot(t, "a read-only bind mount")
	var binds []string
	targets := faultTargets(t, true, func(t *testing.T, name, lower string) string {
		ro := filepath.Join(t.TempDir(), name+"-bind")
		must(t, os.Mkdir(ro, 0755))
		if err := syscall.Mount(lower, ro, "", syscall.MS_BIND, ""); err != nil {
			t.Skipf("cannot bind mount here: %v", err)
		}
		// Registered before the FUSE mount: runs after its unmount.
		t.Cleanup(func() { unmountBusy(t, ro) })
		binds = append(binds, ro)
		return ro
	})
	remount := func(flags uintptr) {
		for _, b := range binds {
			// FUSE sends RELEASE after close(2) returns, asynchronously:
			// for a moment after the clients closed their files the daemon
			// may still hold a lower descriptor open for writing, and a
			// read-only remount is refused (EBUSY) until it lets go.
			var err error
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
				err = syscall.Mount("", b, "", syscall.MS_REMOUNT|syscall.MS_BIND|flags, "")
				if err != syscall.EBUSY || time.Now().After(deadline) {
					break
				}
			}
			if err != nil {
				t.Fatalf("remount %s: %v", b, err)
			}
		}
	}
	before := map[string]map[string]string{}
	held := map[string]*os.File{}
	for _, ft := range targets {
		faultPopulate(t, ft.dir)
		before[ft.name] = faultSnapshot(t, ft.dir)
		f, err := os.Open(filepath.Join(ft.dir, "b.bin"))
		must(t, err)
		held[ft.name] = f
		defer f.Close()
	}
	remount(syscall.MS_RDONLY)
	t.Cleanup(func() { remount(0) })

	ops := []struct {
		name string
		fn   func(dir string) error
	}{
		{"create", func(d string) error { return os.WriteFile(filepath.Join(d, "new"), []byte("x"), 0644) }},
		{"create-long-name", func(d string) error { return os.WriteFile(filepath.Join(d, faultLongName+"2"), nil, 0644) }},
		{"open-wronly", func(d string) error {
			f, err := os.OpenFile(filepath.Join(d, "a.txt"), os.O_WRONLY, 0)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"open-rdwr-trunc", func(d string) error {
			f, err := os.OpenFile(filepath.Join(d, "a.txt"), os.O_RDWR|os.O_TRUNC, 0)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"truncate", func(d string) error { return os.Truncate(filepath.Join(d, "b.bin"), 10) }},
		{"chmod", func(d string) error { return os.Chmod(filepath.Join(d, "a.txt"), 0600) }},
		{"chown", func(d string) error { return os.Lchown(filepath.Join(d, "a.txt"), 12345, 12345) }},
		{"utimes", func(d string) error {
			return os.Chtimes(filepath.Join(d, "a.txt"), time.Unix(1e9, 0), time.Unix(1e9, 0))
		}},
		{"unlink", func(d string) error { return os.Remove(filepath.Join(d, "a.txt")) }},
		{"unlink-long-name", func(d string) error { return os.Remove(filepath.Join(d, faultLongName)) }},
		{"rmdir", func(d string) error { return syscall.Rmdir(filepath.Join(d, "empty")) }},
		{"mkdir", func(d string) error { return os.Mkdir(filepath.Join(d, "newdir"), 0755) }},
		{"rename", func(d string) error { return os.Rename(filepath.Join(d, "a.txt"), filepath.Join(d, "sub", "a2")) }},
		{"symlink", func(d string) error { return os.Symlink("target", filepath.Join(d, "newlink")) }},
		{"link", func(d string) error { return os.Link(filepath.Join(d, "a.txt"), filepath.Join(d, "hard")) }},
		{"mkfifo", func(d string) error { return unix.Mkfifo(filepath.Join(d, "fifo"), 0644) }},
		{"setxattr", func(d string) error { return unix.Setxattr(filepath.Join(d, "a.txt"), "user.x", []byte("v"), 0) }},
		{"removexattr", func(d string) error { return unix.Removexattr(filepath.Join(d, "a.txt"), "user.k") }},
		{"fsync-dir", func(d string) error {
			f, err := os.Open(filepath.Join(d, "sub"))
			if err != nil {
				return err
			}
			defer f.Close()
			return f.Sync()
		}},
	}
	et := newFaultTable(targets)
	for _, op := range ops {
		for _, ft := range targets {
			et.set(op.name, ft.name, op.fn(ft.dir))
		}
	}
	for _, ft := range targets {
		b := make([]byte, 3*4096+123)
		n, err := held[ft.name].ReadAt(b, 0)
		et.set("read-held-fd", ft.name, err)
		if n != len(b) || !bytes.Equal(b, faultData("b.bin", len(b))) {
			t.Errorf("%s: read through a descriptor opened before the remount: %d bytes, %v", ft.name, n, err)
		}
		// Reads, listings, links, xattrs: the whole tree reads as before.
		faultCompareSnap(t, ft.name+" on a read-only lower", before[ft.name], faultSnapshot(t, ft.dir))
	}
	et.log(t)
	et.agree(t, "native", nil)
	for _, c := range et.cases {
		want := syscall.EROFS
		if c == "fsync-dir" || c == "read-held-fd" {
			want = 0
		}
		if got, _ := et.get(c, "twin"); got != want {
			t.Errorf("%s on the twin: %s, want %s", c, faultErrnoName(got), faultErrnoName(want))
		}
	}

	remount(0)
	for _, ft := range targets {
		faultCompareSnap(t, ft.name+" after remount read-write", before[ft.name], faultSnapshot(t, ft.dir))
		// What was refused now works.
		for _, op := range []string{"create", "mkdir", "setxattr"} {
			for _, o := range ops {
				if o.name == op {
					if err := o.fn(ft.dir); err != nil {
						t.Errorf("%s: %s after remount read-write: %v", ft.name, op, err)
					}
				}
			}
		}
		ft.checkWorks(t, "rw")
		ft.checkVolume(t)
	}
}

// TestFaultLowerDeletedBehindBack removes lower entries directly, behind
// the mount: (a) a file open on the mount, (b) a file not open but whose
// entry and attributes the kernel has cached, (c) a directory, open and
// cached. The encrypted mounts must give what the twin gives (and, where
// the question makes sense natively, what native gives), and the rest of
// the volume stays intact.
func TestFaultLowerDeletedBehindBack(t *testing.T) {
	// LOWER changed behind the mount: what Options.SharedStorage is for.
	targets := faultTargets(t, true, nil, func(o *Options) { o.SharedStorage = true })
	et := newFaultTable(targets)
	before := map[string]map[string]string{}
	open := map[string]*os.File{}
	openDir := map[string]*os.File{}
	victimA := faultData("victimA", 3*4096+500)
	for _, ft := range targets {
		faultPopulate(t, ft.dir)
		before[ft.name] = faultSnapshot(t, ft.dir)
		must(t, os.WriteFile(filepath.Join(ft.dir, "victimA"), victimA, 0644))
		must(t, os.WriteFile(filepath.Join(ft.dir, "victimB"), []byte("cached"), 0644))
		must(t, os.WriteFile(filepath.Join(ft.dir, "victimD"), []byte("cached"), 0644))
		must(t, os.Mkdir(filepath.Join(ft.dir, "victimC"), 0755))
		must(t, os.Mkdir(filepath.Join(ft.dir, "victimC", "s"), 0755))
		for _, f := range []string{"victimC/f1", "victimC/f2", "victimC/s/f3"} {
			must(t, os.WriteFile(filepath.Join(ft.dir, f), []byte(f), 0644))
		}
		f, err := os.OpenFile(filepath.Join(ft.dir, "victimA"), os.O_RDWR, 0)
		must(t, err)
		open[ft.name] = f
		defer f.Close()
		d, err := os.Open(filepath.Join(ft.dir, "victimC"))
		must(t, err)
		openDir[ft.name] = d
		defer d.Close()
		// The kernel caches these entries and attributes now.
		for _, p := range []string{"victimB", "victimD", "victimC/f1", "victimC/s"} {
			_, err := os.Lstat(filepath.Join(ft.dir, p))
			must(t, err)
		}
		// Behind the mount's back:
		for _, p := range []string{"victimA", "victimB", "victimC", "victimD"} {
			lp := filepath.Join(ft.dir, p)
			if ft.tm != nil {
				lp = faultLowerOf(t, ft.backing, lp)
			}
			must(t, os.RemoveAll(lp))
		}
	}

	// (a) The open file keeps working through its descriptor, as an
	// unlinked open file does natively.
	for _, ft := range targets {
		f := open[ft.name]
		got := make([]byte, len(victimA))
		n, err := f.ReadAt(got, 0)
		et.set("open-read", ft.name, err)
		if err == nil && (n != len(got) || !bytes.Equal(got, victimA)) {
			t.Errorf("%s: read of the open deleted file differs", ft.name)
		}
		_, err = f.WriteAt([]byte("written after delete"), 5000)
		et.set("open-write", ft.name, err)
		want := append([]byte{}, victimA...)
		copy(want[5000:], "written after delete")
		n, err = f.ReadAt(got, 0)
		et.set("open-read-back", ft.name, err)
		if err == nil && (n != len(got) || !bytes.Equal(got, want)) {
			t.Errorf("%s: read back of the open deleted file differs", ft.name)
		}
		fi, err := f.Stat()
		et.set("open-fstat", ft.name, err)
		if err == nil && fi.Size() != int64(len(victimA)) {
			t.Errorf("%s: fstat of the open deleted file: size %d", ft.name, fi.Size())
		}
		et.set("open-ftruncate", ft.name, f.Truncate(7000))
		et.set("open-fsync", ft.name, f.Sync())
		et.set("open-close", ft.name, f.Close())
	}
	// (b) The cached, closed file: the daemon finds no lower file.
	for _, ft := range targets {
		p := filepath.Join(ft.dir, "victimB")
		f, err := os.Open(p)
		et.set("cached-open", ft.name, err)
		if err == nil {
			f.Close()
		}
		_, err = os.ReadFile(p)
		et.set("cached-read", ft.name, err)
		var st unix.Statx_t
		et.set("cached-statx-sync", ft.name, unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_FORCE_SYNC, unix.STATX_BASIC_STATS, &st))
		// Creating it again while the kernel still has the old entry.
		p = filepath.Join(ft.dir, "victimD")
		err = os.WriteFile(p, []byte("recreated"), 0644)
		et.set("cached-recreate", ft.name, err)
		if err == nil {
			if got, err := os.ReadFile(p); err != nil || string(got) != "recreated" {
				t.Errorf("%s: recreated victimD reads %q, %v", ft.name, got, err)
			}
			must(t, os.Remove(p))
		}
	}
	// (c) The removed directory.
	for _, ft := range targets {
		names, err := openDir[ft.name].Readdirnames(-1)
		et.set("dir-fd-readdir", ft.name, err)
		if err == nil && len(names) != 0 {
			t.Errorf("%s: listing of a removed directory: %v", ft.name, names)
		}
		d := filepath.Join(ft.dir, "victimC")
		_, err = os.ReadDir(d)
		et.set("dir-open-readdir", ft.name, err)
		et.set("dir-create-child", ft.name, os.WriteFile(filepath.Join(d, "new"), []byte("x"), 0644))
		et.set("dir-mkdir-child", ft.name, os.Mkdir(filepath.Join(d, "newdir"), 0755))
		_, err = os.ReadFile(filepath.Join(d, "f1"))
		et.set("dir-read-cached-child", ft.name, err)
		ents, err := os.ReadDir(ft.dir)
		must(t, err)
		for _, e := range ents {
			if strings.HasPrefix(e.Name(), "victim") {
				t.Errorf("%s: root listing still shows %s", ft.name, e.Name())
			}
		}
	}
	// After the kernel's entry and attribute timeouts (SharedCacheTimeout)
	// every name is looked up again: all three are gone, and can be made anew.
	time.Sleep(SharedCacheTimeout + 100*time.Millisecond)
	for _, ft := range targets {
		for _, p := range []string{"victimA", "victimB", "victimC", "victimC/f1"} {
			_, err := os.Lstat(filepath.Join(ft.dir, p))
			et.set("expired-stat-"+p, ft.name, err)
		}
		for _, p := range []string{"victimA", "victimB"} {
			err := os.WriteFile(filepath.Join(ft.dir, p), []byte("again "+p), 0644)
			et.set("expired-recreate-"+p, ft.name, err)
			if got, err := os.ReadFile(filepath.Join(ft.dir, p)); err != nil || string(got) != "again "+p {
				t.Errorf("%s: recreated %s reads %q, %v", ft.name, p, got, err)
			}
			must(t, os.Remove(filepath.Join(ft.dir, p)))
		}
		err := os.Mkdir(filepath.Join(ft.dir, "victimC"), 0755)
		et.set("expired-mkdir-victimC", ft.name, err)
		if err == nil {
			err = os.WriteFile(filepath.Join(ft.dir, "victimC", "f1"), []byte("new f1"), 0644)
			et.set("expired-create-victimC/f1", ft.name, err)
			must(t, os.RemoveAll(filepath.Join(ft.dir, "victimC")))
		}
		faultCompareSnap(t, ft.name+" neighbours", before[ft.name], faultSnapshot(t, ft.dir))
		ft.checkWorks(t, "deleted")
		ft.checkVolume(t)
	}
	et.log(t)
	// The mounts answer from the lower filesystem even where the kernel
	// still caches the entry, so they agree with native, except one case:
	// open(O_CREAT) of a name whose entry the kernel still caches goes to
	// the daemon as an OPEN of the old node (FUSE_OPEN carries no
	// O_CREAT), whose lower file is gone: ENOENT until the entry expires,
	// on the twin as on the encrypted mounts.
	et.agree(t, "twin", map[string][]string{"cached-recreate": {"native"}})
	et.agree(t, "native", map[string][]string{"cached-recreate": {"xts", "cbc", "twin"}})
	for _, c := range []string{"open-read", "open-write", "open-read-back", "open-fstat", "open-ftruncate", "open-fsync", "open-close",
		"expired-recreate-victimA", "expired-recreate-victimB", "expired-mkdir-victimC"} {
		if e, _ := et.get(c, "twin"); e != 0 {
			t.Errorf("%s on the twin: %s, want success as natively", c, faultErrnoName(e))
		}
	}
	for _, c := range []string{"cached-open", "cached-read", "expired-stat-victimA", "expired-stat-victimB", "expired-stat-victimC", "expired-stat-victimC/f1"} {
		if e, _ := et.get(c, "twin"); e != syscall.ENOENT {
			t.Errorf("%s on the twin: %s, want ENOENT", c, faultErrnoName(e))
		}
	}
}

// eioFaults is the switchboard of the EIO-injecting lower filesystem: the
// operations that fail, per backing inode.
type eioFaults struct {
	mu    sync.Mutex
	rules map[uint64]eioRule
}

type eioRule struct {
	read, write, fsync, flush bool
	// errno is what the faults return (EIO when zero).
	errno syscall.Errno
	// writeFrom, when not zero, limits write faults to writes that end
	// past this offset (a write that would grow the file past it).
	writeFrom int64
}

func (f *eioFaults) set(ino uint64, r eioRule) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rules == nil {
		f.rules = map[uint64]eioRule{}
	}
	f.rules[ino] = r
}

func (f *eioFaults) clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rules = nil
}

func (f *eioFaults) rule(ino uint64) eioRule {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.rules[ino]
	if r.errno == 0 {
		r.errno = syscall.EIO
	}
	return r
}

// eioNode is a go-fuse loopback node whose open files consult the
// switchboard.
type eioNode struct {
	*gofs.LoopbackNode
	faults *eioFaults
}

var (
	_ = (gofs.NodeWrapChilder)((*eioNode)(nil))
	_ = (gofs.NodeOpener)((*eioNode)(nil))
	_ = (gofs.NodeCreater)((*eioNode)(nil))
	_ = (gofs.NodeStatxer)((*eioNode)(nil))
)

func (n *eioNode) WrapChild(ctx context.Context, ops gofs.InodeEmbedder) gofs.InodeEmbedder {
	return &eioNode{LoopbackNode: ops.(*gofs.LoopbackNode), faults: n.faults}
}

func (n *eioNode) wrap(fh gofs.FileHandle, ino uint64) gofs.FileHandle {
	return &eioFile{LoopbackFile: fh.(*gofs.LoopbackFile), ino: ino, faults: n.faults}
}

func (n *eioNode) Open(ctx context.Context, flags uint32) (gofs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return nil, 0, errno
	}
	return n.wrap(fh, n.StableAttr().Ino), fl, 0
}

func (n *eioNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*gofs.Inode, gofs.FileHandle, uint32, syscall.Errno) {
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, n.wrap(fh, ch.StableAttr().Ino), fl, 0
}

// Statx is refused, so that the kernel falls back to GETATTR: go-fuse's
// loopback Statx follows symlinks (it passes the kernel's flags, which do
// not say AT_SYMLINK_NOFOLLOW, to statx(2) on the path), which makes every
// encrypted symlink target (a name that does not exist) fail with ENOENT.
func (n *eioNode) Statx(ctx context.Context, f gofs.FileHandle, flags, mask uint32, out *fuse.StatxOut) syscall.Errno {
	return syscall.ENOSYS
}

// eioFile fails Read, Write, Fsync and Flush as the switchboard says.
type eioFile struct {
	*gofs.LoopbackFile
	ino    uint64
	faults *eioFaults
}

func (f *eioFile) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	if r := f.faults.rule(f.ino); r.read {
		return nil, r.errno
	}
	return f.LoopbackFile.Read(ctx, dest, off)
}

func (f *eioFile) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	if r := f.faults.rule(f.ino); r.write && off+int64(len(data)) > r.writeFrom {
		return 0, r.errno
	}
	return f.LoopbackFile.Write(ctx, data, off)
}

func (f *eioFile) Fsync(ctx context.Context, flags uint32) syscall.Errno {
	if r := f.faults.rule(f.ino); r.fsync {
		return r.errno
	}
	return f.LoopbackFile.Fsync(ctx, flags)
}

func (f *eioFile) Flush(ctx context.Context) syscall.Errno {
	if r := f.faults.rule(f.ino); r.flush {
		return r.errno
	}
	return f.LoopbackFile.Flush(ctx)
}

// PassthroughFd is refused: kernel passthrough would bypass the faults.
func (f *eioFile) PassthroughFd() (int, bool) { return 0, false }

// mountEIOLower serves dir through the EIO-injecting loopback at a new
// mount point, unmounted at cleanup.
func mountEIOLower(t *testing.T, dir string, faults *eioFaults) string {
	t.Helper()
	root, err := gofs.NewLoopbackRoot(dir)
	must(t, err)
	mnt := filepath.Join(t.TempDir(), "eio")
	must(t, os.Mkdir(mnt, 0755))
	srv, err := gofs.Mount(mnt, &eioNode{LoopbackNode: root.(*gofs.LoopbackNode), faults: faults}, &gofs.Options{
		MountOptions: fuse.MountOptions{FsName: "eio-lower", Name: "eiolower", DirectMount: os.Geteuid() == 0,
			// Requests of 1 MiB plus header do not fit the default pipe: no
			// splice attempt (and log line) per READ.
			DisableSplice: true},
	})
	if err != nil {
		t.Fatalf("mount the EIO-injecting lower: %v", err)
	}
	// Registered before the twincrypt mount on top: runs after its unmount.
	t.Cleanup(func() {
		if err := srv.Unmount(); err != nil {
			t.Errorf("unmount the EIO-injecting lower: %v", err)
		}
	})
	return mnt
}

// faultBackingIno is the inode number of the real file behind name on ft.
func faultBackingIno(t *testing.T, ft *faultTarget, name string) uint64 {
	t.Helper()
	p := filepath.Join(ft.backing, name)
	if ft.tm != nil {
		p = faultLowerOf(t, ft.backing, filepath.Join(ft.dir, name))
	}
	fi, err := os.Lstat(p)
	must(t, err)
	return fi.Sys().(*syscall.Stat_t).Ino
}

// faultDropPageCache drops the cached pages of name on ft, held open as f, at
// both levels (the mount and its FUSE lower), so that the next read of f
// reaches the lower filesystem's Read.
func faultDropPageCache(t *testing.T, ft *faultTarget, name string, f *os.File) {
	t.Helper()
	must(t, unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED))
	if ft.tm == nil {
		return
	}
	lf, err := os.Open(faultLowerOf(t, ft.tm.lower, filepath.Join(ft.dir, name)))
	must(t, err)
	defer lf.Close()
	must(t, unix.Fadvise(int(lf.Fd()), 0, 0, unix.FADV_DONTNEED))
}

// eioTargets makes the targets of the EIO tests: each on its own
// EIO-injecting lower filesystem.
func eioTargets(t *testing.T) ([]*faultTarget, *eioFaults) {
	faults := &eioFaults{}
	t.Cleanup(faults.clear)
	targets := faultTargets(t, true, func(t *testing.T, name, lower string) string {
		return mountEIOLower(t, lower, faults)
	})
	return targets, faults
}

// TestFaultLowerEIO puts twincrypt on a lower filesystem that fails with
// EIO on demand (a go-fuse loopback served by this test process; native is
// that filesystem itself). The application gets EIO on the faulty file's
// reads, writes, fsync and close, the neighbours and the config are
// untouched, nothing panics, and once the fault is gone the file works and
// holds what it held.
func TestFaultLowerEIO(t *testing.T) {
	targets, faults := eioTargets(t)
	et := newFaultTable(targets)
	victim := faultData("victim", 3*4096+500)
	grow := faultData("grow", 5000)
	before := map[string]map[string]string{}
	ino := map[string]uint64{}
	for _, ft := range targets {
		faultPopulate(t, ft.dir)
		before[ft.name] = faultSnapshot(t, ft.dir)
		must(t, os.WriteFile(filepath.Join(ft.dir, "victim"), victim, 0644))
		must(t, os.WriteFile(filepath.Join(ft.dir, "grow"), grow, 0644))
		ino[ft.name] = faultBackingIno(t, ft, "victim")
		ino[ft.name+"/grow"] = faultBackingIno(t, ft, "grow")
	}

	// Every data operation on the victim fails below.
	for _, ft := range targets {
		faults.set(ino[ft.name], eioRule{read: true, write: true, fsync: true, flush: true})
	}
	for _, ft := range targets {
		p := filepath.Join(ft.dir, "victim")
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if et.set("open", ft.name, err) != 0 {
			continue
		}
		// Our mounts keep the page cache of what was just written: drop
		// it, so that the reads below reach the lower filesystem.
		unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
		b := make([]byte, 4096)
		_, err = f.ReadAt(b[:100], 0)
		et.set("read-first", ft.name, err)
		_, err = f.ReadAt(b, 5000)
		et.set("read-middle", ft.name, err)
		_, err = f.WriteAt([]byte("overwrite"), 100)
		et.set("write-inside", ft.name, err)
		_, err = f.WriteAt([]byte("append"), int64(len(victim)))
		et.set("write-append", ft.name, err)
		et.set("fsync", ft.name, f.Sync())
		et.set("fdatasync", ft.name, unix.Fdatasync(int(f.Fd())))
		et.set("close", ft.name, f.Close())
		fi, err := os.Stat(p)
		et.set("stat", ft.name, err)
		if err == nil && fi.Size() != int64(len(victim)) {
			t.Errorf("%s: victim has size %d while failing, want %d", ft.name, fi.Size(), len(victim))
		}
		_, err = os.ReadFile(p)
		et.set("readfile", ft.name, err)
		// The neighbours do not notice.
		faultCompareSnap(t, ft.name+" neighbours while the victim fails", before[ft.name], faultSnapshot(t, ft.dir, "victim", "grow"))
	}
	// A descriptor that has read the file before (the crypt mount has its
	// header): reads and writes of the data fail while the fault lasts,
	// then work again through the same descriptor.
	faults.clear()
	loaded := map[string]*os.File{}
	for _, ft := range targets {
		f, err := os.OpenFile(filepath.Join(ft.dir, "victim"), os.O_RDWR, 0)
		must(t, err)
		loaded[ft.name] = f
		defer f.Close()
		_, err = f.ReadAt(make([]byte, 10), 0)
		must(t, err)
	}
	for _, ft := range targets {
		faultDropPageCache(t, ft, "victim", loaded[ft.name])
		faults.set(ino[ft.name], eioRule{read: true})
		_, err := loaded[ft.name].ReadAt(make([]byte, 100), 5000)
		et.set("loaded-read-faulty", ft.name, err)
		faults.set(ino[ft.name], eioRule{write: true})
		_, err = loaded[ft.name].WriteAt([]byte("never lands"), 5000)
		et.set("loaded-write-faulty", ft.name, err)
	}
	faults.clear()
	for _, ft := range targets {
		got := make([]byte, 100)
		_, err := loaded[ft.name].ReadAt(got, 5000)
		if et.set("loaded-read-after", ft.name, err) == 0 && !bytes.Equal(got, victim[5000:5100]) {
			t.Errorf("%s: a descriptor reads other content after the fault", ft.name)
		}
		et.set("loaded-close", ft.name, loaded[ft.name].Close())
	}

	// Fault off: the victim holds what it held (no failed write landed),
	// and it can be written, synced and closed again.
	faults.clear()
	for _, ft := range targets {
		p := filepath.Join(ft.dir, "victim")
		got, err := os.ReadFile(p)
		if et.set("after-readfile", ft.name, err) == 0 && !bytes.Equal(got, victim) {
			t.Errorf("%s: victim changed by the failed operations (size %d)", ft.name, len(got))
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("overwrite"), 100)
		et.set("after-write", ft.name, err)
		et.set("after-fsync", ft.name, f.Sync())
		et.set("after-close", ft.name, f.Close())
		want := append([]byte{}, victim...)
		copy(want[100:], "overwrite")
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: victim after the fault: %v (equal %v)", ft.name, err, bytes.Equal(got, want))
		}
	}

	// Writes that would grow the file past 8 KiB fail below (like a quota).
	// Growing a 5000-byte file from offset 9000: the crypt mount first
	// re-encrypts its partial last extent as a full one (which fits), then
	// the new extent fails.
	for _, ft := range targets {
		from := int64(8192)
		if ft.crypt() {
			from = headerSize + 8192
		}
		faults.set(ino[ft.name+"/grow"], eioRule{write: true, writeFrom: from})
	}
	for _, ft := range targets {
		p := filepath.Join(ft.dir, "grow")
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		must(t, err)
		_, err = f.WriteAt([]byte("past the limit"), 9000)
		et.set("grow-write", ft.name, err)
		et.set("grow-close", ft.name, f.Close())
	}
	faults.clear()
	for _, ft := range targets {
		got, err := os.ReadFile(filepath.Join(ft.dir, "grow"))
		et.set("grow-readfile", ft.name, err)
		if len(got) < len(grow) || !bytes.Equal(got[:len(grow)], grow) || len(bytes.Trim(got[len(grow):], "\x00")) != 0 {
			t.Errorf("%s: after a failed growing write the file is not its old data followed by zeros (size %d)", ft.name, len(got))
		} else if len(got) != len(grow) {
			t.Logf("%s: a failed growing write left the file at %d bytes (old %d, zeros after): FORMAT.md §7 'growing a file whose last extent is partial'", ft.name, len(got), len(grow))
		}
	}

	for _, ft := range targets {
		faultCompareSnap(t, ft.name+" neighbours after the faults", before[ft.name], faultSnapshot(t, ft.dir, "victim", "grow"))
		ft.checkWorks(t, "eio")
		ft.checkVolume(t)
		if ft.crypt() {
			t.Logf("%s: warnings in the log:\n%s", ft.name, faultLogSummary(ft.tm.log.String()))
		}
	}
	et.log(t)
	et.agree(t, "twin", nil)
	for _, c := range []string{"read-first", "read-middle", "write-inside", "write-append", "fsync", "fdatasync", "close", "readfile", "loaded-read-faulty", "loaded-write-faulty", "grow-write"} {
		if e, _ := et.get(c, "twin"); e != syscall.EIO {
			t.Errorf("%s on the twin: %s, want EIO", c, faultErrnoName(e))
		}
	}
}

// Found by this file, and fixed: an error of the lower filesystem on the
// first read of an open encrypted file (the header read, in
// cryptIO.loadHeader) was not treated as the transient failure it is:
//
//   - EIO marked the file bad (ioState.bad) with an "unreadable file"
//     warning, so every later read or write through that descriptor fails
//     with EIO although the lower filesystem works again; the twin recovers.
//   - Any other errno (here ETIMEDOUT, as from a network lower) sets
//     hdrLoaded back to false, but the deferred hdrLoaded.Store(true) runs
//     after it: the inode is left "loaded" without a header. The kernel's
//     retry of the read then fails with "file of N bytes without a
//     header" (so the application sees EIO, not ETIMEDOUT), and the next
//     write through the descriptor makes ensureHeader write a new header
//     (new file id, new key) over the file: all its old content turns into
//     garbage, silently.
//
// loadHeader now returns lower errors without touching the state.
func TestFaultBugLowerErrorOnHeader(t *testing.T) {
	targets, faults := eioTargets(t)
	et := newFaultTable(targets)
	victim := faultData("victim", 3*4096+500)
	ino := map[string]uint64{}
	for _, ft := range targets {
		must(t, os.WriteFile(filepath.Join(ft.dir, "victim"), victim, 0644))
		ino[ft.name] = faultBackingIno(t, ft, "victim")
	}
	// A descriptor whose first read failed works again once the lower
	// filesystem does.
	held := map[string]*os.File{}
	faults.clear()
	for _, ft := range targets {
		f, err := os.Open(filepath.Join(ft.dir, "victim"))
		must(t, err)
		held[ft.name] = f
		defer f.Close()
	}
	for _, ft := range targets {
		// The pages the write left cached would serve the read without
		// the filesystem (and whether they still do depends on another
		// program's drop_caches): drop them, so that the read reaches
		// the faulty lower file on every target.
		faultDropPageCache(t, ft, "victim", held[ft.name])
		faults.set(ino[ft.name], eioRule{read: true})
	}
	for _, ft := range targets {
		_, err := held[ft.name].ReadAt(make([]byte, 10), 0)
		et.set("held-read-faulty", ft.name, err)
	}
	faults.clear()
	for _, ft := range targets {
		got := make([]byte, len(victim))
		_, err := held[ft.name].ReadAt(got, 0)
		if et.set("held-read-after", ft.name, err) == 0 && !bytes.Equal(got, victim) {
			t.Errorf("%s: held descriptor reads other content after the fault", ft.name)
		}
		held[ft.name].Close()
	}

	// A transient error other than EIO (a network lower timing out) on
	// the first read of an open file; then a write through the same
	// descriptor. The file must hold the old content plus that write.
	for _, ft := range targets {
		f, err := os.OpenFile(filepath.Join(ft.dir, "victim"), os.O_RDWR, 0)
		must(t, err)
		held[ft.name] = f
		defer f.Close()
		faultDropPageCache(t, ft, "victim", f)
		faults.set(ino[ft.name], eioRule{read: true, errno: syscall.ETIMEDOUT})
	}
	for _, ft := range targets {
		_, err := held[ft.name].ReadAt(make([]byte, 10), 0)
		et.set("timeout-read", ft.name, err)
	}
	faults.clear()
	for _, ft := range targets {
		_, err := held[ft.name].WriteAt([]byte("after timeout"), 9000)
		et.set("timeout-then-write", ft.name, err)
		et.set("timeout-then-close", ft.name, held[ft.name].Close())
		want := append([]byte{}, victim...)
		copy(want[9000:], "after timeout")
		got, err := os.ReadFile(filepath.Join(ft.dir, "victim"))
		if et.set("timeout-then-readfile", ft.name, err) == 0 && !bytes.Equal(got, want) {
			same := 0
			for same < min(len(got), len(want)) && got[same] == want[same] {
				same++
			}
			t.Errorf("%s: after a transient ETIMEDOUT and a write, the file differs from byte %d on (size %d, want %d)", ft.name, same, len(got), len(want))
		}
	}

	for _, ft := range targets {
		ft.checkVolume(t)
	}
	et.log(t)
	for _, c := range et.cases {
		for _, n := range []string{"xts", "cbc"} {
			got, _ := et.get(c, n)
			if want, _ := et.get(c, "twin"); got != want {
				t.Errorf("%s: %s gives %s, twin gives %s", c, n, faultErrnoName(got), faultErrnoName(want))
			}
		}
	}
}

// TestFaultENOSPCRecovery fills a small lower filesystem (a 2 MiB tmpfs per
// target) with unaligned writes: the writer gets ENOSPC; the partly written
// file reads end to end as a prefix of what was written; neighbours and
// config are intact; once space is freed the file can be written whole.
func TestFaultENOSPCRecovery(t *testing.T) {
	faultRequireRoot(t, "mounting a small tmpfs")
	targets := faultTargets(t, true, func(t *testing.T, name, lower string) string {
		small := filepath.Join(t.TempDir(), name+"-small")
		must(t, os.Mkdir(small, 0755))
		if err := syscall.Mount("tmpfs", small, "tmpfs", 0, "size=2m"); err != nil {
			t.Skipf("cannot mount a tmpfs here: %v", err)
		}
		t.Cleanup(func() { unmountBusy(t, small) })
		ents, err := os.ReadDir(lower)
		must(t, err)
		for _, e := range ents {
			b, err := os.ReadFile(filepath.Join(lower, e.Name()))
			must(t, err)
			must(t, os.WriteFile(filepath.Join(small, e.Name()), b, 0600))
		}
		return small
	})
	// The config now lives on the tmpfs.
	for _, ft := range targets {
		if ft.tm != nil {
			ft.backing = ft.tm.lower
		}
	}
	et := newFaultTable(targets)
	big := faultData("big", 4<<20)
	before := map[string]map[string]string{}
	for _, ft := range targets {
		faultPopulate(t, ft.dir)
		before[ft.name] = faultSnapshot(t, ft.dir)
	}
	for _, ft := range targets {
		p := filepath.Join(ft.dir, "big")
		f, err := os.Create(p)
		must(t, err)
		const chunk = 100000 // not a multiple of the extent size
		var werr error
		written := 0
		for written < len(big) && werr == nil {
			var n int
			n, werr = f.Write(big[written:min(written+chunk, len(big))])
			written += n
		}
		et.set("fill-write", ft.name, werr)
		et.set("fill-fsync", ft.name, f.Sync())
		et.set("fill-close", ft.name, f.Close())
		// Everything acknowledged is there, and nothing else: as natively,
		// where the write that fills the disk stores what fits and says
		// so (a short write), a write that failed added nothing to the
		// file (never garbage past the end, never EIO).
		got, err := os.ReadFile(p)
		et.set("full-readfile", ft.name, err)
		if len(got) < written || !bytes.Equal(got[:written], big[:written]) {
			t.Errorf("%s: the %d acknowledged bytes do not read back (file has %d)", ft.name, written, len(got))
		} else if len(got) != written {
			t.Errorf("%s: the file has %d bytes past the %d acknowledged", ft.name, len(got)-written, written)
		}
		t.Logf("%s: %d bytes acknowledged, file has %d", ft.name, written, len(got))
		// With the disk full: a directory (crypt needs a block for its
		// IV) and a long name (crypt needs a block for its sidecar).
		err = os.Mkdir(filepath.Join(ft.dir, "full-dir"), 0755)
		et.set("full-mkdir", ft.name, err)
		if err == nil {
			must(t, os.Remove(filepath.Join(ft.dir, "full-dir")))
		} else if _, serr := os.Lstat(filepath.Join(ft.dir, "full-dir")); serr == nil {
			t.Errorf("%s: failed mkdir left the directory", ft.name)
		}
		err = os.WriteFile(filepath.Join(ft.dir, faultLongName+"2"), nil, 0644)
		et.set("full-create-long", ft.name, err)
		if err == nil {
			must(t, os.Remove(filepath.Join(ft.dir, faultLongName+"2")))
		} else if _, serr := os.Lstat(filepath.Join(ft.dir, faultLongName+"2")); serr == nil {
			t.Errorf("%s: failed create left the file", ft.name)
		}
		faultCompareSnap(t, ft.name+" neighbours of a full disk", before[ft.name], faultSnapshot(t, ft.dir, "big"))
	}
	// Free the space: the whole file can be written anew, in place.
	for _, ft := range targets {
		p := filepath.Join(ft.dir, "big")
		must(t, os.Truncate(p, 0))
		want := big[:1<<20]
		err := os.WriteFile(p, want, 0644)
		et.set("freed-rewrite", ft.name, err)
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: rewritten file after freeing space: %v (equal %v)", ft.name, err, bytes.Equal(got, want))
		}
		must(t, os.Remove(p))
		faultCompareSnap(t, ft.name+" after freeing space", before[ft.name], faultSnapshot(t, ft.dir))
		ft.checkWorks(t, "enospc")
		ft.checkVolume(t)
	}
	et.log(t)
	// A directory or an empty long-named file takes no data block natively
	// or on the twin; the crypt mounts need one for the IV or sidecar.
	cryptDiffers := []string{"xts", "cbc"}
	et.agree(t, "twin", map[string][]string{"full-mkdir": cryptDiffers, "full-create-long": cryptDiffers})
	for _, ft := range targets {
		if e, _ := et.get("fill-write", ft.name); e != syscall.ENOSPC {
			t.Errorf("%s: filling the disk gives %s, want ENOSPC", ft.name, faultErrnoName(e))
		}
	}
}

// unmountBusy unmounts a lower filesystem a FUSE mount of this test stood
// on. The FUSE server closes its descriptor of LOWER's root when its serve
// loop has ended, just after its unmount: the lower mount may be busy for
// a moment.
func unmountBusy(t *testing.T, dir string) {
	var err error
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if err = syscall.Unmount(dir, 0); err != syscall.EBUSY || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		t.Errorf("unmount %s: %v", dir, err)
		syscall.Unmount(dir, syscall.MNT_DETACH)
	}
}
