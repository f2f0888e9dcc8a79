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
				f := filepath.Join(tm.mnt, "f")
				must(t, os.WriteFile(f, []byte("x"), 0644))
				ask(f, "security.selinux", 1)
				ask(f, "security.capability", 1)
				before := getxattr()
				ask(f, "security.selinux", 20)
				g := filepath.Join(tm.mnt, "g")
				must(t, os.WriteFile(g, []byte("x"), 0644))
				ask(g, "security.capability", 5)
				// f was made by the daemon and has no label: nor has any
				// entry it makes (no labelling security module).
				ask(g, "security.selinux", 5)
				h := filepath.Join(tm.mnt, "h")
				must(t, os.Mkdir(h, 0755))
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
					t.Errorf("known-absent xattrs were asked of LOWER again (lower time %d ns -> %d ns)", before.LowerNs, after.LowerNs)
				}
				if shared && !lowerCalls {
					t.Errorf("shared storage: GETXATTR answered without asking LOWER")
				}
			})
		}
	}
}

// TestXattrCacheLabelsLearnedFromMadeEntries: that new entries have no
// security.selinux is learned only from an entry the daemon made and
// nobody changed since. The root directory was not made by this daemon:
// its lack of a label says nothing of the entries made later, whose
// labels must still be asked of LOWER; once a made entry showed none,
// they are not.
func TestXattrCacheLabelsLearnedFromMadeEntries(t *testing.T) {
	v := diffVariants[0]
	tm := newVolume(t, v)
	rec := measure.NewRecorder("test")
	tm.mount(t, func(o *Options) { o.Recorder = rec })
	lowerNs := func() int64 {
		for _, s := range rec.Snapshot().Ops {
			if s.Op == "getxattr" {
				return s.LowerNs
			}
		}
		return 0
	}
	ask := func(p string) {
		t.Helper()
		if _, err := unix.Lgetxattr(p, "security.selinux", make([]byte, 64)); err != unix.ENODATA {
			t.Fatalf("getxattr %s security.selinux: %v, want ENODATA", p, err)
		}
	}
	ask(tm.mnt) // not made by the daemon
	// The first ask of a new entry's label goes to LOWER: nothing
	// made by the daemon has shown its lack of one yet.
	f := filepath.Join(tm.mnt, "f")
	must(t, os.WriteFile(f, []byte("x"), 0644))
	before := lowerNs()
	ask(f)
	if lowerNs() == before {
		t.Fatalf("the label of a new file was not asked of LOWER, though only the root (not made by the daemon) had shown none")
	}
	// An entry whose xattrs were changed is not as made: a removal
	// teaches nothing either (here: of a label it never had).
	g := filepath.Join(tm.mnt, "g")
	must(t, os.WriteFile(g, []byte("x"), 0644))
	_ = unix.Lremovexattr(g, "user.none")
	before = lowerNs()
	ask(g)
	// f showed that made entries have none: g was made after f's
	// answer but its removexattr made it unknown, so LOWER is asked;
	// a third file is known at once.
	if lowerNs() == before {
		t.Fatalf("the label of a file whose xattrs were changed was answered from memory")
	}
	k := filepath.Join(tm.mnt, "k")
	must(t, os.WriteFile(k, []byte("x"), 0644))
	before = lowerNs()
	ask(k)
	if lowerNs() != before {
		t.Fatalf("the label of a file made after a made file showed none was asked of LOWER")
	}
}
