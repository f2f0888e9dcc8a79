package fs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/links"
	cnames "github.com/twincrypt/twincrypt/cipher/names"
	"github.com/twincrypt/twincrypt/fs/fsck"
)

// linkVariants are the variants a symlink target goes through: both
// ciphers, plaintext names (targets are sealed all the same) and the twin.
var linkVariants = append(variants[:len(variants):len(variants)],
	variant{name: "plainnames", cipher: "aes-xts", keyBytes: 64, plaintextNames: true})

// linkLens are the target lengths tried: around the 3043 bytes that fit
// sealed into a lower symlink, up to PATH_MAX-1, and PATH_MAX itself,
// which the kernel refuses.
var linkLens = []int{1, 255, 3000, 3043, 3044, 3100, 4000, 4094, 4095, 4096}

// longTarget is a path-like target of n bytes, different for each n.
func longTarget(n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "dir%d-%d/", n, i)
	}
	return b.String()[:n]
}

// storeCount is the number of long-link sidecars in LOWER.
func storeCount(t *testing.T, lower string) int {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(lower, links.StoreDir))
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// sameLink compares rel under the native directory and the mount: type,
// mode, link count, size (lstat) and readlink's target and errno.
func sameLink(t *testing.T, native, mnt, rel string) {
	t.Helper()
	want, got := lstatLine(filepath.Join(native, rel)), lstatLine(filepath.Join(mnt, rel))
	if want != got {
		t.Errorf("%s:\nnative %.200s\nmount  %.200s", rel, want, got)
	}
}

// TestLongSymlinks checks symlink targets of every length up to PATH_MAX
// against a native directory: create (4096 gives the native errno),
// readlink, lstat size, listing, rename across directories, hard links
// (the sidecar goes with the last name only), rename over a long link,
// remount, and fsck before and after a sidecar is deleted.
func TestLongSymlinks(t *testing.T) {
	for _, v := range linkVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			native := t.TempDir()
			long := 0 // long links expected in the store
			for _, root := range []string{native, tm.mnt} {
				must(t, os.Mkdir(filepath.Join(root, "a"), 0755))
				must(t, os.Mkdir(filepath.Join(root, "b"), 0755))
			}
			made := map[int]bool{}
			for _, n := range linkLens {
				rel := fmt.Sprintf("a/l%d", n)
				wantErr := errnoOf(unix.Symlink(longTarget(n), filepath.Join(native, rel)))
				gotErr := errnoOf(unix.Symlink(longTarget(n), filepath.Join(tm.mnt, rel)))
				if wantErr != gotErr {
					t.Errorf("symlink of a %d-byte target: native %v, mount %v", n, wantErr, gotErr)
				}
				if wantErr != 0 {
					continue
				}
				made[n] = true
				if n > 3043 && v.cipher != "" {
					long++
				}
				sameLink(t, native, tm.mnt, rel)
				if got, err := os.Readlink(filepath.Join(tm.mnt, rel)); err != nil || got != longTarget(n) {
					t.Errorf("readlink of a %d-byte target: %d bytes, %v", n, len(got), err)
				}
			}
			if !made[4095] || made[4096] {
				t.Fatalf("native symlinks made: %v; want up to 4095 bytes", made)
			}
			if got := storeCount(t, tm.lower); got != long {
				t.Errorf("%d sidecars in the store, want %d", got, long)
			}
			sameListing := func() {
				t.Helper()
				for _, d := range []string{"", "a", "b"} {
					want, _ := listing(filepath.Join(native, d))
					got, _ := listing(filepath.Join(tm.mnt, d))
					if string(want) != string(got) {
						t.Errorf("listing of /%s:\nnative %s\nmount  %s", d, want, got)
					}
				}
			}
			sameListing()

			// Rename every link to the other directory.
			for n := range made {
				for _, root := range []string{native, tm.mnt} {
					must(t, os.Rename(filepath.Join(root, "a", fmt.Sprintf("l%d", n)), filepath.Join(root, "b", fmt.Sprintf("l%d", n))))
				}
				sameLink(t, native, tm.mnt, fmt.Sprintf("b/l%d", n))
			}
			sameListing()

			// A hard link: the sidecar stays until the last name goes.
			for _, root := range []string{native, tm.mnt} {
				must(t, os.Link(filepath.Join(root, "b/l4000"), filepath.Join(root, "a/h4000")))
			}
			sameLink(t, native, tm.mnt, "a/h4000")
			sameLink(t, native, tm.mnt, "b/l4000")
			for _, root := range []string{native, tm.mnt} {
				must(t, os.Remove(filepath.Join(root, "b/l4000")))
			}
			sameLink(t, native, tm.mnt, "a/h4000")
			if got := storeCount(t, tm.lower); got != long {
				t.Errorf("after unlinking one of two names: %d sidecars, want %d", got, long)
			}
			for _, root := range []string{native, tm.mnt} {
				must(t, os.Remove(filepath.Join(root, "a/h4000")))
			}
			if v.cipher != "" {
				long--
			}
			if got := storeCount(t, tm.lower); got != long {
				t.Errorf("after unlinking the last name: %d sidecars, want %d", got, long)
			}

			// Rename a short link over a long one, and a long one over a
			// long one.
			for _, root := range []string{native, tm.mnt} {
				must(t, os.Symlink("short", filepath.Join(root, "a/short")))
				must(t, os.Rename(filepath.Join(root, "a/short"), filepath.Join(root, "b/l4094")))
				must(t, os.Rename(filepath.Join(root, "b/l3100"), filepath.Join(root, "b/l3044")))
			}
			if v.cipher != "" {
				long -= 2
			}
			if got := storeCount(t, tm.lower); got != long {
				t.Errorf("after renames over long links: %d sidecars, want %d", got, long)
			}
			sameLink(t, native, tm.mnt, "b/l4094")
			sameLink(t, native, tm.mnt, "b/l3044")

			// A rename between two names of one long link changes nothing.
			for _, root := range []string{native, tm.mnt} {
				must(t, os.Link(filepath.Join(root, "b/l4095"), filepath.Join(root, "a/h4095")))
				must(t, os.Rename(filepath.Join(root, "a/h4095"), filepath.Join(root, "b/l4095")))
			}
			sameLink(t, native, tm.mnt, "a/h4095")
			sameLink(t, native, tm.mnt, "b/l4095")
			for _, root := range []string{native, tm.mnt} {
				must(t, os.Remove(filepath.Join(root, "a/h4095")))
			}
			if got := storeCount(t, tm.lower); got != long {
				t.Errorf("after a rename between two names of one link: %d sidecars, want %d", got, long)
			}
			// The store is no name in the mounted view.
			if want, got := lstatLine(filepath.Join(native, links.StoreDir)), lstatLine(filepath.Join(tm.mnt, links.StoreDir)); want != got {
				t.Errorf("lstat of /%s: native %s, mount %s", links.StoreDir, want, got)
			}
			sameListing()

			// Remount: a new daemon reads the markers afresh.
			tm.unmountNow(t)
			tm.unmounted = false
			tm.mount(t)
			for _, rel := range []string{"b/l1", "b/l255", "b/l3000", "b/l3043", "b/l3044", "b/l4094", "b/l4095"} {
				sameLink(t, native, tm.mnt, rel)
			}
			sameListing()
			if v.cipher == "" {
				return
			}
			tm.unmountNow(t)
			rep, err := fsck.Check(tm.lower, tm.cfg, tm.master, fsck.Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rep.Problems {
				t.Errorf("fsck: %s %s: %s", p.Kind, p.Lower, p.Detail)
			}
			if rep.Symlinks != int64(len(made)-2) {
				t.Errorf("fsck counted %d symlinks, want %d", rep.Symlinks, len(made)-2)
			}

			// A lost sidecar and a stray one, and what a crash leaves of
			// a sidecar write and of a length probe (linkFits): fsck
			// reports them all, --repair moves the link aside and
			// deletes the stray files.
			_, m := newLongLink(t, tm.lower, 4095, nil)
			_, id, _ := links.ParseMarker(m)
			must(t, os.Rename(filepath.Join(tm.lower, links.Sidecar(id)), filepath.Join(tm.lower, links.StoreDir, strings.Repeat("0", links.IDLen))))
			must(t, os.Symlink(strings.Repeat("x", 2000), filepath.Join(tm.lower, links.StoreDir, cnames.TmpPrefix+"0123456789abcdef")))
			must(t, os.WriteFile(filepath.Join(tm.lower, links.StoreDir, cnames.TmpPrefix+"fedcba9876543210"), []byte("half"), 0o400))
			rep, err = fsck.Check(tm.lower, tm.cfg, tm.master, fsck.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var kinds []string
			for _, p := range rep.Problems {
				kinds = append(kinds, string(p.Kind))
			}
			sort.Strings(kinds)
			if want := "link-sidecar-missing link-sidecar-orphaned link-sidecar-orphaned link-sidecar-orphaned"; strings.Join(kinds, " ") != want {
				t.Errorf("fsck after a sidecar was renamed: %v, want %s", kinds, want)
			}
			rep, err = fsck.Check(tm.lower, tm.cfg, tm.master, fsck.Options{Repair: true})
			if err != nil || rep.Unrepaired() != 0 {
				t.Fatalf("fsck --repair: %v, %+v", err, rep)
			}
			rep, err = fsck.Check(tm.lower, tm.cfg, tm.master, fsck.Options{})
			if err != nil || !rep.Clean() {
				t.Errorf("fsck after --repair: %v, %+v", err, rep.Problems)
			}
		})
	}
}

// longLinks maps the lower path of every long link whose target is n
// bytes long to its marker.
func longLinks(lower string, n int) map[string]string {
	found := map[string]string{}
	filepath.WalkDir(lower, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type()&os.ModeSymlink != 0 {
			target, _ := os.Readlink(p)
			if m, _, ok := links.ParseMarker(target); ok && m == n {
				found[p] = target
			}
		}
		return nil
	})
	return found
}

// newLongLink returns the lower path and marker of the one long link of
// n bytes in LOWER that is not in old.
func newLongLink(t *testing.T, lower string, n int, old map[string]string) (string, string) {
	t.Helper()
	var p, m string
	count := 0
	for path, marker := range longLinks(lower, n) {
		if _, ok := old[path]; !ok {
			p, m = path, marker
			count++
		}
	}
	if count != 1 {
		t.Fatalf("%d new long links of %d bytes in LOWER, want 1", count, n)
	}
	return p, m
}

// TestLongSymlinkHostile tampers with long links in LOWER: a flipped
// sidecar byte, swapped sidecars (of targets of equal length), a marker
// edited to claim another length, a sidecar or the whole store swapped for a
// symlink out of LOWER, an oversized sidecar, a FIFO. Each readlink gives
// EIO; nothing outside LOWER is read or changed, and the mount lives on.
// With shared storage the kernel keeps no symlink target, so every
// readlink reaches the daemon, which must see the tampering; on a default
// mount the kernel may still hold the target it was given before (the
// authentic one): each readlink gives EIO or that target, never another.
func TestLongSymlinkHostile(t *testing.T) {
	for _, v := range linkVariants {
		if v.cipher == "" {
			continue
		}
		for _, shared := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s/shared=%v", v.name, shared), func(t *testing.T) {
				testLongSymlinkHostile(t, v, shared)
			})
		}
	}
}

func testLongSymlinkHostile(t *testing.T, v variant, shared bool) {
	tm := newVolume(t, v)
	tm.mount(t, func(o *Options) { o.SharedStorage = shared })
	out := outsideTree(t)
	must(t, os.WriteFile(filepath.Join(out, "fake"), make([]byte, 4100), 0644))
	ageTree(t, out)
	before := snapshot(t, out)
	x, y := filepath.Join(tm.mnt, "x"), filepath.Join(tm.mnt, "y")
	// Two targets of the same length: only the binding of each
	// sidecar to its marker tells them apart.
	yTarget := strings.ToUpper(longTarget(4000))
	must(t, os.Symlink(longTarget(4000), x))
	xPath, xMarker := newLongLink(t, tm.lower, 4000, nil)
	must(t, os.Symlink(yTarget, y))
	yPath, yMarker := newLongLink(t, tm.lower, 4000, map[string]string{xPath: xMarker})
	_, xID, _ := links.ParseMarker(xMarker)
	_, yID, _ := links.ParseMarker(yMarker)
	xSide, ySide := filepath.Join(tm.lower, links.Sidecar(xID)), filepath.Join(tm.lower, links.Sidecar(yID))
	store := filepath.Join(tm.lower, links.StoreDir)
	good, err := os.ReadFile(xSide)
	must(t, err)

	authentic := map[string]string{x: longTarget(4000), y: yTarget}
	wantEIO := func(what, p string) {
		t.Helper()
		got, err := os.Readlink(p)
		if !shared && err == nil && got == authentic[p] {
			// The target the kernel kept from before.
		} else if errnoOf(err) != syscall.EIO {
			t.Errorf("%s: readlink gave %d bytes, %v; want EIO", what, len(got), err)
		}
		if _, err := os.ReadDir(tm.mnt); err != nil {
			t.Fatalf("%s: the mount died: %v", what, err)
		}
	}
	wantOK := func(what string) {
		t.Helper()
		if got, err := os.Readlink(x); err != nil || got != longTarget(4000) {
			t.Errorf("%s: readlink of the restored link: %d bytes, %v", what, len(got), err)
		}
	}
	setLower := func(p, target string) {
		t.Helper()
		must(t, os.Remove(p))
		must(t, os.Symlink(target, p))
	}

	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 1
	must(t, os.WriteFile(xSide, flipped, 0400))
	wantEIO("flipped sidecar byte", x)
	must(t, os.WriteFile(xSide, good, 0400))
	wantOK("flipped byte restored")

	must(t, os.Rename(xSide, xSide+".tmp"))
	must(t, os.Rename(ySide, xSide))
	must(t, os.Rename(xSide+".tmp", ySide))
	wantEIO("swapped sidecars (x)", x)
	wantEIO("swapped sidecars (y)", y)
	must(t, os.Rename(xSide, xSide+".tmp"))
	must(t, os.Rename(ySide, xSide))
	must(t, os.Rename(xSide+".tmp", ySide))
	wantOK("swap undone")

	setLower(xPath, xMarker[:len(xMarker)-links.IDLen-5]+"4001."+xID)
	wantEIO("marker claiming another length", x)
	setLower(xPath, xMarker)
	wantOK("marker restored")

	must(t, os.Remove(xSide))
	must(t, os.Symlink(filepath.Join(out, "fake"), xSide))
	wantEIO("sidecar swapped for a symlink out of LOWER", x)
	must(t, os.Remove(xSide))
	must(t, os.WriteFile(xSide, make([]byte, 1<<20), 0400))
	wantEIO("1 MiB sidecar", x)
	must(t, os.Remove(xSide))
	must(t, unix.Mkfifo(xSide, 0600))
	wantEIO("FIFO as sidecar", x)
	must(t, os.Remove(xSide))
	must(t, os.WriteFile(xSide, good, 0400))
	wantOK("sidecar restored")

	must(t, os.Rename(store, store+".away"))
	must(t, os.Symlink(store+".away", store))
	wantEIO("store swapped for a symlink", x)
	must(t, os.Remove(store))
	must(t, os.Rename(store+".away", store))
	wantOK("store restored")

	// A marker-shaped target whose id is not hex cannot name a
	// path: it is not a marker, and does not decrypt.
	setLower(yPath, xMarker[:len(xMarker)-links.IDLen]+strings.Repeat("../", links.IDLen/3)+"xx")
	wantEIO("marker with a path for an id", y)

	requireUnchanged(t, out, before)
}

// TestLongSymlinkMirror: in mirror mode the plain directory gets the long
// target as it is, and loses it with the mount's last name.
func TestLongSymlinkMirror(t *testing.T) {
	tm := newVolume(t, variants[0])
	mirror := t.TempDir()
	tm.mount(t, func(o *Options) { o.Mirror = mirror })
	target := longTarget(4095)
	must(t, os.Symlink(target, filepath.Join(tm.mnt, "l")))
	if got, err := os.Readlink(filepath.Join(mirror, "l")); err != nil || got != target {
		t.Errorf("mirror's link: %d bytes, %v", len(got), err)
	}
	if got, err := os.Readlink(filepath.Join(tm.mnt, "l")); err != nil || got != target {
		t.Errorf("mount's link: %d bytes, %v", len(got), err)
	}
	must(t, os.Remove(filepath.Join(tm.mnt, "l")))
	if _, err := os.Lstat(filepath.Join(mirror, "l")); !os.IsNotExist(err) {
		t.Errorf("mirror's link after unlink: %v", err)
	}
	if n := storeCount(t, tm.lower); n != 0 {
		t.Errorf("%d sidecars left after unlink", n)
	}
}

// TestLongSymlinkAtime: lstat of a long link made through the mount reads
// no lower link, so an atime set before its mtime stays, as natively.
func TestLongSymlinkAtime(t *testing.T) {
	for _, v := range linkVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			native := t.TempDir()
			ts := []unix.Timespec{unix.NsecToTimespec(1_000_000_000_123), unix.NsecToTimespec(2_000_000_000_456)}
			for _, root := range []string{native, tm.mnt} {
				p := filepath.Join(root, "l")
				must(t, os.Symlink(longTarget(4000), p))
				must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW))
			}
			for i := 0; i < 2; i++ {
				var want, got unix.Stat_t
				must(t, unix.Lstat(filepath.Join(native, "l"), &want))
				must(t, unix.Lstat(filepath.Join(tm.mnt, "l"), &got))
				if want.Atim != got.Atim || want.Size != got.Size {
					t.Errorf("lstat %d: native atime %v size %d, mount atime %v size %d", i, want.Atim, want.Size, got.Atim, got.Size)
				}
			}
		})
	}
}
