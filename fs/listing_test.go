package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// lsL lists dir as ls -l does: the entries, then an lstat and a getxattr
// of the access ACL of each (which the kernel answers from its ACL cache
// when it has one). It returns one line per entry.
func lsL(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	var lines []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		var st syscall.Stat_t
		must(t, syscall.Lstat(p, &st))
		size := st.Size
		if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
			size = -1 // crypt's differ
		}
		_, xerr := unix.Getxattr(p, "system.posix_acl_access", nil)
		lines = append(lines, fmt.Sprintf("%s %o %d %d %d/%d %v", e.Name(), st.Mode, st.Nlink, size, st.Uid, st.Gid, xerr))
	}
	sort.Strings(lines)
	return lines
}

// TestWarmListing: a second ls -l of a directory whose entries the kernel
// holds makes no LOOKUP and no GETXATTR per file (READDIRPLUS sends those
// entries without a lookup, so the kernel keeps them and their cached
// ACLs) and does not even read the directory again (the kernel serves the
// listing from its cache), and every listing shows what a native
// directory shows after each change made through the mount since the last
// one (the kernel drops its cached listing at each).
func TestWarmListing(t *testing.T) {
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			rec := measure.NewRecorder("test")
			tm.mount(t, func(o *Options) { o.Recorder = rec })
			native := t.TempDir()
			strict := lowerDirAtime(t, tm.lower) == dirAtimeStrict
			counts := func() map[string]int64 {
				c := map[string]int64{}
				for _, s := range rec.Snapshot().Ops {
					c[s.Op] = s.Count
				}
				return c
			}
			steps := []struct {
				name string
				do   func(d string) error
			}{
				{"create", func(d string) error {
					for i := 0; i < 20; i++ {
						if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%02d", i)), []byte("x"), 0644); err != nil {
							return err
						}
					}
					return os.Mkdir(filepath.Join(d, "sub"), 0755)
				}},
				{"none", func(string) error { return nil }},
				{"chmod", func(d string) error { return os.Chmod(filepath.Join(d, "f01"), 0600) }},
				{"write", func(d string) error {
					return os.WriteFile(filepath.Join(d, "f02"), []byte(strings.Repeat("y", 9000)), 0644)
				}},
				{"link", func(d string) error { return os.Link(filepath.Join(d, "f03"), filepath.Join(d, "sub", "l")) }},
				{"rename-over", func(d string) error { return os.Rename(filepath.Join(d, "f04"), filepath.Join(d, "f05")) }},
				{"unlink", func(d string) error { return os.Remove(filepath.Join(d, "f06")) }},
				{"mkdir-rmdir", func(d string) error {
					if err := os.Mkdir(filepath.Join(d, "f07x"), 0700); err != nil {
						return err
					}
					return os.Remove(filepath.Join(d, "sub2"))
				}},
				{"symlink", func(d string) error { return os.Symlink("f08", filepath.Join(d, "ln")) }},
				{"setfacl", func(d string) error {
					return unix.Setxattr(filepath.Join(d, "f09"), "system.posix_acl_access", aclBytes(t), 0)
				}},
			}
			for _, d := range []string{native, tm.mnt} {
				must(t, os.Mkdir(filepath.Join(d, "d"), 0755))
				must(t, os.Mkdir(filepath.Join(d, "d", "sub2"), 0755))
			}
			for _, s := range steps {
				want := func() []string {
					must(t, s.do(filepath.Join(native, "d")))
					return lsL(t, filepath.Join(native, "d"))
				}()
				must(t, s.do(filepath.Join(tm.mnt, "d")))
				// Past the clock tick of the change: the listing then
				// moves the directory's atime past its mtime, as a
				// native one would, and the next may come from the
				// kernel's cache (atimeWantsListing).
				time.Sleep(clockTick)
				drops := cacheDrops(t)
				got := lsL(t, filepath.Join(tm.mnt, "d"))
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("after %s: listing\n%s\nnatively\n%s", s.name, strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
				// Again, nothing changed: the kernel has it all.
				before := counts()
				again := lsL(t, filepath.Join(tm.mnt, "d"))
				after := counts()
				if strings.Join(again, "\n") != strings.Join(want, "\n") {
					t.Errorf("after %s, listed again: %s", s.name, strings.Join(again, "\n"))
				}
				// (Another program's drop_caches makes the kernel forget
				// entries: then these say nothing.)
				if n := after["lookup"] - before["lookup"]; n != 0 && cacheDrops(t) == drops {
					t.Errorf("after %s: a warm ls -l made %d LOOKUPs, want 0", s.name, n)
				}
				if n := after["getxattr"] - before["getxattr"]; n != 0 && cacheDrops(t) == drops {
					t.Errorf("after %s: a warm ls -l made %d GETXATTRs (ACLs the kernel had cached), want 0", s.name, n)
				}
				// (On a strictatime lower mount every listing is the
				// daemon's: a native one moves the atime.)
				if n := after["readdir"] - before["readdir"]; n != 0 && !strict && !cachedListing(t, rec, filepath.Join(tm.mnt, "d"), drops) {
					t.Errorf("after %s: a warm ls -l read the directory %d times, want 0 (the kernel's listing cache, FOPEN_CACHE_DIR)", s.name, n)
				}
			}
		})
	}
}

// aclBytes is posixACLValue as bytes.
func aclBytes(t *testing.T) []byte {
	var b []byte
	_, err := fmt.Sscanf(posixACLValue(), "%x", &b)
	must(t, err)
	return b
}

// TestListingAfterReads: reading a file makes the kernel drop its cached
// atime (fuse_invalidate_atime), and its next stat asks GETATTR. A
// listing with lstats (find, du, rm -rf) of a directory whose files were
// just read gets their attributes in the READDIRPLUS reply instead, as
// it would have for entries the kernel did not hold, rather than one
// GETATTR per file; and the attributes it shows are a native
// directory's.
func TestListingAfterReads(t *testing.T) {
	const n = 40
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			rec := measure.NewRecorder("test")
			tm.mount(t, func(o *Options) { o.Recorder = rec })
			native := t.TempDir()
			getattrs := func() int64 { return opStats(rec, "getattr").Count }
			list := func(d string) []string {
				entries, err := os.ReadDir(d)
				must(t, err)
				var lines []string
				for _, e := range entries {
					var st syscall.Stat_t
					must(t, syscall.Lstat(filepath.Join(d, e.Name()), &st))
					lines = append(lines, fmt.Sprintf("%s %o %d %d", e.Name(), st.Mode, st.Nlink, st.Size))
				}
				sort.Strings(lines)
				return lines
			}
			var want []string
			for _, root := range []string{native, tm.mnt} {
				d := filepath.Join(root, "d")
				must(t, os.Mkdir(d, 0755))
				for i := 0; i < n; i++ {
					p := filepath.Join(d, fmt.Sprintf("f%02d", i))
					must(t, os.WriteFile(p, []byte(strings.Repeat("z", 100+i)), 0644))
				}
				list(d) // the kernel now holds every entry
				// Read each file from the filesystem, not the page cache.
				for i := 0; i < n; i++ {
					p := filepath.Join(d, fmt.Sprintf("f%02d", i))
					fd, err := unix.Open(p, unix.O_RDONLY, 0)
					must(t, err)
					must(t, unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED))
					buf := make([]byte, 4096)
					_, err = unix.Read(fd, buf)
					unix.Close(fd)
					must(t, err)
				}
				if root == native {
					want = list(d)
					continue
				}
				before := getattrs()
				got := list(d)
				if g := getattrs() - before; g > n/4 {
					t.Errorf("a listing with an lstat per file after reading each made %d GETATTRs for %d files, want few", g, n)
				}
				if strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("listing after reads:\n%s\nnatively:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
				}
			}
		})
	}
}

// opStats returns the statistics of op in rec, zero if it never ran.
func opStats(rec *measure.Recorder, op string) measure.Stats {
	for _, s := range rec.Snapshot().Ops {
		if s.Op == op {
			return s
		}
	}
	return measure.Stats{}
}

// TestReaddirPlusEntries checks the attributes a READDIRPLUS hands the
// kernel for each entry (looked up through the directory handle's own
// descriptor under the lower name the listing read, or by name for a
// long name) against what was written, over several replies of a big
// directory, and against a plain LOOKUP of each name on a fresh mount.
func TestReaddirPlusEntries(t *testing.T) {
	const n = 600
	long := strings.Repeat("L", 200)
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.mount(t)
			d := filepath.Join(tm.mnt, "d")
			must(t, os.Mkdir(d, 0755))
			want := map[string]string{}
			for i := 0; i < n; i++ {
				name := fmt.Sprintf("f%03d", i)
				if i%100 == 7 {
					name = fmt.Sprintf("%s%03d", long, i)
				}
				mode := os.FileMode(0600 | (i%8)<<3)
				p := filepath.Join(d, name)
				must(t, os.WriteFile(p, make([]byte, i), 0600))
				must(t, os.Chmod(p, mode))
				want[name] = fmt.Sprintf("%o %d", syscall.S_IFREG|uint32(mode), i)
			}
			must(t, os.Mkdir(filepath.Join(d, "sub"), 0700))
			want["sub"] = fmt.Sprintf("%o", syscall.S_IFDIR|0700)
			must(t, os.Symlink("target", filepath.Join(d, "sym")))
			want["sym"] = fmt.Sprintf("%o %d", syscall.S_IFLNK|0777, len("target"))
			show := func(st *syscall.Stat_t) string {
				if st.Mode&syscall.S_IFMT == syscall.S_IFDIR {
					return fmt.Sprintf("%o", st.Mode)
				}
				return fmt.Sprintf("%o %d", st.Mode, st.Size)
			}
			remount := func() {
				tm.unmountNow(t)
				tm.unmounted = false
				tm.mount(t)
			}

			// A fresh mount: the listing makes every entry; the lstats
			// use what it sent.
			remount()
			entries, err := os.ReadDir(d)
			must(t, err)
			if len(entries) != len(want) {
				t.Fatalf("%d entries listed, want %d", len(entries), len(want))
			}
			inos := map[string]uint64{}
			for _, e := range entries {
				var st syscall.Stat_t
				must(t, syscall.Lstat(filepath.Join(d, e.Name()), &st))
				if got := show(&st); got != want[e.Name()] {
					t.Errorf("%.20s after READDIRPLUS: %s, want %s", e.Name(), got, want[e.Name()])
				}
				inos[e.Name()] = st.Ino
			}

			// Another fresh mount, no listing: each name looked up alone.
			remount()
			for name, w := range want {
				var st syscall.Stat_t
				must(t, syscall.Lstat(filepath.Join(d, name), &st))
				if got := show(&st); got != w || st.Ino != inos[name] {
					t.Errorf("%.20s by LOOKUP: %s ino %d, after READDIRPLUS ino %d, want %s", name, got, st.Ino, inos[name], w)
				}
			}
		})
	}
}

// listCounter counts the listing requests a mount gets.
type listCounter struct {
	fuse.RawFileSystem
	plain, plus, lookups atomic.Int64
}

func (c *listCounter) ReadDir(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	c.plain.Add(1)
	return c.RawFileSystem.ReadDir(cancel, in, out)
}

func (c *listCounter) ReadDirPlus(cancel <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	c.plus.Add(1)
	return c.RawFileSystem.ReadDirPlus(cancel, in, out)
}

func (c *listCounter) Lookup(cancel <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	c.lookups.Add(1)
	return c.RawFileSystem.Lookup(cancel, h, name, out)
}

// TestReaddirModes: with each --readdir mode a directory of several
// replies lists the same names and attributes as natively, through the
// requests the mode promises: READDIRPLUS only (plus), READDIRPLUS for
// the first reply and plain READDIR for a listing of names alone (auto),
// READDIR only (plain); and an lstat of every entry after a names-only
// listing costs a LOOKUP per entry with auto and plain, none with plus.
func TestReaddirModes(t *testing.T) {
	requireFUSE(t)
	const n = 3000 // several replies of READDIRPLUS and of READDIR
	for _, mode := range []string{ReaddirPlus, ReaddirAuto, ReaddirPlain} {
		t.Run(mode, func(t *testing.T) {
			tm := newVolume(t, variants[0])
			tm.mount(t)
			native := filepath.Join(t.TempDir(), "d")
			must(t, os.Mkdir(native, 0755))
			must(t, os.Mkdir(filepath.Join(tm.mnt, "d"), 0755))
			for _, root := range []string{native, filepath.Join(tm.mnt, "d")} {
				for i := 0; i < n; i++ {
					must(t, os.WriteFile(filepath.Join(root, fmt.Sprintf("f%04d", i)), make([]byte, i%50), 0644))
				}
			}
			tm.unmountNow(t)
			tm.unmounted = false

			o := Options{Lower: tm.lower, Config: tm.cfg, MasterKey: tm.master, Log: zerolog.New(tm.log), Readdir: mode}
			r, err := newRoot(o)
			must(t, err)
			var c *listCounter
			srv, err := r.serve(tm.mnt, o, func(raw fuse.RawFileSystem) fuse.RawFileSystem {
				c = &listCounter{RawFileSystem: raw}
				return c
			})
			must(t, err)
			tm.served(t, srv)
			d := filepath.Join(tm.mnt, "d")

			// Another program's drop_caches (the integration tests' cold
			// runs, in parallel) makes the kernel forget the entries the
			// listing gave it: counted from here.
			drops := cacheDrops(t)
			// Names alone (ls -f, find -name).
			names := func(dir string) []string {
				f, err := os.Open(dir)
				must(t, err)
				defer f.Close()
				l, err := f.Readdirnames(-1)
				must(t, err)
				sort.Strings(l)
				return l
			}
			got, want := names(d), names(native)
			if strings.Join(got, " ") != strings.Join(want, " ") {
				t.Fatalf("%d names listed, want %d", len(got), len(want))
			}
			plain, plus := c.plain.Load(), c.plus.Load()
			switch mode {
			case ReaddirPlus:
				if plain != 0 || plus < 2 {
					t.Errorf("plus: %d READDIR, %d READDIRPLUS; want READDIRPLUS only", plain, plus)
				}
			case ReaddirAuto:
				if plus != 1 || plain < 2 {
					t.Errorf("auto: %d READDIR, %d READDIRPLUS; want one READDIRPLUS, then READDIR", plain, plus)
				}
			case ReaddirPlain:
				if plus != 0 || plain < 2 {
					t.Errorf("plain: %d READDIR, %d READDIRPLUS; want READDIR only", plain, plus)
				}
			}

			// Then an lstat of each (what fts does in du and rm -r).
			l0 := c.lookups.Load()
			for _, name := range got {
				var st, nst syscall.Stat_t
				must(t, syscall.Lstat(filepath.Join(d, name), &st))
				must(t, syscall.Lstat(filepath.Join(native, name), &nst))
				if st.Size != nst.Size || st.Mode != nst.Mode {
					t.Fatalf("%s: size %d mode %o, natively %d %o", name, st.Size, st.Mode, nst.Size, nst.Mode)
				}
			}
			lookups := c.lookups.Load() - l0
			if mode == ReaddirPlus && lookups != 0 {
				if cacheDrops(t) != drops {
					t.Logf("plus: %d LOOKUPs after the listing, but a drop_caches overlapped: not checked", lookups)
				} else {
					t.Errorf("plus: %d LOOKUPs after the listing, want 0", lookups)
				}
			}
			if mode != ReaddirPlus && lookups < n/2 {
				t.Errorf("%s: %d LOOKUPs after a listing of names, want one for most of %d entries", mode, lookups, n)
			}
		})
	}
}

// cachedListing is for a listing that should have come from the kernel's
// cache and did not: another program's drop_caches (the integration
// tests' cold runs, in parallel) empties it at any time. If the page
// cache was dropped since drops (cacheDrops), the listing says
// nothing and it reports true; else it lists dir twice more and reports
// whether the second came from the cache (the first fills it again), or
// a drop overlapped those.
func cachedListing(t *testing.T, rec *measure.Recorder, dir string, drops int64) bool {
	for range 2 {
		if cacheDrops(t) != drops {
			return true
		}
		r0 := opStats(rec, "readdir").Count
		_, err := os.ReadDir(dir)
		must(t, err)
		if opStats(rec, "readdir").Count == r0 {
			return true
		}
	}
	return cacheDrops(t) != drops
}

// lowerDirAtime is the atime mode of the mount of dir (dirAtimeOf).
func lowerDirAtime(t *testing.T, dir string) dirAtime {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	must(t, err)
	defer unix.Close(fd)
	return dirAtimeOf(fd)
}

// clockTick is longer than the kernel's coarse clock tick (jiffies, at
// most 10 ms), in which file times advance.
const clockTick = 25 * time.Millisecond

// TestListingAtime: a listing changes a directory's atime on the mount
// exactly where it does natively (relatime: when the atime is not after
// the mtime or the ctime), although the kernel serves listings from its
// cache: after a create, after a chmod of the directory, and not when
// listed again with nothing changed, where the mount's listing comes from
// the kernel's cache (once it holds one).
func TestListingAtime(t *testing.T) {
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			rec := measure.NewRecorder("test")
			tm.mount(t, func(o *Options) { o.Recorder = rec })
			native := t.TempDir()
			// The listings counted below are those of a relatime lower
			// mount (the default); the atimes are compared on any.
			relatime := lowerDirAtime(t, tm.lower) == dirAtimeRel
			if !relatime {
				t.Logf("%s is not on a relatime mount: listings not counted", tm.lower)
			}
			atime := func(d string) int64 {
				var st unix.Stat_t
				must(t, unix.Stat(d, &st))
				return st.Atim.Nano()
			}
			none := func(string) error { return nil }
			steps := []struct {
				name     string
				do       func(d string) error
				readdirs int64 // listings the daemon makes (0: the kernel's cached one)
			}{
				{"after a create", func(d string) error { return os.WriteFile(filepath.Join(d, "f"), nil, 0644) }, 1},
				{"again", none, 0},
				// The kernel's listing is still valid: the daemon makes
				// this one, which the kernel does not keep, then one it
				// keeps (go-fuse offers no way to replace a cached listing).
				{"after a chmod of the directory", func(d string) error { return os.Chmod(d, 0700) }, 1},
				{"again after the chmod", none, 1},
				{"a third time after the chmod", none, 0},
			}
			for _, root := range []string{native, tm.mnt} {
				must(t, os.Mkdir(filepath.Join(root, "d"), 0755))
			}
			drops0 := cacheDrops(t)
			for _, s := range steps {
				changed := map[string]bool{}
				var readdirs, drops int64
				for _, root := range []string{native, tm.mnt} {
					d := filepath.Join(root, "d")
					must(t, s.do(d))
					time.Sleep(clockTick)
					before := atime(d)
					var r0 int64
					r0, drops = opStats(rec, "readdir").Count, cacheDrops(t)
					_, err := os.ReadDir(d)
					must(t, err)
					readdirs = opStats(rec, "readdir").Count - r0
					time.Sleep(clockTick)
					changed[root] = atime(d) != before
				}
				if changed[tm.mnt] != changed[native] {
					t.Errorf("listing %s: atime changed %v on the mount, %v natively", s.name, changed[tm.mnt], changed[native])
				}
				// (Another program's drop_caches makes the kernel and the
				// daemon forget the directory: then the counts say
				// nothing from there on.)
				if relatime && cacheDrops(t) == drops0 && readdirs != s.readdirs && !(s.readdirs == 0 && cachedListing(t, rec, filepath.Join(tm.mnt, "d"), drops)) {
					t.Errorf("listing %s: the daemon read the directory %d times, want %d", s.name, readdirs, s.readdirs)
				}
			}
		})
	}
}
