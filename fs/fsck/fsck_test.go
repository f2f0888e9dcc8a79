package fsck

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// longName is a plaintext name whose encrypted form needs a sidecar.
func longName(c byte) string { return strings.Repeat(string(c), 200) }

// buildHealthy writes, through the mount, a tree that must check clean:
// files of many sizes (empty, one byte, one extent, a tail that spills
// past its slot), holes made by truncate, by a far write and by punching,
// files grown and shrunk by truncate and by appends (every path of the
// mount that rewrites a last extent), nested directories, a long name, a
// symlink and an xattr. It returns the number of files, directories and symlinks.
func buildHealthy(t *testing.T, m *mounted) (files, dirs, links int64) {
	writeFile(t, m.path("empty"), nil)
	writeFile(t, m.path("one"), []byte("1"))
	writeFile(t, m.path("exact"), pattern(4096, 1))
	writeFile(t, m.path("spill"), pattern(3*4096+4085, 2))
	writeFile(t, m.path("dir/sub/deep.txt"), pattern(10000, 3))
	writeFile(t, m.path(longName('L')), []byte("long name, healthy"))

	f, err := os.Create(m.path("sparse"))
	must(t, err)
	must(t, f.Truncate(1<<20))
	_, err = f.WriteAt([]byte("x"), 900000)
	must(t, err)
	must(t, f.Close())

	writeFile(t, m.path("grown"), pattern(100, 4))
	must(t, os.Truncate(m.path("grown"), 10000))
	writeFile(t, m.path("shrunk"), pattern(3*4096+5, 5))
	must(t, os.Truncate(m.path("shrunk"), 8192))

	writeFile(t, m.path("retailed"), pattern(100, 11))
	must(t, os.Truncate(m.path("retailed"), 3000))
	writeFile(t, m.path("cut"), pattern(3*4096+5, 12))
	must(t, os.Truncate(m.path("cut"), 5000))
	writeFile(t, m.path("spill-grown"), pattern(4085, 13))
	appendTo(t, m.path("spill-grown"), pattern(10, 14))
	writeFile(t, m.path("appended"), nil)
	for i := 0; i < 10; i++ {
		appendTo(t, m.path("appended"), pattern(1000, byte(i)))
	}

	writeFile(t, m.path("punched"), pattern(5*4096, 6))
	f, err = os.OpenFile(m.path("punched"), os.O_RDWR, 0)
	must(t, err)
	must(t, unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 3*4096))
	must(t, f.Close())

	must(t, os.Symlink("some/where", m.path("goodlink")))
	writeFile(t, m.path("xattr-ok.txt"), []byte("x"))
	must(t, unix.Setxattr(m.path("xattr-ok.txt"), "user.ok", []byte("fine"), 0))
	return 15, 2, 1
}

func appendTo(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	must(t, f.Close())
}

func TestCleanVolumes(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts config.Options
	}{
		{"xts", config.Options{Cipher: "aes-xts", KeyBytes: 64}},
		{"cbc", config.Options{Cipher: "aes-cbc", KeyBytes: 16}},
		{"plaintext-names", config.Options{Cipher: "aes-xts", KeyBytes: 32, PlaintextNames: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVolume(t, tc.opts)
			m := v.mount(t)
			files, dirs, links := buildHealthy(t, m)
			m.unmount(t)

			// A header-only file is what a crash after the first header
			// write leaves: it reads as empty and is fine.
			hdr := make([]byte, content.HeaderSize)
			engine, err := content.NewEngine(v.cfg.ContentSpec(), v.cfg.KeyBytes, v.master)
			must(t, err)
			h := engine.NewHeader()
			h.Marshal(hdr)
			writeFile(t, v.abs(v.lowerRel(t, "/dir/header-only")), hdr)
			files++

			before := lowerTree(t, v.lower)
			rep := v.check(t, Options{Repair: true})
			if !rep.Clean() || len(rep.Problems) != 0 {
				t.Fatalf("healthy volume: %d problems: %+v", rep.Found, rep.Problems)
			}
			if rep.Files != files || rep.Dirs != dirs || rep.Symlinks != links {
				t.Errorf("counted %d files, %d dirs, %d symlinks; want %d, %d, %d",
					rep.Files, rep.Dirs, rep.Symlinks, files, dirs, links)
			}
			if after := lowerTree(t, v.lower); !sameSet(before, after) {
				t.Errorf("repair of a clean volume changed LOWER:\nbefore %v\nafter  %v", before, after)
			}
			if rep.LostFound != "" {
				t.Errorf("lost+found used on a clean volume: %q", rep.LostFound)
			}

			census, err := Count(v.lower, v.cfg.PlaintextNames)
			must(t, err)
			if census.Files != files || census.Dirs != dirs || census.Symlinks != links || census.TornFiles != 0 {
				t.Errorf("census %+v; want %d files, %d dirs, %d symlinks", census, files, dirs, links)
			}
			if !v.cfg.PlaintextNames && (census.DirIVs != dirs+1 || census.Sidecars != 1) {
				t.Errorf("census counts %d IVs and %d sidecars, want %d and 1", census.DirIVs, census.Sidecars, dirs+1)
			}
		})
	}
}

// lowerTree lists every path under root with its size.
func lowerTree(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out = append(out, strings.TrimPrefix(p, root)+" "+fi.Mode().String())
		return nil
	})
	must(t, err)
	return out
}

// TestDamageReportRepair damages one entry in each detectable way, checks
// that fsck reports exactly those problems at the right lower paths, that
// --repair moves, deletes or re-creates what it can, that the mount then
// shows the moved entries under /lost+found, and that a second fsck finds
// only what cannot be repaired.
func TestDamageReportRepair(t *testing.T) {
	v := newVolume(t, config.Options{Cipher: "aes-xts", KeyBytes: 64})
	m := v.mount(t)
	buildHealthy(t, m)
	writeFile(t, m.path("small.txt"), []byte("hello"))
	writeFile(t, m.path("sub/small.txt"), []byte("hello again"))
	writeFile(t, m.path("magic.bin"), pattern(5000, 7))
	writeFile(t, m.path("header.bin"), pattern(100, 8))
	writeFile(t, m.path("cipher.bin"), pattern(100, 9))
	writeFile(t, m.path("torn.bin"), pattern(3*4096+100, 10))
	writeFile(t, m.path("boundary.bin"), pattern(2*4096, 11))
	writeFile(t, m.path("tornstale.bin"), pattern(3*4096, 12))
	writeFile(t, m.path("renamed.txt"), []byte("renamed content"))
	writeFile(t, m.path("baddir/inner.txt"), []byte("inner content"))
	writeFile(t, m.path(longName('A')), []byte("content A"))
	writeFile(t, m.path(longName('B')), []byte("content B"))
	writeFile(t, m.path(longName('C')), []byte("content C"))
	must(t, os.Symlink("target/path", m.path("link")))
	writeFile(t, m.path("escape/kept.txt"), []byte("kept"))
	writeFile(t, m.path("xattr.txt"), []byte("x"))
	must(t, unix.Setxattr(m.path("xattr.txt"), "user.test", []byte("value"), 0))
	writeFile(t, m.path("noiv/f.txt"), []byte("f"))
	writeFile(t, m.path("ivlink/g.txt"), []byte("g"))
	writeFile(t, m.path("fifoiv/h.txt"), []byte("h"))
	must(t, os.Mkdir(m.path("emptydir"), 0o755))
	m.unmount(t)

	L := func(p string) string { return v.lowerRel(t, p) }
	lSmall, lSubSmall, lMagic, lHeader, lCipher, lTorn := L("/small.txt"), L("/sub/small.txt"), L("/magic.bin"), L("/header.bin"), L("/cipher.bin"), L("/torn.bin")
	lRenamed, lBaddir := L("/renamed.txt"), L("/baddir")
	lBoundary, lTornStale := L("/boundary.bin"), L("/tornstale.bin")
	lA, lB, lC := L("/"+longName('A')), L("/"+longName('B')), L("/"+longName('C'))
	lLink, lEscape, lXattr := L("/link"), L("/escape"), L("/xattr.txt")
	lNoIV, lIVLink, lFifoIV, lEmpty := L("/noiv"), L("/ivlink"), L("/fifoiv"), L("/emptydir")

	// Things outside LOWER that a followed symlink would reach.
	outside := t.TempDir()
	writeFile(t, filepath.Join(outside, "dir", "secret.txt"), []byte("not a twincrypt file, do not touch"))
	writeFile(t, filepath.Join(outside, "iv"), make([]byte, 16))

	must(t, os.Truncate(v.abs(lSmall), 40))
	must(t, os.Truncate(v.abs(lSubSmall), 33))
	patchLower(t, v.abs(lMagic), 0, []byte("X"))
	patchLower(t, v.abs(lHeader), 4, []byte{0, 2})
	patchLower(t, v.abs(lCipher), 6, []byte{content.CipherCBC})
	patchLower(t, v.abs(lTorn), content.UnitOffset(1)+1024, make([]byte, 512))
	// A file ending on an extent boundary stores its trailer as zeros.
	patchLower(t, v.abs(lBoundary), content.UnitOffset(2), pattern(content.TrailerSize, 13))
	patchLower(t, v.abs(lTornStale), content.UnitOffset(3), pattern(content.TrailerSize, 14))
	patchLower(t, v.abs(lTornStale), content.UnitOffset(1), make([]byte, 16))
	must(t, os.Rename(v.abs(lRenamed), v.abs("garbage.txt")))
	must(t, os.Rename(v.abs(lBaddir), v.abs("bad+dir")))
	must(t, os.Remove(v.abs(names.Sidecar(lA))))
	iv, err := os.ReadFile(v.abs(names.DirIVFile))
	must(t, err)
	other, err := v.names.Encrypt(longName('Z'), iv)
	must(t, err)
	must(t, os.WriteFile(v.abs(names.Sidecar(lB)), []byte(other), 0o400))
	must(t, os.Remove(v.abs(lC)))
	target, err := os.Readlink(v.abs(lLink))
	must(t, err)
	flipped := []byte(target)
	flipped[5] = map[bool]byte{true: 'B', false: 'A'}[flipped[5] == 'A']
	must(t, os.Remove(v.abs(lLink)))
	must(t, os.Symlink(string(flipped), v.abs(lLink)))
	must(t, os.RemoveAll(v.abs(lEscape)))
	must(t, os.Symlink(filepath.Join(outside, "dir"), v.abs(lEscape)))
	val := make([]byte, 1024)
	n, err := unix.Lgetxattr(v.abs(lXattr), "user.test", val)
	must(t, err)
	val[n-1] ^= 1
	must(t, unix.Lsetxattr(v.abs(lXattr), "user.test", val[:n], 0))
	must(t, os.Remove(v.abs(lNoIV+"/"+names.DirIVFile)))
	must(t, os.Remove(v.abs(lIVLink+"/"+names.DirIVFile)))
	must(t, os.Symlink(filepath.Join(outside, "iv"), v.abs(lIVLink+"/"+names.DirIVFile)))
	must(t, os.Remove(v.abs(lFifoIV+"/"+names.DirIVFile)))
	must(t, syscall.Mkfifo(v.abs(lFifoIV+"/"+names.DirIVFile), 0o600))
	must(t, os.Remove(v.abs(lEmpty+"/"+names.DirIVFile)))
	conf, err := os.ReadFile(v.abs(config.FileName))
	must(t, err)
	must(t, os.WriteFile(v.abs(config.BackupName), conf, 0o600))

	want := []string{
		"torn-size " + lSmall,
		"torn-size " + lSubSmall,
		"bad-magic " + lMagic,
		"bad-header " + lHeader,
		"cipher-mismatch " + lCipher,
		"torn-extent " + lTorn,
		"stale-trailer " + lBoundary,
		"torn-extent " + lTornStale,
		"stale-trailer " + lTornStale,
		"name-undecryptable garbage.txt",
		"name-undecryptable bad+dir",
		"sidecar-missing " + lA,
		"sidecar-mismatch " + lB,
		"sidecar-orphaned " + names.Sidecar(lC),
		"symlink-unreadable " + lLink,
		"symlink-unreadable " + lEscape,
		"xattr-unreadable " + lXattr + " user.test",
		"diriv-missing " + lNoIV,
		"diriv-damaged " + lIVLink,
		"diriv-damaged " + lFifoIV,
		"diriv-missing " + lEmpty,
		"config-leftover " + config.BackupName,
	}
	unrepairable := []string{
		"xattr-unreadable " + lXattr + " user.test",
		"diriv-missing " + lNoIV,
		"diriv-damaged " + lIVLink,
		"diriv-damaged " + lFifoIV,
	}

	rep := v.check(t, Options{})
	if got := problemSet(rep.Problems, false); !sameSet(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rep.Found != len(want) || rep.Repaired != 0 {
		t.Errorf("found %d, repaired %d; want %d, 0", rep.Found, rep.Repaired, len(want))
	}
	plains := map[string]string{}
	for _, p := range rep.Problems {
		plains[p.Lower] = p.Plain
	}
	for lower, plain := range map[string]string{
		lSmall: "/small.txt", lSubSmall: "/sub/small.txt", lTorn: "/torn.bin", "garbage.txt": "", "bad+dir": "",
		lA: "", lB: "", lXattr: "/xattr.txt", lNoIV: "/noiv", lEscape: "/escape",
	} {
		if plains[lower] != plain {
			t.Errorf("plaintext path of %s: %q, want %q", lower, plains[lower], plain)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "dir", "secret.txt")); err != nil {
		t.Fatal(err)
	}

	// --quick reads no extents: the torn extents and stale trailers go
	// unnoticed.
	quick := v.check(t, Options{Quick: true})
	if len(quick.Problems) != len(want)-4 {
		t.Errorf("--quick: %d problems, want %d", len(quick.Problems), len(want)-4)
	}

	rep = v.check(t, Options{Repair: true})
	if got := problemSet(rep.Problems, false); !sameSet(got, want) {
		t.Fatalf("problems with --repair:\n%s", strings.Join(got, "\n"))
	}
	var notRepaired []string
	for _, p := range rep.Problems {
		if !p.Repaired {
			notRepaired = append(notRepaired, problemSet([]Problem{p}, false)...)
		}
		if p.Repaired != (p.Action != "") {
			t.Errorf("%s %s: action %q but repaired %v (%s)", p.Kind, p.Lower, p.Action, p.Repaired, p.Note)
		}
	}
	if !sameSet(notRepaired, unrepairable) {
		t.Errorf("not repaired: %v, want %v", notRepaired, unrepairable)
	}
	if rep.Repaired != len(want)-len(unrepairable) || rep.Unrepaired() != len(unrepairable) {
		t.Errorf("repaired %d, unrepaired %d", rep.Repaired, rep.Unrepaired())
	}
	if _, err := os.Lstat(v.abs(names.Sidecar(lC))); !os.IsNotExist(err) {
		t.Errorf("orphaned sidecar still there: %v", err)
	}
	if _, err := os.Lstat(v.abs(config.BackupName)); !os.IsNotExist(err) {
		t.Errorf("config backup still there: %v", err)
	}
	if got, err := os.ReadFile(filepath.Join(outside, "dir", "secret.txt")); err != nil || string(got) != "not a twincrypt file, do not touch" {
		t.Errorf("the file outside LOWER changed: %q, %v", got, err)
	}
	if got, err := os.ReadFile(v.abs(lBoundary)); err != nil || !content.IsZero(got[len(got)-content.TrailerSize:]) {
		t.Errorf("boundary.bin's trailer after the repair: % x, %v", got[len(got)-content.TrailerSize:], err)
	}
	if fi, err := os.Lstat(v.abs(v.lowerRel(t, "/lost+found/escape"))); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the escaping symlink was not moved as a symlink: %v, %v", fi, err)
	}

	// The mount shows the moved entries under /lost+found; those whose
	// only damage was their name are readable again.
	m = v.mount(t)
	lf, err := os.ReadDir(m.path("lost+found"))
	must(t, err)
	var got []string
	for _, e := range lf {
		got = append(got, e.Name())
	}
	sort.Strings(got)
	wantLF := []string{"small.txt", "small.txt.1", "magic.bin", "header.bin", "cipher.bin", "torn.bin", "tornstale.bin",
		"garbage.txt", "bad+dir", lA, lB, "link", "escape"}
	if !sameSet(got, wantLF) {
		t.Errorf("/lost+found holds %q,\nwant %q", got, wantLF)
	}
	readMounted(t, m.path("lost+found/garbage.txt"), []byte("renamed content"))
	readMounted(t, m.path("lost+found/bad+dir/inner.txt"), []byte("inner content"))
	readMounted(t, m.path("lost+found/"+lA), []byte("content A"))
	readMounted(t, m.path("lost+found/"+lB), []byte("content B"))
	readMounted(t, m.path(longName('L')), []byte("long name, healthy"))
	readMounted(t, m.path("boundary.bin"), pattern(2*4096, 11))
	if _, err := os.ReadDir(m.path("emptydir")); err != nil {
		t.Errorf("emptydir after its new IV: %v", err)
	}
	for _, gone := range []string{"small.txt", "magic.bin", "link", "escape"} {
		if _, err := os.Lstat(m.path(gone)); !os.IsNotExist(err) {
			t.Errorf("/%s still in the root: %v", gone, err)
		}
	}
	m.unmount(t)

	rep = v.check(t, Options{Repair: true})
	if got := problemSet(rep.Problems, false); !sameSet(got, unrepairable) {
		t.Errorf("after repair: problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(unrepairable, "\n"))
	}
	// Damaged content in lost+found is quarantined, not a problem.
	if rep.Quarantined != 9 {
		t.Errorf("quarantined %d, want 9: %v", rep.Quarantined, problemSet(rep.Problems, true))
	}
}

// A volume with plaintext names: content damage is moved to a plain
// lost+found directory.
func TestRepairPlaintextNames(t *testing.T) {
	v := newVolume(t, config.Options{Cipher: "aes-cbc", KeyBytes: 32, PlaintextNames: true})
	m := v.mount(t)
	writeFile(t, m.path("a/broken"), pattern(9000, 1))
	writeFile(t, m.path("a/fine"), pattern(9000, 2))
	m.unmount(t)
	patchLower(t, v.abs("a/broken"), 0, make([]byte, content.HeaderSize))

	rep := v.check(t, Options{Repair: true})
	if got := problemSet(rep.Problems, false); !sameSet(got, []string{"bad-magic a/broken"}) || rep.Repaired != 1 {
		t.Fatalf("problems %v, repaired %d", got, rep.Repaired)
	}
	if !strings.Contains(rep.Problems[0].Detail, "all zeros") {
		t.Errorf("detail %q does not say the header is zeros", rep.Problems[0].Detail)
	}
	if _, err := os.Lstat(v.abs("lost+found/broken")); err != nil {
		t.Fatal(err)
	}
	m = v.mount(t)
	readMounted(t, m.path("a/fine"), pattern(9000, 2))
	if _, err := os.Lstat(m.path("lost+found/broken")); err != nil {
		t.Error(err)
	}
	m.unmount(t)
	if rep := v.check(t, Options{}); !rep.Clean() || rep.Quarantined != 1 {
		t.Errorf("after repair: found %d, quarantined %d", rep.Found, rep.Quarantined)
	}
}

// Long plaintext names in lost+found get a sidecar; collisions get a
// numbered suffix.
func TestRepairLongNamesAndCollisions(t *testing.T) {
	v := newVolume(t, config.Options{})
	m := v.mount(t)
	name := longName('N')
	writeFile(t, m.path("x/"+name), pattern(100, 1))
	writeFile(t, m.path("y/"+name), pattern(100, 2))
	must(t, os.Mkdir(m.path("lost+found"), 0o700))
	writeFile(t, m.path("lost+found/"+name), []byte("already there"))
	m.unmount(t)
	for _, d := range []string{"/x/", "/y/"} {
		must(t, os.Truncate(v.abs(v.lowerRel(t, d+name)), 47))
	}
	rep := v.check(t, Options{Repair: true})
	if rep.Found != 2 || rep.Repaired != 2 {
		t.Fatalf("found %d, repaired %d: %+v", rep.Found, rep.Repaired, rep.Problems)
	}
	m = v.mount(t)
	readMounted(t, m.path("lost+found/"+name), []byte("already there"))
	for _, n := range []string{name + ".1", name + ".2"} {
		fi, err := os.Lstat(m.path("lost+found/" + n))
		if err != nil || fi.Size() != 47 {
			t.Errorf("lost+found/%s: %v, %v (a torn file shows its lower size)", n, fi, err)
		}
	}
	m.unmount(t)
	if rep := v.check(t, Options{}); !rep.Clean() || rep.Quarantined != 2 {
		t.Errorf("after repair: %+v", rep.Problems)
	}
}

// A repair that finds the entry replaced since the check, or a path that
// leaves LOWER, leaves it alone.
func TestRepairChecksInode(t *testing.T) {
	v := newVolume(t, config.Options{})
	rel := "garbage"
	writeFile(t, v.abs(rel), nil)
	c := &checker{rep: &Report{}}
	var err error
	c.root, err = openRoot(v.lower)
	must(t, err)
	defer c.root.Close()
	a := &action{kind: MoveAside, name: rel, ino: 1}
	if _, err := c.moveAside(a); err != errChanged {
		t.Errorf("moveAside of a replaced entry: %v, want errChanged", err)
	}
	a.name = "../" + rel
	if _, err := c.moveAside(a); err == nil || !strings.Contains(err.Error(), "leave its directory") {
		t.Errorf("moveAside with a path escaping LOWER: %v", err)
	}

	// A directory on the way swapped for a symlink to outside LOWER.
	outside := t.TempDir()
	victim := filepath.Join(outside, "victim")
	writeFile(t, victim, []byte("outside"))
	must(t, os.Symlink(outside, v.abs("evil")))
	var st unix.Stat_t
	must(t, unix.Stat(victim, &st))
	for _, a := range []*action{
		{kind: MoveAside, dir: "evil", name: "victim", dev: uint64(st.Dev), ino: uint64(st.Ino)},
		{kind: Delete, dir: "evil", name: "victim", dev: uint64(st.Dev), ino: uint64(st.Ino)},
	} {
		var err error
		if a.kind == Delete {
			_, err = c.remove(a)
		} else {
			_, err = c.moveAside(a)
		}
		if err == nil {
			t.Errorf("%s through a symlinked directory succeeded", a.kind)
		}
	}
	if _, err := os.Stat(victim); err != nil {
		t.Errorf("the file outside LOWER: %v", err)
	}
}

func TestPartlyZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		u    []byte
		want bool
	}{
		{"hole", make([]byte, 4096), false},
		{"trailer hole", make([]byte, 16), false},
		{"data", pattern(4096, 1), false},
		{"zero block", append(pattern(4080, 1), make([]byte, 16)...), true},
		{"zero first block", append(make([]byte, 16), pattern(100, 1)...), true},
		{"zero partial last block", append(pattern(32, 1), 0, 0, 0), false},
		{"zero bytes unaligned", append(append(pattern(8, 1), make([]byte, 16)...), pattern(8, 1)...), false},
	} {
		if got := partlyZero(tc.u); got != tc.want {
			t.Errorf("%s: partlyZero = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestCandidate(t *testing.T) {
	long := strings.Repeat("x", 255)
	for _, tc := range []struct {
		base string
		n    int
		want string
	}{
		{"a", 0, "a"},
		{"a", 1, "a.1"},
		{long, 0, long},
		{long, 12, long[:252] + ".12"},
	} {
		if got := candidate(tc.base, tc.n); got != tc.want {
			t.Errorf("candidate(%.10q, %d) = %.20q…, want %.20q…", tc.base, tc.n, got, tc.want)
		}
		if len(candidate(tc.base, tc.n)) > names.MaxPlainName {
			t.Errorf("candidate too long")
		}
	}
}
