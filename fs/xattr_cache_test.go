package fs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// TestXattrCacheSeesDaemonChanges: a node remembers which well-known
// xattrs its lower object lacks (xattr_cache.go). Every change made
// through the mount shows at the next call, as natively: a SETXATTR of a
// name the node knew absent, an xattr set through another hard link of
// the inode, a default ACL set on a directory whose lack of one a create
// had learned (its next children inherit it), the ACLs a new entry gets
// from its parent, a REMOVEXATTR. Each name is asked first, so that the
// node learns its absence, then changed, then asked again.
func TestXattrCacheSeesDaemonChanges(t *testing.T) {
	names, dirs := modeTargets(t)
	bin := helperBin(t)
	acl := posixACLValue()
	const fileCap = "0000000200200000000000000000000000000000"
	// Before: what the nodes learn.
	script1 := strings.Join([]string{
		"umask 0022",
		"mkdir d 0777", "mkdir e 0777",
		"create d/f 0666", "create d/k 0666", "create e/a 0666",
		"getxattr d/f security.capability", "getxattr d/f security.selinux",
		"getxattr d/f system.posix_acl_access", "getxattr d system.posix_acl_default",
		"getxattr d/k security.capability", "getxattr e system.posix_acl_default",
		"getxattr e/a system.posix_acl_access",
		// Changes through the mount, each asked again at once.
		"setxattr d/f security.capability " + fileCap, "getxattr d/f security.capability",
		"setxattr d/f security.selinux 6c6162656c00", "getxattr d/f security.selinux",
		"setxattr d/f system.posix_acl_access " + acl, "getxattr d/f system.posix_acl_access",
		"setxattr d/k security.capability " + fileCap,
		"setxattr e system.posix_acl_default " + acl, "getxattr e system.posix_acl_default",
		"create e/b 0666", "lstat e/b", "getxattr e/b system.posix_acl_access",
		"mkdir e/s 0777", "lstat e/s", "getxattr e/s system.posix_acl_default",
		"getxattr e/s system.posix_acl_access",
		"create e/s/c 0666", "lstat e/s/c", "getxattr e/s/c system.posix_acl_access",
		"removexattr d/f security.selinux", "getxattr d/f security.selinux",
		"getxattr e/a system.posix_acl_access",
	}, "\n") + "\n"
	// A hard link made after d/k's capability was set is the same inode.
	script2 := strings.Join([]string{
		"getxattr d/k2 security.capability", "getxattr d/k security.capability",
		"removexattr d/k2 security.capability", "getxattr d/k security.capability",
		"setxattr d/k security.capability " + fileCap, "getxattr d/k2 security.capability",
		"getxattr d/f security.capability",
	}, "\n") + "\n"
	got := map[string][]string{}
	for _, name := range names {
		res := runScript(t, bin, 0, dirs[name], script1)
		must(t, os.Link(filepath.Join(dirs[name], "d/k"), filepath.Join(dirs[name], "d/k2")))
		res = append(res, runScript(t, bin, 0, dirs[name], script2)...)
		got[name] = res
	}
	compareTargets(t, "xattrs after changes", names, got)
	n := strings.Join(got["native"], "\n")
	for _, want := range []string{
		"getxattr d/f security.capability: ENODATA", "getxattr d/f security.capability: ok " + fileCap,
		"getxattr e/b system.posix_acl_access: ok", "getxattr e/s system.posix_acl_default: ok",
		"getxattr d/k2 security.capability: ok " + fileCap,
	} {
		if !strings.Contains(n, want) {
			t.Errorf("natively no %q in:\n%s", want, n)
		}
	}
}

// TestXattrCacheAnswers: once LOWER said that a file has no
// security.selinux (ls -l asks for it on every file), the next calls are
// answered without a system call in LOWER (no lower time in the getxattr
// statistics), and a new file is known to have no security.capability
// (asked before a chown and the first write) once LOWER has said so of
// another file, nor an access ACL once its directory is known to have no
// default ACL; with shared storage every call goes to LOWER.
func TestXattrCacheAnswers(t *testing.T) {
	for _, v := range diffVariants {
		for _, shared := range []bool{false, true} {
			name := v.name
			if shared {
				name += "/shared"
			}
			t.Run(name, func(t *testing.T) {
				tm := newVolume(t, v)
				rec := measure.NewRecorder("test")
				tm.mount(t, func(o *Options) { o.Recorder = rec; o.SharedStorage = shared })
				getxattr := func() measure.Stats {
					for _, s := range rec.Snapshot().Ops {
						if s.Op == "getxattr" {
							return s
						}
					}
					return measure.Stats{}
				}
				ask := func(p, attr string, times int) {
					for i := 0; i < times; i++ {
						if _, err := unix.Lgetxattr(p, attr, make([]byte, 64)); err != unix.ENODATA {
							t.Fatalf("getxattr %s %s: %v, want ENODATA", p, attr, err)
						}
					}
				}
				// What a node knows goes with it when the kernel
				// forgets the inode: each file stays open, so that
				// another program's drop_caches (the integration tests',
				// in parallel) cannot make it do so; and a drop counts
				// (the directory, pinned only after its mkdir).
				drops := cacheDrops(t)
				f := filepath.Join(tm.mnt, "f")
				createOpen(t, f)
				ask(f, "security.selinux", 1)
				ask(f, "security.capability", 1)
				before := getxattr()
				ask(f, "security.selinux", 20)
				g := filepath.Join(tm.mnt, "g")
				createOpen(t, g)
				ask(g, "security.capability", 5)
				// f was made by the daemon and has no label: nor has any
				// entry it makes (no labelling security module).
				ask(g, "security.selinux", 5)
				h := filepath.Join(tm.mnt, "h")
				must(t, os.Mkdir(h, 0755))
				keepOpen(t, h)
				ask(h, "security.selinux", 5)
				// A new file in a directory without a default ACL has no
				// access ACL (the kernel asks once, then caches it).
				ask(g, "system.posix_acl_access", 1)
				after := getxattr()
				// (The kernel asks for g's security.capability at its
				// first write too.)
				if after.Count-before.Count < 35 {
					t.Fatalf("%d GETXATTR reached the daemon, want at least 35", after.Count-before.Count)
				}
				lowerCalls := after.LowerNs != before.LowerNs
				if !shared && lowerCalls {
					if cacheDrops(t) != drops {
						t.Logf("known-absent xattrs were asked of LOWER again, but a drop_caches overlapped: not checked")
					} else {
						t.Errorf("known-absent xattrs were asked of LOWER again (lower time %d ns -> %d ns)", before.LowerNs, after.LowerNs)
					}
				}
				if shared && !lowerCalls {
					t.Errorf("shared storage: GETXATTR answered without asking LOWER")
				}
			})
		}
	}
}

// TestXattrCacheLabelProbe: whether the entries the daemon makes get a
// security.selinux is learned once, from the first entry it makes
// (probeLabel). The root directory, not made by the daemon, is asked of
// LOWER; the first file made is known at once to have none, and so is
// every entry made after it (a file, a directory), until its xattrs are
// changed (a REMOVEXATTR, even one that fails, forgets what the node
// knew). With shared storage, every call goes to LOWER.
func TestXattrCacheLabelProbe(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(map[bool]string{false: "own", true: "shared"}[shared], func(t *testing.T) {
			tm := newVolume(t, diffVariants[0])
			rec := measure.NewRecorder("test")
			tm.mount(t, func(o *Options) { o.Recorder = rec; o.SharedStorage = shared })
			lowerNs := func() int64 { return opStats(rec, "getxattr").LowerNs }
			// asked reports whether asking p's label reached LOWER.
			asked := func(p string) bool {
				t.Helper()
				before := lowerNs()
				if _, err := unix.Lgetxattr(p, "security.selinux", make([]byte, 64)); err != unix.ENODATA {
					t.Fatalf("getxattr %s security.selinux: %v, want ENODATA", p, err)
				}
				return lowerNs() != before
			}
			if !asked(tm.mnt) {
				t.Errorf("the root's label was answered from memory")
			}
			// The new entries stay open, so that another program's
			// drop_caches cannot make the kernel forget them (and the
			// daemon what it knew of them); and a drop counts (the
			// directory, pinned only after its mkdir).
			drops := cacheDrops(t)
			f := filepath.Join(tm.mnt, "f")
			createOpen(t, f)
			d := filepath.Join(tm.mnt, "d")
			must(t, os.Mkdir(d, 0755))
			keepOpen(t, d)
			g := filepath.Join(d, "g")
			createOpen(t, g)
			for _, p := range []string{f, d, g} {
				if got := asked(p); got != shared {
					if got && cacheDrops(t) != drops {
						t.Logf("label of new entry %s asked of LOWER, but a drop_caches overlapped: not checked", p)
						continue
					}
					t.Errorf("label of new entry %s asked of LOWER: %v, want %v", p, got, shared)
				}
			}
			_ = unix.Lremovexattr(g, "user.none")
			if !asked(g) {
				t.Errorf("after a removexattr, the label of %s was answered from memory", g)
			}
		})
	}
}

// keepOpen holds p open (O_PATH) until the test ends: the kernel cannot
// forget an inode in use, so a drop_caches (another test's) cannot make
// the daemon forget its node either.
func keepOpen(t *testing.T, p string) {
	t.Helper()
	fd, err := unix.Open(p, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	must(t, err)
	t.Cleanup(func() { unix.Close(fd) })
}

// createOpen makes the file p with one byte and holds it open until the
// test ends (see keepOpen), with no moment between when it is not.
func createOpen(t *testing.T, p string) {
	t.Helper()
	fh, err := os.Create(p)
	must(t, err)
	t.Cleanup(func() { fh.Close() })
	_, err = fh.Write([]byte("x"))
	must(t, err)
}
