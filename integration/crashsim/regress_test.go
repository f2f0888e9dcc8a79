package crashsim

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/integration"
)

// The crash states that showed bugs, kept as regression tests. Each
// records a small workload, builds the one state with Pick and checks it
// as make crash-states does.

func requireRecorder(t *testing.T, tools ...string) {
	t.Helper()
	integration.RequireFUSE(t)
	if os.Geteuid() != 0 {
		t.Skip("the recording lower layer mounts with DirectMount: root only")
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed (Debian package %s)", tool, tool)
		}
	}
}

func checkPicked(t *testing.T, w Workload, v Variant, pick func(r *recorded) State) {
	t.Helper()
	dir := t.TempDir()
	r, err := record(dir, w, v)
	if err != nil {
		t.Fatal(err)
	}
	if r.modelOK != "" {
		t.Fatalf("the log replayed does not give the real end state: %s", r.modelOK)
	}
	s := pick(r)
	msgs, err := r.check(filepath.Join(dir, "state"), s)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range msgs {
		t.Errorf("%s/%s %s: %s", w.Name, v.Name, s.Desc, m)
	}
}

// lastIndex is the index of the last op that f selects (-1: none).
func lastIndex(ops []Op, f func(o Op) bool) int {
	for i := len(ops) - 1; i >= 0; i-- {
		if f(ops[i]) {
			return i
		}
	}
	return -1
}

// readable is an application check: every regular file under the
// workload's directory reads without error.
func readable(mnt string, crash int) error {
	return filepath.Walk(filepath.Join(mnt, WorkDir), func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			if _, err := os.ReadFile(p); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestCrashRegressionZeroHeader: a file written and not fsynced whose
// first page (with the header) never reached the disk gave EIO for every
// read, which made SQLite refuse a database whose hot journal it was
// (disk I/O error) and an append-only log unreadable. It reads as zeros
// now, and a write starts it afresh.
func TestCrashRegressionZeroHeader(t *testing.T) {
	requireRecorder(t)
	w := Workload{Name: "zero-header", Run: func(e *Env) error {
		f, err := os.Create(e.Path(WorkDir + "/log"))
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := f.Write(data(1, 9000)); err != nil {
			return err
		}
		e.Check("readable", readable)
		e.Check("zeros where lost", func(mnt string, crash int) error {
			b, err := os.ReadFile(filepath.Join(mnt, WorkDir, "log"))
			if err != nil {
				return err
			}
			if len(b) != 9000 || !bytes.Equal(b[:4064], make([]byte, 4064)) {
				return fmt.Errorf("%d bytes, first page not zeros", len(b))
			}
			// A write makes it a file again: the rest reads as zeros,
			// not as garbage of units stored under the lost header.
			if err := os.WriteFile(filepath.Join(mnt, WorkDir, "log2"), nil, 0644); err != nil {
				return err
			}
			f, err := os.OpenFile(filepath.Join(mnt, WorkDir, "log"), os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.WriteAt([]byte("new"), 100); err != nil {
				return err
			}
			b, err = os.ReadFile(filepath.Join(mnt, WorkDir, "log"))
			want := make([]byte, 9000)
			copy(want[100:], "new")
			if err != nil || !bytes.Equal(b, want) {
				return fmt.Errorf("after a write: %d bytes, %v; want zeros and the write", len(b), err)
			}
			return nil
		})
		return nil
	}}
	for _, v := range Variants {
		checkPicked(t, w, v, func(r *recorded) State {
			// Everything but the pages of the file's first 4 KiB.
			return Pick(r.ops, len(r.ops), len(r.ops), func(i int, o Op) bool { return o.Off < PageSize })
		})
	}
}

// TestCrashRegressionSQLiteHotJournal: SQLite in rollback-journal mode,
// crashed while its journal was being written (before the journal's
// fdatasync), the journal's first page lost: the database must open and
// hold every committed transaction (it gave "disk I/O error").
func TestCrashRegressionSQLiteHotJournal(t *testing.T) {
	requireRecorder(t, "sqlite3")
	w := Workloads[3]
	if w.Name != "sqlite-rollback" {
		t.Fatal("Workloads changed: want sqlite-rollback at index 3")
	}
	v := Variants[2] // plaintext names: the journal is found by name
	checkPicked(t, w, v, func(r *recorded) State {
		// The last journal created, and its first fdatasync.
		j := lastIndex(r.ops, func(o Op) bool { return o.Kind == OpCreate && strings.HasSuffix(o.Name, "-journal") })
		ino := r.ops[j].Ino
		crash := j
		for crash < len(r.ops) && !(r.ops[crash].Kind == OpFsync && r.ops[crash].Ino == ino) {
			crash++
		}
		return Pick(r.ops, crash, len(r.ops), func(i int, o Op) bool { return o.Ino == ino && o.Off < PageSize })
	})
}

// TestCrashRegressionDirIVOnFsync: a new directory's IV was written
// without fsync; an application (git, its loose objects) fsynced a new
// file in it and not the directory. A journalling LOWER keeps the
// directory and the name (the fsync commits the journal) but not the IV's
// content: the name did not decrypt and the file was lost. The fsync of
// the file now makes the pending IV durable first.
func TestCrashRegressionDirIVOnFsync(t *testing.T) {
	requireRecorder(t)
	w := Workload{Name: "dir-iv-on-fsync", Run: func(e *Env) error {
		if err := os.Mkdir(e.Path(WorkDir+"/objects"), 0755); err != nil {
			return err
		}
		content := data(2, 5000)
		p := WorkDir + "/objects/" + longName("obj")
		if err := e.WriteFileSync(p, content); err != nil {
			return err
		}
		e.Durable(p, content)
		return nil
	}}
	for _, v := range Variants {
		checkPicked(t, w, v, func(r *recorded) State {
			// Every page the model does not force is lost.
			return Pick(r.ops, len(r.ops), len(r.ops), func(int, Op) bool { return true })
		})
	}
}

// TestCrashRegressionEmptyDirWithTmp: mkdir a, mkdir a/b, crashed inside
// b's IV write (its temporary file exists, the rename did not happen), a's
// IV content lost. fsck --repair moved b (its name no longer decrypts) to
// lost+found but left it without IV: the temporary file made it look
// non-empty. It gets a new IV now, and the repair ends clean.
func TestCrashRegressionEmptyDirWithTmp(t *testing.T) {
	requireRecorder(t)
	w := Workload{Name: "empty-dir-with-tmp", Run: func(e *Env) error {
		return os.MkdirAll(e.Path(WorkDir+"/a/b"), 0755)
	}}
	for _, v := range Variants[:2] {
		checkPicked(t, w, v, func(r *recorded) State {
			crash := lastIndex(r.ops, func(o Op) bool { return o.Kind == OpRename })
			return Pick(r.ops, crash, len(r.ops), func(int, Op) bool { return true })
		})
	}
}

// TestCrashRegressionAppendTail: 3700 bytes fsynced, then an append not
// yet fsynced. The append re-encrypts the old tail unit at its new length
// (ciphertext stealing ties its last two AES blocks to the length), so a
// crash that kept the new tail page but not the new size, or the new
// size but not the page, left the last fsynced bytes (3696..3700) as
// garbage. Both states read the fsynced bytes back now.
func TestCrashRegressionAppendTail(t *testing.T) {
	requireRecorder(t)
	path := WorkDir + "/log"
	old := data(3, 3700)
	for _, grow := range []int{200, 1000} { // within the extent, past it
		w := Workload{Name: fmt.Sprint("append-tail-", grow), Run: func(e *Env) error {
			if err := e.WriteFileSync(path, old); err != nil {
				return err
			}
			e.Check("fsynced prefix", func(mnt string, crash int) error {
				b, err := os.ReadFile(filepath.Join(mnt, path))
				if err != nil {
					return err
				}
				if len(b) < len(old) || !bytes.Equal(b[:len(old)], old) {
					return fmt.Errorf("%d bytes; the fsynced 3700 differ at %d", len(b), firstDiff(b, old))
				}
				return nil
			})
			f, err := os.OpenFile(e.Path(path), os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write(data(4, grow))
			return err
		}}
		for _, v := range Variants[:2] {
			checkPicked(t, w, v, func(r *recorded) State {
				// New pages, old size: the last setsize is lost.
				return Pick(r.ops, len(r.ops), r.ops2meta(len(r.ops))-1, func(int, Op) bool { return false })
			})
			checkPicked(t, w, v, func(r *recorded) State {
				// New size, old pages.
				return Pick(r.ops, len(r.ops), len(r.ops), func(int, Op) bool { return true })
			})
		}
	}
}

// ops2meta is the number of metadata operations in the first n.
func (r *recorded) ops2meta(n int) int {
	k := 0
	for _, o := range r.ops[:n] {
		if o.Kind.IsMeta() {
			k++
		}
	}
	return k
}
