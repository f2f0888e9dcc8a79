package fs

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// cacheView is what a stat shows of a name, compared exactly across
// targets: mode, link count, owner, size (of files) or the error.
type cacheView struct {
	mode, nlink, uid, gid uint32
	size                  int64 // -1 for directories (crypt's differ)
	err                   syscall.Errno
}

// TestCacheSeesDaemonChanges: with the default (long, CacheTimeout) entry
// and attribute lifetimes, every change made through the mount shows at
// once, through every name that sees it, as it does natively. Each step
// first stats every watched name (so that the kernel holds their entries
// and attributes), then makes one change, then stats them all again at
// once, well within the lifetime: a change whose effect the kernel does
// not see (the other names of a hard-linked inode, the parent directory,
// the mode an ACL sets, the set-user-ID bit a write by another user drops,
// a ctime an xattr moves) shows as a stale value against the plain
// directory.
func TestCacheSeesDaemonChanges(t *testing.T) {
	requireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root: to act as another user")
	}
	names := []string{"native"}
	dirs := map[string]string{"native": t.TempDir()}
	for _, v := range diffVariants {
		tm := newVolume(t, v)
		tm.mount(t, func(o *Options) { o.AllowOther = true })
		dirs[v.name] = tm.mnt
		names = append(names, v.name)
	}
	for _, dir := range dirs {
		for p := dir; p != "/" && p != os.TempDir(); p = path.Dir(p) {
			must(t, os.Chmod(p, 0777))
		}
	}
	watched := []string{"d", "d/f", "d/g", "e", "e/h", "d/sub", "e/sub", "d/new", "k", "k/x"}
	acl := binary.LittleEndian.AppendUint32(nil, aclVersion)
	acl = aclEntry(acl, aclUserObj, 7, aclUndefID)
	acl = aclEntry(acl, aclUser, 6, 1000)
	acl = aclEntry(acl, aclGroupObj, 4, aclUndefID)
	acl = aclEntry(acl, aclMask, 4, aclUndefID)
	acl = aclEntry(acl, aclOther, 0, aclUndefID)
	type step struct {
		name string
		do   func(dir string) error
	}
	p := func(dir, name string) string { return filepath.Join(dir, name) }
	steps := []step{
		{"setup", func(dir string) error {
			for _, d := range []string{"d", "e", "k"} {
				if err := os.Mkdir(p(dir, d), 0777); err != nil {
					return err
				}
			}
			return os.WriteFile(p(dir, "d/f"), []byte("content"), 0666)
		}},
		{"link", func(dir string) error { return os.Link(p(dir, "d/f"), p(dir, "d/g")) }},
		{"link-other-dir", func(dir string) error { return os.Link(p(dir, "d/g"), p(dir, "e/h")) }},
		{"chmod-via-link", func(dir string) error { return os.Chmod(p(dir, "e/h"), 0640) }},
		{"write-via-link", func(dir string) error {
			f, err := os.OpenFile(p(dir, "d/g"), os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				return err
			}
			_, err = f.WriteString(strings.Repeat("more", 3000))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			return err
		}},
		{"unlink-one-name", func(dir string) error { return os.Remove(p(dir, "d/f")) }},
		{"mkdir", func(dir string) error { return os.Mkdir(p(dir, "d/sub"), 0755) }},
		{"create", func(dir string) error { return os.WriteFile(p(dir, "d/new"), nil, 0644) }},
		{"rename-dir-across", func(dir string) error { return os.Rename(p(dir, "d/sub"), p(dir, "e/sub")) }},
		{"rename-over-link", func(dir string) error { return os.Rename(p(dir, "d/new"), p(dir, "e/h")) }},
		{"relink", func(dir string) error { return os.Link(p(dir, "d/g"), p(dir, "d/f")) }},
		{"rmdir", func(dir string) error { return os.Remove(p(dir, "e/sub")) }},
		{"setfacl-via-link", func(dir string) error {
			return unix.Setxattr(p(dir, "d/f"), "system.posix_acl_access", acl, 0)
		}},
		{"removeacl-via-link", func(dir string) error { return unix.Removexattr(p(dir, "d/g"), "system.posix_acl_access") }},
		{"user-xattr-via-link", func(dir string) error { return unix.Setxattr(p(dir, "d/f"), "user.cache", []byte("v"), 0) }},
		{"setuid", func(dir string) error { return syscall.Chmod(p(dir, "d/f"), 06777) }},
		{"other-user-writes-via-link", func(dir string) error {
			out, err := asUser("sh", "-c", `printf x >> "$1"`, "sh", p(dir, "d/g"))
			if err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			return nil
		}},
		{"truncate-via-open", func(dir string) error {
			f, err := os.OpenFile(p(dir, "d/g"), os.O_WRONLY|os.O_TRUNC, 0)
			if err != nil {
				return err
			}
			return f.Close()
		}},
		{"mkdir-in-k", func(dir string) error { return os.Mkdir(p(dir, "k/x"), 0700) }},
		{"rmdir-in-k", func(dir string) error { return os.Remove(p(dir, "k/x")) }},
		{"symlink-in-k", func(dir string) error { return os.Symlink("target", p(dir, "k/x")) }},
		{"unlink-last-names", func(dir string) error {
			for _, n := range []string{"d/f", "d/g"} {
				if err := os.Remove(p(dir, n)); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	look := func(dir, name string) (cacheView, unix.Timespec, unix.Timespec) {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, name), &st); err != nil {
			return cacheView{err: err.(syscall.Errno)}, unix.Timespec{}, unix.Timespec{}
		}
		v := cacheView{mode: st.Mode, nlink: uint32(st.Nlink), uid: st.Uid, gid: st.Gid, size: st.Size}
		if st.Mode&unix.S_IFMT == unix.S_IFDIR || st.Mode&unix.S_IFMT == unix.S_IFLNK {
			v.size = -1
		}
		return v, st.Mtim, st.Ctim
	}
	type times struct{ m, c unix.Timespec }
	last := map[string]map[string]times{}
	for _, n := range names {
		last[n] = map[string]times{}
	}
	for _, s := range steps {
		for _, n := range names {
			dir := dirs[n]
			for _, w := range watched { // the kernel caches them now
				_, m, c := look(dir, w)
				last[n][w] = times{m, c}
			}
			if err := s.do(dir); err != nil {
				t.Fatalf("%s on %s: %v", s.name, n, err)
			}
		}
		// Some changes move a timestamp by less than a clock tick: the
		// native side decides which ones count.
		for _, w := range watched {
			want, wm, wc := look(dirs["native"], w)
			mMoved := wm != last["native"][w].m
			cMoved := wc != last["native"][w].c
			for _, n := range names[1:] {
				got, gm, gc := look(dirs[n], w)
				if got != want {
					t.Errorf("after %s: %s on %s: %+v, natively %+v", s.name, w, n, got, want)
				}
				if mMoved && gm == last[n][w].m {
					t.Errorf("after %s: %s on %s: the mtime stayed %v, natively it moved", s.name, w, n, time.Unix(gm.Unix()))
				}
				if cMoved && gc == last[n][w].c {
					t.Errorf("after %s: %s on %s: the ctime stayed %v, natively it moved", s.name, w, n, time.Unix(gc.Unix()))
				}
			}
		}
	}
}

// TestSharedStorage: a change made in LOWER behind a running mount (by a
// second mount, a sync client) shows through a --shared-storage mount
// within its short lifetimes, and not through a default mount, whose
// kernel keeps what it saw for CacheTimeout (docs/limits.md: LOWER must not
// be changed behind a default mount). The file is held open so that the
// kernel cannot drop its entry and attributes early for its own reasons
// (memory pressure) and look it up anew.
// sharedShowsWithin bounds the wait for a change behind a shared-storage
// mount to show: SharedCacheTimeout, and the scheduling delays of a loaded
// machine on top (the wait ends when it shows).
const sharedShowsWithin = 60 * time.Second

func TestSharedStorage(t *testing.T) {
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			for _, shared := range []bool{true, false} {
				tm := newVolume(t, v)
				tm.mount(t, func(o *Options) { o.SharedStorage = shared })
				f := filepath.Join(tm.mnt, "f")
				must(t, os.WriteFile(f, []byte("x"), 0644))
				h, err := os.Open(f)
				must(t, err)
				defer h.Close()
				fi, err := os.Stat(f)
				must(t, err)
				if fi.Mode().Perm() != 0644 {
					t.Fatalf("mode %v, want 0644", fi.Mode())
				}
				// Behind the mount: chmod of the lower file.
				must(t, os.Chmod(faultLowerOf(t, tm.lower, f), 0600))
				deadline := time.Now().Add(SharedCacheTimeout + time.Second/2)
				if shared {
					deadline = time.Now().Add(sharedShowsWithin)
				}
				var mode os.FileMode
				for {
					fi, err := os.Stat(f)
					must(t, err)
					mode = fi.Mode().Perm()
					if mode == 0600 || time.Now().After(deadline) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				switch {
				case shared && mode != 0600:
					t.Errorf("shared storage: the chmod in LOWER is not seen after %v (mode %v)", sharedShowsWithin, mode)
				case !shared && mode != 0644:
					t.Errorf("default mount: the chmod in LOWER shows within %v (mode %v): the kernel does not keep attributes for CacheTimeout (%v)",
						SharedCacheTimeout+time.Second/2, mode, CacheTimeout)
				}
			}
		})
	}
}

// TestSharedStorageListing: a name made in a directory through a second
// mount of the same volume (a writer behind the first mount's back) shows
// in the first mount's next listing with --shared-storage, whose kernel
// keeps no listing; a default mount serves the listing it holds
// (FOPEN_CACHE_DIR) until the directory's attributes expire, and does not
// show it within SharedCacheTimeout. The directory is held open all
// through so that the kernel cannot drop it and its listing early.
func TestSharedStorageListing(t *testing.T) {
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			// The default mount's case is tried until a try no
			// drop_caches overlapped (up to five): another program's
			// (the integration tests' cold runs, in parallel) empties the
			// kernel's listings at any time.
			tries := []bool{true, false, false, false, false, false}
			for i, shared := range tries {
				tm := newVolume(t, v)
				tm.mount(t, func(o *Options) { o.SharedStorage = shared })
				d := filepath.Join(tm.mnt, "d")
				must(t, os.Mkdir(d, 0755))
				must(t, os.WriteFile(filepath.Join(d, "old"), nil, 0644))
				h, err := os.Open(d)
				must(t, err)
				defer h.Close()
				list := func() string {
					names, err := h.Readdirnames(-1)
					must(t, err)
					_, err = h.Seek(0, io.SeekStart)
					must(t, err)
					sort.Strings(names)
					return strings.Join(names, " ")
				}
				drops := cacheDrops(t)
				if got := list(); got != "old" {
					t.Fatalf("listing %q, want \"old\"", got)
				}
				second := &testMount{lower: tm.lower, mnt: filepath.Join(t.TempDir(), "mnt"), cfg: tm.cfg,
					master: tm.master, log: &syncBuffer{}}
				must(t, os.Mkdir(second.mnt, 0755))
				second.mount(t, func(o *Options) { o.SharedStorage = true })
				must(t, os.WriteFile(filepath.Join(second.mnt, "d", "new"), nil, 0644))
				deadline := time.Now().Add(SharedCacheTimeout + time.Second/2)
				if shared {
					deadline = time.Now().Add(sharedShowsWithin)
				}
				var got string
				for {
					got = list()
					if got == "new old" || time.Now().After(deadline) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				switch {
				case shared:
					if got != "new old" {
						t.Errorf("shared storage: a name made through a second mount is not listed after %v (%q)", sharedShowsWithin, got)
					}
				case got == "old":
					return
				case lowerDirAtime(t, tm.lower) == dirAtimeStrict:
					// On a strictatime lower mount every listing is the
					// daemon's, which shows the new name.
					return
				case cacheDrops(t) != drops:
					if i == len(tries)-1 {
						t.Logf("default mount: every try overlapped a drop_caches: not checked")
					}
				default:
					t.Errorf("default mount: a name made behind the mount is listed within %v (%q): the kernel does not keep the listing",
						SharedCacheTimeout+time.Second/2, got)
					return
				}
			}
		})
	}
}

// cacheDrops is how many times the page cache or the dentries and inodes
// were dropped (drop_caches) since boot, from /proc/vmstat.
func cacheDrops(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/vmstat")
	must(t, err)
	var sum int64
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) == 2 && (f[0] == "drop_pagecache" || f[0] == "drop_slab") {
			var v int64
			_, err := fmt.Sscan(f[1], &v)
			must(t, err)
			sum += v
		}
	}
	return sum
}
