package fsck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// mknodNoDriver replaces p by a character device 0:0. No driver serves
// 0:0: its open fails ENXIO in the driver lookup, so ENXIO ("no such
// device or address") anywhere in a report shows that fsck opened it.
func mknodNoDriver(t *testing.T, p string) {
	t.Helper()
	must(t, os.Remove(p))
	if err := unix.Mknod(p, unix.S_IFCHR|0o666, 0); err != nil {
		t.Skipf("mknod in LOWER: %v", err)
	}
}

// TestPlantedSpecialFiles: whoever can write LOWER plants device nodes
// and FIFOs where fsck reads a regular file (a long name's sidecar, a
// directory's IV, a long symlink's sidecar) and under ordinary entries' names. fsck must report
// the metadata ones as damage saying what they are, count the entries as
// "other", finish without waiting on a FIFO, and never open a device
// (fsck runs as root: a driver's open acts). Before the fix the sidecar
// and IV reads opened them O_NONBLOCK and checked the type afterwards:
// the report said ENXIO, the driver lookup's answer.
func TestPlantedSpecialFiles(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a device node needs root (CAP_MKNOD)")
	}
	v := newVolume(t, config.Options{Cipher: "aes-xts", KeyBytes: 64})
	m := v.mount(t)
	for _, p := range []string{longName('D'), longName('F'), "sub/f.txt", "devfile", "fifofile"} {
		writeFile(t, m.path(p), []byte("content"))
	}
	// A target this long is sealed into a sidecar in the links store.
	must(t, os.Symlink(strings.Repeat("t/", 2000), m.path("longlink")))
	m.unmount(t)
	lLink := v.lowerRel(t, "/longlink")
	stored, err := os.ReadDir(v.abs(links.StoreDir))
	if err != nil || len(stored) != 1 {
		t.Fatalf("links store: %v, %d entries, want the long link's sidecar", err, len(stored))
	}
	mknodNoDriver(t, v.abs(links.Sidecar(stored[0].Name())))
	lLongD, lLongF := v.lowerRel(t, "/"+longName('D')), v.lowerRel(t, "/"+longName('F'))
	lSub, lDevFile, lFifoFile := v.lowerRel(t, "/sub"), v.lowerRel(t, "/devfile"), v.lowerRel(t, "/fifofile")
	sideD, sideF := names.Sidecar(lLongD), names.Sidecar(lLongF)
	subIV := filepath.Join(lSub, names.DirIVFile)

	mknodNoDriver(t, v.abs(sideD))
	mknodNoDriver(t, v.abs(subIV))
	mknodNoDriver(t, v.abs(lDevFile))
	for _, p := range []string{sideF, lFifoFile} {
		must(t, os.Remove(v.abs(p)))
		must(t, unix.Mkfifo(v.abs(p), 0o666))
		t.Cleanup(func() {
			if fd, err := unix.Open(v.abs(p), unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0); err == nil {
				unix.Close(fd)
			}
		})
	}

	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Check(v.lower, v.cfg, v.master, Options{})
		done <- result{rep, err}
	}()
	var res result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("fsck gave no report in 60 s (waiting in a FIFO's open)")
	}
	if res.err != nil {
		t.Fatalf("Check: %v", res.err)
	}
	rep := res.rep
	want := map[string]string{
		string(SidecarDamaged) + " " + lLongD:   "character device",
		string(SidecarDamaged) + " " + lLongF:   "fifo",
		string(DirIVDamaged) + " " + lSub:       "character device",
		string(SymlinkUnreadable) + " " + lLink: "character device",
	}
	for _, p := range rep.Problems {
		t.Logf("%s %s: %s", p.Kind, p.Lower, p.Detail)
		if strings.Contains(p.Detail, "no such device or address") {
			t.Errorf("%s %s: %q: fsck opened the device", p.Kind, p.Lower, p.Detail)
		}
		k := string(p.Kind) + " " + p.Lower
		if what, ok := want[k]; ok {
			if !strings.Contains(p.Detail, what) {
				t.Errorf("%s: %q does not say it is a %s", k, p.Detail, what)
			}
			delete(want, k)
		}
	}
	for k, what := range want {
		t.Errorf("not reported: %s (a %s)", k, what)
	}
	// The planted entries themselves are FIFOs and devices, which carry
	// nothing but their name: counted, never opened.
	if rep.Other != 2 {
		t.Errorf("%d entries counted as other, want 2 (the planted device and FIFO)", rep.Other)
	}
}

// TestZeroTrailerRefusesDevice: a file that --repair would fix, swapped
// for a device node between the check and the repair (with the inode
// number the check saw: the device's own), is refused without its open.
// Before the fix the repair opened it for writing first (ENXIO, the
// driver lookup's answer) and checked afterwards.
func TestZeroTrailerRefusesDevice(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making a device node needs root (CAP_MKNOD)")
	}
	v := newVolume(t, config.Options{})
	writeFile(t, v.abs("victim"), nil)
	mknodNoDriver(t, v.abs("victim"))
	var st unix.Stat_t
	must(t, unix.Lstat(v.abs("victim"), &st))
	c := &checker{rep: &Report{}}
	var err error
	c.root, err = openRoot(v.lower)
	must(t, err)
	defer c.root.Close()
	a := &action{kind: ZeroTrailer, name: "victim", dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size}
	if _, err := c.zeroTrailer(a); err != errChanged {
		t.Errorf("zero-trailer repair of a file swapped for a device: %v, want errChanged (refused before the device's open)", err)
	}
}
