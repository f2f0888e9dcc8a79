package crashsim

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Env is what a workload sees: the mount (Mnt, plaintext paths are
// relative to it), a scratch directory outside it, and the calls that
// declare what the workload was promised, at which point of the log.
type Env struct {
	Mnt     string
	Scratch string

	rec      *Recorder
	marks    []int
	promises []promise
	checks   []appCheck
}

type promise struct {
	path    string
	content []byte
	link    bool // a symlink to target
	target  string
	from    int
	until   int // -1: to the end
}

type appCheck struct {
	name string
	f    func(mnt string, crash int) error
}

// Mark returns the current position in the log and remembers it: a crash
// state's promises and application checks may depend on where the crash is
// only through marks.
func (e *Env) Mark() int {
	p := e.rec.Len()
	e.marks = append(e.marks, p)
	return p
}

// Durable promises, from now until Until(path), that path holds content
// (what fsync, or sync, made durable).
func (e *Env) Durable(path string, content []byte) {
	e.promises = append(e.promises, promise{path: path, content: append([]byte(nil), content...), from: e.Mark(), until: -1})
}

// DurableLink promises that the symlink path points to target.
func (e *Env) DurableLink(path, target string) {
	e.promises = append(e.promises, promise{path: path, link: true, target: target, from: e.Mark(), until: -1})
}

// Until ends the promises about path: the workload is about to change it.
func (e *Env) Until(path string) {
	p := e.Mark()
	for i := range e.promises {
		if e.promises[i].path == path && e.promises[i].until < 0 {
			e.promises[i].until = p
		}
	}
}

// Sync is sync(1): it reaches the real LOWER's filesystem (not a FUSE
// one, which has no SYNCFS), so the recorder logs it as the barrier.
func (e *Env) Sync() {
	unix.Sync()
	e.rec.Sync()
}

// Check adds an application-level check run on every crash state's mount
// (ALICE's checkers): f gets the mount and the crash point.
func (e *Env) Check(name string, f func(mnt string, crash int) error) {
	e.checks = append(e.checks, appCheck{name: name, f: f})
}

// promiseKey says which marks a crash point is past.
func (e *Env) promiseKey(crash int) string {
	n := 0
	for _, m := range e.marks {
		if m <= crash {
			n++
		}
	}
	return fmt.Sprint(n)
}

// Path is the mount path of a plaintext path.
func (e *Env) Path(rel string) string { return filepath.Join(e.Mnt, rel) }

// WriteFileSync creates (or truncates) rel, writes data, fsyncs and closes.
func (e *Env) WriteFileSync(rel string, data []byte) error {
	f, err := os.OpenFile(e.Path(rel), os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0644)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// FsyncDir fsyncs the directory rel.
func (e *Env) FsyncDir(rel string) error {
	f, err := os.Open(e.Path(rel))
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// entry is one plaintext entry of a tree seen through a mount.
type entry struct {
	mode    fs.FileMode
	content []byte
	target  string
}

// readView reads every entry under mnt.
func readView(mnt string) (map[string]entry, error) {
	view := map[string]entry{}
	err := filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(mnt, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		e := entry{mode: fi.Mode()}
		switch {
		case fi.Mode().IsRegular():
			if e.content, err = os.ReadFile(p); err != nil {
				return fmt.Errorf("read %s: %w", rel, err)
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			if e.target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		view[rel] = e
		return nil
	})
	return view, err
}

// inside reports whether rel is dir or under it.
func inside(rel, dir string) bool {
	return rel == dir || strings.HasPrefix(rel, dir+"/")
}

// compareUntouched checks the entries of before outside the workload's
// directory against after: same type, mode, content, target; and nothing
// new outside it.
func compareUntouched(before, after map[string]entry, work string) []string {
	var out []string
	for rel, b := range before {
		if inside(rel, work) {
			continue
		}
		a, ok := after[rel]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("untouched %s is gone", rel))
		case a.mode != b.mode:
			out = append(out, fmt.Sprintf("untouched %s: mode %v, was %v", rel, a.mode, b.mode))
		case !bytes.Equal(a.content, b.content):
			out = append(out, fmt.Sprintf("untouched %s: content changed (%d bytes, was %d)", rel, len(a.content), len(b.content)))
		case a.target != b.target:
			out = append(out, fmt.Sprintf("untouched %s: target %q, was %q", rel, a.target, b.target))
		}
	}
	for rel := range after {
		if _, ok := before[rel]; !ok && !inside(rel, work) {
			out = append(out, fmt.Sprintf("%s appeared outside the workload's directory", rel))
		}
	}
	return out
}

// checkPromises checks the promises valid at crash on the mount.
func (e *Env) checkPromises(mnt string, crash int) []string {
	var out []string
	for _, p := range e.promises {
		if p.from > crash || (p.until >= 0 && p.until < crash) {
			continue
		}
		fp := filepath.Join(mnt, p.path)
		if p.link {
			t, err := os.Readlink(fp)
			if err != nil || t != p.target {
				out = append(out, fmt.Sprintf("durable symlink %s: %q, %v; want %q", p.path, t, err, p.target))
			}
			continue
		}
		b, err := os.ReadFile(fp)
		if err != nil {
			out = append(out, fmt.Sprintf("durable %s: %v", p.path, err))
			continue
		}
		if !bytes.Equal(b, p.content) {
			out = append(out, fmt.Sprintf("durable %s: %d bytes differ from the %d fsynced (first difference at %d)", p.path, len(b), len(p.content), firstDiff(b, p.content)))
		}
	}
	return out
}

func firstDiff(a, b []byte) int {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) < len(b) {
		return len(a)
	}
	return len(b)
}
