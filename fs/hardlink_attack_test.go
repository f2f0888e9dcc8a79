package fs

// Hard links planted in LOWER. Whoever can write LOWER can, where
// fs.protected_hardlinks is 0 (the kernel's default; distributions set
// it to 1), hard-link any file of the host on the same filesystem into
// it, root's included. A daemon running as root must then never open an
// existing lower name to write it without knowing which inode it got: the
// metadata it rewrites (directory IV, long-name sidecars) and the file
// the kernel asked it to open after a lookup may both be such a link.

import (
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/names"
)

// unprotectHardlinks sets fs.protected_hardlinks to 0 for the test, so
// that an unprivileged user can hard-link a root-owned file.
func unprotectHardlinks(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon runs as root, the attacker as uid 1000")
	}
	const p = "/proc/sys/fs/protected_hardlinks"
	old, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("no %s: %v", p, err)
	}
	if err := os.WriteFile(p, []byte("0"), 0644); err != nil {
		t.Skipf("cannot set %s to 0 (%v): the attack needs it", p, err)
	}
	t.Cleanup(func() { os.WriteFile(p, old, 0644) })
}

// rootSecret makes a root-owned 0600 file outside LOWER (on LOWER's
// filesystem, so that it can be hard-linked there), its directories
// reachable by uid 1000.
func rootSecret(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "outside")
	must(t, os.Mkdir(dir, 0755))
	p := filepath.Join(dir, "secret")
	must(t, os.WriteFile(p, []byte("root's secret, never to be truncated or read by others\n"), 0600))
	must(t, os.Chown(p, 0, 0))
	ageTree(t, dir)
	reachable(t, dir)
	return p
}

// reachable lets other users search every directory above p, p included.
func reachable(t *testing.T, p string) {
	t.Helper()
	for ; p != "/" && p != os.TempDir(); p = filepath.Dir(p) {
		var st unix.Stat_t
		must(t, unix.Stat(p, &st))
		must(t, os.Chmod(p, os.FileMode(st.Mode&0777|0755)))
	}
}

// fileState is what must not change of the secret: its bytes, size,
// mode, owner, mtime and, with atime, its atime (not the link count or
// ctime, which the planted links move).
func fileState(t *testing.T, p string, atime bool) string {
	t.Helper()
	var st unix.Stat_t
	must(t, unix.Lstat(p, &st))
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
	must(t, err)
	f := os.NewFile(uintptr(fd), p)
	h := sha256.New()
	_, err = f.WriteTo(h)
	f.Close()
	must(t, err)
	acl := make([]byte, 256)
	n, _ := unix.Lgetxattr(p, "system.posix_acl_access", acl)
	s := fmt.Sprintf("mode=%o uid=%d gid=%d size=%d mtime=%d.%d sha256=%x acl=%x",
		st.Mode, st.Uid, st.Gid, st.Size, st.Mtim.Sec, st.Mtim.Nsec, h.Sum(nil), acl[:max(n, 0)])
	if atime {
		s += fmt.Sprintf(" atime=%d.%d", st.Atim.Sec, st.Atim.Nsec)
	}
	return s
}

// plantLink hard-links target to the lower name p as uid 1000.
func plantLink(t *testing.T, target, p string) {
	t.Helper()
	if out, err := asUser("ln", target, p); err != nil {
		t.Fatalf("ln %s %s as uid 1000: %v: %s", target, p, err, out)
	}
}

// TestHardlinkMetadata plants a hard link to a root-owned file under the
// name of metadata the daemon rewrites: the IV of an empty directory whose
// IV is torn (rewritten when the directory is listed) and the sidecar slot
// of a long name about to be created. The secret must not change, and the
// mount must work as it would with garbage there.
func TestHardlinkMetadata(t *testing.T) {
	unprotectHardlinks(t)
	for _, v := range deepVariants[:4] {
		if v.cipher == "" || v.plaintextNames {
			continue // no directory IVs or sidecars
		}
		t.Run(v.name, func(t *testing.T) {
			secret := rootSecret(t)
			tm := newVolume(t, v)
			tm.mount(t)
			long := strings.Repeat("L", 200)
			must(t, os.WriteFile(filepath.Join(tm.mnt, "keep"), []byte("keep"), 0644))
			must(t, os.Mkdir(filepath.Join(tm.mnt, "empty"), 0755))
			tm.unmountNow(t)

			reachable(t, tm.lower)
			must(t, os.Chmod(tm.lower, 0777))
			le := lowerPath(t, tm, "empty")
			must(t, os.Chmod(le, 0777))
			must(t, os.Remove(filepath.Join(le, names.DirIVFile)))
			plantLink(t, secret, filepath.Join(le, names.DirIVFile))
			plantLink(t, secret, lowerPath(t, tm, long)+names.LongSuffix)
			// The daemon reads the planted files (to find the IV torn,
			// the sidecar not the name's), which moves their atime
			// (fileState without it); it must not write them.
			before := fileState(t, secret, false)

			tm.unmounted = false
			tm.mount(t)
			// The IV "torn" (the secret is not 16 bytes) in an empty
			// directory: a new one is written at the listing.
			if ents, err := os.ReadDir(filepath.Join(tm.mnt, "empty")); err != nil || len(ents) != 0 {
				t.Errorf("listing the directory with a planted IV: %v, %v", ents, err)
			}
			must(t, os.WriteFile(filepath.Join(tm.mnt, "empty", "x"), []byte("x"), 0644))
			// The sidecar slot holds something else than the long name:
			// it is replaced at the create.
			must(t, os.WriteFile(filepath.Join(tm.mnt, long), []byte("long"), 0644))
			if got, err := os.ReadFile(filepath.Join(tm.mnt, long)); err != nil || string(got) != "long" {
				t.Errorf("long name created over a planted sidecar link reads %q, %v", got, err)
			}
			if after := fileState(t, secret, false); after != before {
				t.Errorf("the root-owned file linked into LOWER changed:\nbefore %s\nafter  %s", before, after)
			}
			alive(t, tm)
		})
	}
}

// TestHardlinkSwapBeforeOpen replaces, between the kernel's lookup of a
// file of uid 1000 and the open (chmod, truncate, setfacl) that uid makes
// within the attribute timeout, the file's lower name with a hard link to
// a root-owned file: the kernel checks the call against the attributes
// it cached (uid 1000's file), and the daemon acts on what is under the
// name now. Also the
// create of a name the kernel has cached as absent while a hard link
// appeared under it in LOWER (the daemon's O_EXCL create finds it). The
// opener must not get the root-owned file, for writing (the kernel would
// truncate it through the descriptor the daemon opened: O_TRUNC comes as
// a SETATTR on the open file) nor for reading (the twin would show it),
// and the file must not change.
func TestHardlinkSwapBeforeOpen(t *testing.T) {
	unprotectHardlinks(t)
	for _, v := range deepVariants[:4] {
		t.Run(v.name, func(t *testing.T) {
			secret := rootSecret(t)
			tm := newVolume(t, v)
			tm.mount(t, func(o *Options) { o.AllowOther = true })
			reachable(t, tm.mnt)
			reachable(t, tm.lower)
			must(t, os.Chmod(tm.lower, 0777))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "keep"), []byte("keep"), 0644))
			before := fileState(t, secret, true)

			// Each attack swaps the name in LOWER, then runs script as
			// uid 1000 within the kernel's attribute and entry timeouts.
			type attack struct {
				what   string
				create bool   // the name is absent for the kernel
				script string // sh script run as uid 1000 with the path as $1
				logged string // the daemon's log line when it meets the swap
			}
			attacks := []attack{
				{"read", false, `exec 3< "$1" && echo OPENED && cat <&3`, "not the inode the kernel knows"},
				{"write with O_TRUNC", false, `exec 3> "$1" && echo OPENED && printf pwned >&3`, "not the inode the kernel knows"},
				{"create without O_EXCL", true, `exec 3> "$1" && echo OPENED && printf pwned >&3`, "create found an entry made behind"},
				{"chmod", false, `chmod 666 "$1" && echo OPENED`, "not the inode the kernel knows"},
				{"truncate", false, `truncate -s 0 "$1" && echo OPENED`, "not the inode the kernel knows"},
			}
			if _, err := exec.LookPath("setfacl"); err == nil {
				attacks = append(attacks, attack{"setfacl", false, `setfacl -m u:1000:rw "$1" && echo OPENED`, "not the inode the kernel knows"})
			} else {
				t.Log("setfacl not installed (Debian package acl): the ACL attack is not run")
			}
			for i, at := range attacks {
				met := false
				for try := 0; try < 5 && !met; try++ {
					name := fmt.Sprintf("f%d-%d", i, try)
					p := filepath.Join(tm.mnt, name)
					spare := filepath.Join(tm.lower, fmt.Sprintf(".spare%d-%d", i, try))
					plantLink(t, secret, spare)
					if at.create {
						if _, err := os.Lstat(p); !os.IsNotExist(err) {
							t.Fatalf("%s: %v, want ENOENT", name, err)
						}
					} else {
						must(t, os.WriteFile(p, []byte("uid 1000's own file"), 0644))
						must(t, os.Chown(p, 1000, 1000))
						var st unix.Stat_t
						must(t, unix.Stat(p, &st)) // the kernel's node, fresh
					}
					logLen := len(tm.log.String())
					t0 := time.Now()
					must(t, os.Rename(spare, lowerPath(t, tm, name)))
					out, _ := asUser("sh", "-c", at.script, "sh", p) // OPENED: it got through
					met = strings.Contains(tm.log.String()[logLen:], at.logged)
					if strings.Contains(string(out), "OPENED") || strings.Contains(string(out), "root's secret") {
						t.Errorf("%s: uid 1000 reached the root-owned file linked into LOWER: %q", at.what, out)
						met = true
					} else if met && !strings.Contains(string(out), "Permission denied") && !strings.Contains(string(out), "Operation not permitted") {
						// ESTALE makes the kernel look the name up again and
						// check uid 1000 against the file it finds there.
						t.Errorf("%s: %q, want EACCES or EPERM (the kernel's own check of the file now under the name)", at.what, out)
					}
					if !met {
						t.Logf("%s: the daemon did not meet the swap (%v after it: attribute timeout passed?): %q", at.what, time.Since(t0), out)
					}
				}
				if !met {
					t.Errorf("%s: the daemon never met the swapped file in 5 tries", at.what)
				}
			}
			if after := fileState(t, secret, true); after != before {
				t.Errorf("the root-owned file linked into LOWER changed:\nbefore %s\nafter  %s", before, after)
			}
			alive(t, tm)
		})
	}
}

// TestChmodNewEntry: the chmod that gives a new entry its mode (the
// daemon's umask took bits away, or mkdir's write-permission dance) acts
// by name after the creation; in between, whoever can write LOWER may
// have put a hard link to someone else's file, or a symlink, under the
// name. Neither may change that file.
func TestChmodNewEntry(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(dir, "secret")
	must(t, os.WriteFile(secret, []byte("secret"), 0600))
	must(t, os.Link(secret, filepath.Join(dir, "linked")))
	must(t, os.Symlink(secret, filepath.Join(dir, "symlinked")))
	must(t, os.WriteFile(filepath.Join(dir, "new"), nil, 0600))
	must(t, os.Mkdir(filepath.Join(dir, "newdir"), 0700))
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)

	for name, want := range map[string]error{"linked": unix.EPERM, "symlinked": unix.EOPNOTSUPP, "new": nil, "newdir": nil} {
		if err := chmodAt(fd, name, 0666); err != want {
			t.Errorf("chmodAt %s: %v, want %v", name, err, want)
		}
	}
	for name, want := range map[string]os.FileMode{"secret": 0600, "new": 0666, "newdir": 0666} {
		fi, err := os.Lstat(filepath.Join(dir, name))
		must(t, err)
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), want)
		}
	}
}

// TestCreateFindsLowerEntry: a create of a name the kernel holds as absent
// while the entry has appeared in LOWER behind the mount's back (as
// another mount of the same LOWER would make it) opens the existing file,
// after the kernel looked it up again (ESTALE), content intact; a long
// name keeps its sidecar, so the entry stays listed.
func TestCreateFindsLowerEntry(t *testing.T) {
	for _, v := range deepVariants[:4] {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			name := "back"
			crypt := v.cipher != "" && !v.plaintextNames
			if crypt {
				name = strings.Repeat("L", 200)
			}
			p := filepath.Join(tm.mnt, name)
			must(t, os.WriteFile(filepath.Join(tm.mnt, "src"), []byte("content"), 0644))
			// The kernel's negative entry for the name is what sends the
			// create as a CREATE; another program's drop_caches (the
			// integration tests', in parallel) drops it: counted from here.
			drops := cacheDrops(t)
			if _, err := os.Lstat(p); !os.IsNotExist(err) {
				t.Fatalf("%s: %v, want ENOENT", name, err)
			}
			// The entry appears in LOWER, with its sidecar.
			lp := lowerPath(t, tm, name)
			if crypt {
				iv, err := os.ReadFile(filepath.Join(tm.lower, names.DirIVFile))
				must(t, err)
				cName, err := nameCipher(t, tm).Encrypt(name, iv)
				must(t, err)
				must(t, os.WriteFile(lp+names.LongSuffix, []byte(cName), 0400))
			}
			must(t, os.Rename(lowerPath(t, tm, "src"), lp))
			logLen := len(tm.log.String())
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0644)
			if err != nil {
				t.Fatalf("create of a name that appeared in LOWER: %v", err)
			}
			f.Close()
			if !strings.Contains(tm.log.String()[logLen:], "create found an entry made behind") {
				if cacheDrops(t) != drops {
					t.Logf("the create did not reach the daemon as a CREATE, but a drop_caches overlapped: not checked")
				} else {
					t.Errorf("the create did not reach the daemon as a CREATE:\n%s", tm.log.String()[logLen:])
				}
			}
			if got, err := os.ReadFile(p); err != nil || string(got) != "content" {
				t.Errorf("%s reads %q, %v; want its content", name, got, err)
			}
			ents, err := os.ReadDir(tm.mnt)
			must(t, err)
			listed := false
			for _, e := range ents {
				listed = listed || e.Name() == name
			}
			if !listed {
				t.Errorf("%s is not listed after the create (sidecar dropped?)\n%s", name, tm.log.String())
			}
		})
	}
}
