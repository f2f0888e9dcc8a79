package fsck

import (
	"fmt"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// openPathAt opens name in dir as an O_PATH directory, not following a
// symlink (the chain below is too long for one path).
func openPathAt(t *testing.T, dir int, name string) int {
	t.Helper()
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	must(t, err)
	return fd
}

// TestDeepTree checks and repairs a volume whose tree is deeper than
// PATH_MAX, as plaintext and as lower paths (60 names of 100 bytes, built
// through the mount with *at calls): fsck finds the damage at the bottom
// with its lower and plaintext paths, repairs it (moving an entry from the
// bottom to lost+found, deleting an orphaned sidecar), and then checks clean.
func TestDeepTree(t *testing.T) {
	const levels = 60
	v := newVolume(t, config.Options{Cipher: "aes-xts", KeyBytes: 64})
	m := v.mount(t)
	var plain []string
	fd, err := unix.Open(m.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	for i := 1; i <= levels; i++ {
		name := fmt.Sprintf("%0100d", i)
		must(t, unix.Mkdirat(fd, name, 0o755))
		next := openPathAt(t, fd, name)
		unix.Close(fd)
		fd = next
		plain = append(plain, name)
	}
	for _, name := range []string{"ok.txt", "torn.txt", longName('O')} {
		f, err := unix.Openat(fd, name, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		must(t, err)
		_, err = unix.Write(f, pattern(5000, 3))
		unix.Close(f)
		must(t, err)
	}
	unix.Close(fd)
	m.unmount(t)

	// The lower chain, name by name under each directory's IV.
	fd, err = unix.Open(v.lower, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	lowerName := func(dir int, name string) string {
		ivFd, err := unix.Openat(dir, names.DirIVFile, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		must(t, err)
		iv := make([]byte, names.DirIVSize)
		_, err = unix.Read(ivFd, iv)
		unix.Close(ivFd)
		must(t, err)
		c, err := v.names.Encrypt(name, iv)
		must(t, err)
		l, _ := names.Lower(c)
		return l
	}
	var lower []string
	for _, name := range plain {
		l := lowerName(fd, name)
		next := openPathAt(t, fd, l)
		unix.Close(fd)
		fd, lower = next, append(lower, l)
	}
	defer unix.Close(fd)
	bottom := strings.Join(lower, "/")
	if len(bottom) < unix.PathMax {
		t.Fatalf("lower path of the bottom is %d bytes: not deeper than PATH_MAX", len(bottom))
	}
	lTorn, lLong := lowerName(fd, "torn.txt"), lowerName(fd, longName('O'))
	must(t, unix.Truncate(fmt.Sprintf("/proc/self/fd/%d/%s", fd, lTorn), 40))
	g, err := unix.Openat(fd, "garbage.txt", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	must(t, err)
	unix.Close(g)
	must(t, unix.Unlinkat(fd, lLong, 0))

	want := []string{
		"torn-size " + bottom + "/" + lTorn,
		"name-undecryptable " + bottom + "/garbage.txt",
		"sidecar-orphaned " + bottom + "/" + names.Sidecar(lLong),
	}
	rep := v.check(t, Options{})
	if got := problemSet(rep.Problems, false); !sameSet(got, want) {
		t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if rep.Dirs != levels || rep.Files != 3 {
		t.Errorf("counted %d directories and %d files, want %d and 3", rep.Dirs, rep.Files, levels)
	}
	for _, p := range rep.Problems {
		if p.Kind == TornSize && p.Plain != "/"+strings.Join(plain, "/")+"/torn.txt" {
			t.Errorf("plaintext path of the torn file: %q", p.Plain)
		}
	}

	rep = v.check(t, Options{Repair: true})
	if rep.Found != len(want) || rep.Repaired != len(want) {
		for _, p := range rep.Problems {
			t.Logf("%s %s: repaired %v (%s)", p.Kind, p.Lower, p.Repaired, p.Note)
		}
		t.Fatalf("repair: found %d, repaired %d; want %d, %d", rep.Found, rep.Repaired, len(want), len(want))
	}
	if rep = v.check(t, Options{}); !rep.Clean() {
		t.Errorf("after repair: %v", problemSet(rep.Problems, false))
	}
	census, err := Count(v.lower, false)
	must(t, err)
	// The bottom's ok.txt, and the torn file and garbage in lost+found.
	if census.Dirs != levels+1 || census.Files != 3 || census.Unreadable != 0 {
		t.Errorf("census: %+v", census)
	}

	// The mount still reaches the bottom.
	m = v.mount(t)
	fd2, err := unix.Open(m.dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	for _, name := range plain {
		next := openPathAt(t, fd2, name)
		unix.Close(fd2)
		fd2 = next
	}
	defer unix.Close(fd2)
	var st unix.Stat_t
	if err := unix.Fstatat(fd2, "ok.txt", &st, 0); err != nil || st.Size != 5000 {
		t.Errorf("ok.txt at the bottom after repair: size %d, %v", st.Size, err)
	}
}
