// Package ecryptfs moves data off eCryptfs: Import copies a lower
// eCryptfs tree, decrypted with cipher/ecryptfs, into a directory — the
// mount of a new twincrypt volume — and verifies every entry; Mount
// (mount.go) shows such a tree read-only through FUSE.
package ecryptfs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
)

// ImportOptions configure Import.
type ImportOptions struct {
	// Journal is the file that records every entry imported and verified,
	// so that an interrupted import resumes where it stopped. Required.
	Journal string
	// Progress, if set, is called after every entry; an error it returns
	// stops the import there (what is done stays in the journal).
	Progress func(p Progress) error
}

// Progress counts what an import has done so far.
type Progress struct {
	Entries  int    // entries handled (imported, resumed or failed)
	Resumed  int    // entries the journal says an earlier run did
	Bytes    int64  // plaintext bytes copied by this run
	Failed   int    // entries that could not be imported
	Current  string // the entry just handled
	Duration time.Duration
}

// Failure is one entry that could not be imported.
type Failure struct {
	Path string // plaintext path, or the lower path when the name is unreadable
	Err  error
}

// Report is what Import did.
type Report struct {
	Progress
	Files, Dirs, Symlinks, HardLinks, Special int
	Failures                                  []Failure
}

// ErrSomeFailed: the import finished but some entries failed (listed in
// the report).
var ErrSomeFailed = errors.New("some entries could not be imported")

// journalDone starts a journal line: "ok\t<plaintext path>".
const journalDone = "ok\t"

// Import copies the plaintext of the eCryptfs lower tree src into dst,
// which should be the mount of a new twincrypt volume, and verifies each
// entry by reading it back from dst: content (SHA-256), mode, times,
// xattrs, symlink targets, hard links. The source is only read (files are
// opened read-only, with O_NOATIME where allowed). An entry that cannot
// be read (a corrupt or truncated lower file, an undecryptable name) is
// reported and the rest goes on; such a run returns ErrSomeFailed.
func Import(src string, kr *ecryptfs.Keyring, dst string, o ImportOptions) (*Report, error) {
	if o.Journal == "" {
		return nil, errors.New("import: a journal file is required")
	}
	done, err := loadJournal(o.Journal)
	if err != nil {
		return nil, err
	}
	jf, err := os.OpenFile(o.Journal, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("import: journal: %w", err)
	}
	defer jf.Close()

	im := &importer{src: src, dst: dst, kr: kr, done: done, journal: jf, o: o,
		firstName: map[uint64]string{}, start: time.Now(), asRoot: os.Geteuid() == 0}
	err = ecryptfs.Walk(src, kr, im.entry)
	if err != nil {
		return &im.rep, err
	}
	// Directories last, deepest first: adding entries changed their times.
	sort.Slice(im.dirs, func(i, j int) bool { return im.dirs[i].Rel > im.dirs[j].Rel })
	for _, d := range im.dirs {
		if err := im.finishDir(d); err != nil {
			im.fail(d.Rel, err)
		}
	}
	if err := jf.Sync(); err != nil {
		return &im.rep, fmt.Errorf("import: journal: %w", err)
	}
	im.rep.Duration = time.Since(im.start)
	if im.rep.Failed > 0 {
		return &im.rep, fmt.Errorf("%w: %d of %d", ErrSomeFailed, im.rep.Failed, im.rep.Entries)
	}
	return &im.rep, nil
}

type importer struct {
	src, dst  string
	kr        *ecryptfs.Keyring
	done      map[string]bool
	journal   *os.File
	o         ImportOptions
	rep       Report
	firstName map[uint64]string // lower inode -> first plaintext path imported
	dirs      []ecryptfs.Entry
	start     time.Time
	asRoot    bool
}

func loadJournal(path string) (map[string]bool, error) {
	done := map[string]bool{}
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return done, nil
	}
	if err != nil {
		return nil, fmt.Errorf("import: journal: %w", err)
	}
	lines := strings.Split(string(b), "\n")
	// The last piece is "" after a whole last line, or a line a crash cut
	// short, which must not count (it could name a shorter path).
	for _, l := range lines[:len(lines)-1] {
		if rel, ok := strings.CutPrefix(l, journalDone); ok {
			done[unquote(rel)] = true
		}
	}
	return done, nil
}

// Paths go into the journal with \n and \\ escaped, so one line is one path.
func quote(s string) string {
	return strings.NewReplacer(`\`, `\\`, "\n", `\n`).Replace(s)
}

func unquote(s string) string {
	return strings.NewReplacer(`\\`, `\`, `\n`, "\n").Replace(s)
}

func (im *importer) fail(rel string, err error) {
	im.rep.Failed++
	im.rep.Failures = append(im.rep.Failures, Failure{Path: rel, Err: err})
}

func (im *importer) entry(e ecryptfs.Entry) error {
	im.rep.Entries++
	im.rep.Current = e.Rel
	err := im.entry1(e)
	if err == nil && im.o.Progress != nil {
		im.rep.Duration = time.Since(im.start)
		err = im.o.Progress(im.rep.Progress)
	}
	return err
}

func (im *importer) entry1(e ecryptfs.Entry) error {
	if e.Err != nil {
		im.fail(e.LowerRel, e.Err)
		return nil
	}
	ino, nlink := ecryptfs.Inode(e.Info)
	mode := e.Info.Mode()
	if !mode.IsDir() && nlink > 1 {
		if first, ok := im.firstName[ino]; ok {
			if im.done[e.Rel] {
				im.rep.Resumed++
				return nil
			}
			if err := im.hardLink(first, e.Rel); err != nil {
				im.fail(e.Rel, err)
				return nil
			}
			im.rep.HardLinks++
			return im.record(e.Rel)
		}
	}
	if mode.IsDir() {
		im.dirs = append(im.dirs, e)
		if err := os.Mkdir(filepath.Join(im.dst, e.Rel), 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			im.fail(e.Rel, err)
		}
		im.rep.Dirs++
		return nil
	}
	if im.done[e.Rel] {
		im.rep.Resumed++
		if nlink > 1 {
			im.firstName[ino] = e.Rel
		}
		return nil
	}
	var err error
	var count *int
	switch {
	case mode.IsRegular():
		err = im.file(e)
		count = &im.rep.Files
	case mode&fs.ModeSymlink != 0:
		err = im.symlink(e)
		count = &im.rep.Symlinks
	default:
		err = im.special(e)
		count = &im.rep.Special
	}
	if err != nil {
		im.fail(e.Rel, err)
		return nil
	}
	*count++
	if nlink > 1 {
		im.firstName[ino] = e.Rel
	}
	return im.record(e.Rel)
}

func (im *importer) record(rel string) error {
	if _, err := im.journal.WriteString(journalDone + quote(rel) + "\n"); err != nil {
		return fmt.Errorf("import: journal: %w", err)
	}
	return nil
}

// file copies one regular file and checks it, removing what it wrote when
// the source turns out damaged.
func (im *importer) file(e ecryptfs.Entry) error {
	f, fd, err := ecryptfs.OpenPath(filepath.Join(im.src, e.LowerRel), im.kr)
	if err != nil {
		return err
	}
	defer fd.Close()
	dp := filepath.Join(im.dst, e.Rel)
	out, err := os.OpenFile(dp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), io.NewSectionReader(f, 0, f.Size()))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(dp)
		return err
	}
	im.rep.Bytes += n
	if err := im.attrs(e, dp); err != nil {
		return err
	}
	if err := verifyContent(dp, h.Sum(nil), n); err != nil {
		return err
	}
	return im.verifyAttrs(e, dp)
}

func verifyContent(path string, want []byte, size int64) error {
	g, err := os.Open(path)
	if err != nil {
		return err
	}
	defer g.Close()
	h := sha256.New()
	n, err := io.Copy(h, g)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	if n != size || !bytes.Equal(h.Sum(nil), want) {
		return fmt.Errorf("verify: the copy reads back differently (%d bytes, want %d)", n, size)
	}
	return nil
}

func (im *importer) symlink(e ecryptfs.Entry) error {
	dp := filepath.Join(im.dst, e.Rel)
	if err := os.Remove(dp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Symlink(e.Target, dp); err != nil {
		return err
	}
	if err := im.attrs(e, dp); err != nil {
		return err
	}
	got, err := os.Readlink(dp)
	if err != nil || got != e.Target {
		return fmt.Errorf("verify: link reads %q, want %q (%v)", got, e.Target, err)
	}
	return im.verifyAttrs(e, dp)
}

// special makes a fifo or device node as the lower tree holds it (eCryptfs
// keeps them as plain lower nodes).
func (im *importer) special(e ecryptfs.Entry) error {
	st, ok := e.Info.Sys().(*syscall.Stat_t)
	if !ok || e.Info.Mode()&fs.ModeSocket != 0 {
		return fmt.Errorf("%s: sockets are not imported", e.Info.Mode().Type())
	}
	dp := filepath.Join(im.dst, e.Rel)
	_ = os.Remove(dp)
	if err := unix.Mknod(dp, st.Mode, int(st.Rdev)); err != nil {
		return err
	}
	if err := im.attrs(e, dp); err != nil {
		return err
	}
	return im.verifyAttrs(e, dp)
}

func (im *importer) hardLink(first, rel string) error {
	dp := filepath.Join(im.dst, rel)
	_ = os.Remove(dp)
	if err := os.Link(filepath.Join(im.dst, first), dp); err != nil {
		return err
	}
	a, err1 := os.Lstat(filepath.Join(im.dst, first))
	b, err2 := os.Lstat(dp)
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		return fmt.Errorf("verify: %s is not a hard link of %s", rel, first)
	}
	return nil
}

func (im *importer) finishDir(e ecryptfs.Entry) error {
	dp := filepath.Join(im.dst, e.Rel)
	if err := im.attrs(e, dp); err != nil {
		return err
	}
	return im.verifyAttrs(e, dp)
}

// attrs gives dp the owner (when root), mode, xattrs and times of the
// lower entry. eCryptfs keeps the plaintext's mode, owner and times on the
// lower inode, and its xattrs too, next to its own user.ecryptfs.
func (im *importer) attrs(e ecryptfs.Entry, dp string) error {
	st := e.Info.Sys().(*syscall.Stat_t)
	if im.asRoot {
		if err := os.Lchown(dp, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	isLink := e.Info.Mode()&fs.ModeSymlink != 0
	if !isLink {
		if err := unix.Chmod(dp, st.Mode&07777); err != nil {
			return err
		}
	}
	xs, err := lowerXattrs(filepath.Join(im.src, e.LowerRel))
	if err != nil {
		return err
	}
	for name, val := range xs {
		if err := unix.Lsetxattr(dp, name, val, 0); err != nil {
			return fmt.Errorf("set xattr %s: %w", name, err)
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(st.Atim.Nano()), unix.NsecToTimespec(st.Mtim.Nano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, dp, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func (im *importer) verifyAttrs(e ecryptfs.Entry, dp string) error {
	fi, err := os.Lstat(dp)
	if err != nil {
		return err
	}
	want := e.Info.Sys().(*syscall.Stat_t)
	got := fi.Sys().(*syscall.Stat_t)
	if e.Info.Mode()&fs.ModeSymlink == 0 && got.Mode&07777 != want.Mode&07777 {
		return fmt.Errorf("verify: mode %o, want %o", got.Mode&07777, want.Mode&07777)
	}
	if got.Mtim != want.Mtim {
		return fmt.Errorf("verify: mtime %v, want %v", time.Unix(got.Mtim.Unix()), time.Unix(want.Mtim.Unix()))
	}
	if im.asRoot && (got.Uid != want.Uid || got.Gid != want.Gid) {
		return fmt.Errorf("verify: owner %d:%d, want %d:%d", got.Uid, got.Gid, want.Uid, want.Gid)
	}
	xs, err := lowerXattrs(filepath.Join(im.src, e.LowerRel))
	if err != nil {
		return err
	}
	for name, val := range xs {
		buf := make([]byte, 64<<10)
		n, err := unix.Lgetxattr(dp, name, buf)
		if err != nil || !bytes.Equal(buf[:n], val) {
			return fmt.Errorf("verify: xattr %s differs (%v)", name, err)
		}
	}
	return nil
}

// lowerXattrs lists the xattrs of a lower entry that belong to the
// plaintext: all but eCryptfs's own header and the security/system
// namespaces, which the new volume sets itself (labels, ACLs come back as
// the mode's consequences).
func lowerXattrs(path string) (map[string][]byte, error) {
	buf := make([]byte, 64<<10)
	n, err := unix.Llistxattr(path, buf)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list xattrs of %s: %w", path, err)
	}
	out := map[string][]byte{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		if name == "" || name == ecryptfs.XattrName || !strings.HasPrefix(name, "user.") {
			continue
		}
		v := make([]byte, 64<<10)
		m, err := unix.Lgetxattr(path, name, v)
		if err != nil {
			return nil, fmt.Errorf("read xattr %s of %s: %w", name, path, err)
		}
		out[name] = v[:m]
	}
	return out, nil
}
