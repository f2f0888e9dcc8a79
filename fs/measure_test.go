package fs

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

func statsByOp(s measure.Snapshot) map[string]measure.Stats {
	m := map[string]measure.Stats{}
	for _, st := range s.Ops {
		m[st.Op] = st
	}
	return m
}

// TestStatsCountOps runs a known sequence of operations and checks that
// the recorder counted exactly those (lookups and getattrs, which the
// kernel issues as its caches decide, are not checked), and that the op
// log holds one parsable line per recorded op.
func TestStatsCountOps(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			rec := measure.NewRecorder("test")
			logPath := filepath.Join(t.TempDir(), "op.log")
			oplog, err := measure.OpenOpLog(logPath, measure.OpLogOptions{Mount: "test", Paths: true})
			must(t, err)
			rec.SetOpLog(oplog)
			tm.mount(t, func(o *Options) { o.Recorder = rec })
			m := tm.mnt

			f, err := os.OpenFile(filepath.Join(m, "f"), os.O_CREATE|os.O_RDWR|syscall.O_DIRECT, 0644)
			must(t, err)
			buf := bytes.Repeat([]byte("x"), 4096)
			for i := 0; i < 5; i++ {
				_, err := f.WriteAt(buf, int64(i)*4096)
				must(t, err)
			}
			for i := 0; i < 3; i++ {
				_, err := f.ReadAt(buf, int64(i)*4096)
				must(t, err)
			}
			must(t, f.Sync())
			must(t, f.Close())
			must(t, os.Mkdir(filepath.Join(m, "d1"), 0755))
			must(t, os.Mkdir(filepath.Join(m, "d2"), 0755))
			must(t, os.Rename(filepath.Join(m, "f"), filepath.Join(m, "d1", "g")))
			must(t, unix.Setxattr(filepath.Join(m, "d1", "g"), "user.k", []byte("v"), 0))
			must(t, os.Remove(filepath.Join(m, "d1", "g")))
			must(t, os.Remove(filepath.Join(m, "d2")))

			got := statsByOp(rec.Snapshot())
			want := map[string]int64{"create": 1, "write": 5, "read": 3, "fsync": 1, "release": 1,
				"mkdir": 2, "rename": 1, "setxattr": 1, "unlink": 1, "rmdir": 1}
			for op, n := range want {
				if op == "release" {
					continue // the kernel sends RELEASE asynchronously after close; checked in the log after unmount
				}
				if got[op].Count != n {
					t.Errorf("%s: counted %d, want %d", op, got[op].Count, n)
				}
			}
			if got["write"].Bytes != 5*4096 || got["read"].Bytes != 3*4096 {
				t.Errorf("bytes: write %d read %d", got["write"].Bytes, got["read"].Bytes)
			}
			if v.cipher != "" && got["write"].CryptoNs == 0 {
				t.Error("encrypted writes spent no time in crypto")
			}
			if v.cipher == "" && got["write"].CryptoNs != 0 {
				t.Error("the twin spent time in crypto")
			}
			if got["write"].LowerNs == 0 {
				t.Error("writes spent no time in the lower filesystem")
			}

			tm.unmountNow(t)
			must(t, oplog.Close())
			lf, err := os.Open(logPath)
			must(t, err)
			defer lf.Close()
			lines := map[string]int64{}
			var writes []measure.LogLine
			sc := bufio.NewScanner(lf)
			for sc.Scan() {
				var l measure.LogLine
				if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
					t.Fatalf("op log line does not parse: %v: %s", err, sc.Text())
				}
				lines[l.Op]++
				// Parts are disjoint intervals inside the op: no time is
				// counted twice (1 µs of slack for clock granularity).
				if l.CryptoNs+l.LowerNs > l.Ns+1000 {
					t.Errorf("%s: crypto %d + lower %d > total %d ns", l.Op, l.CryptoNs, l.LowerNs, l.Ns)
				}
				if l.Op == "create" && l.Path != "/f" || l.Op == "unlink" && l.Path != "/d1/g" {
					t.Errorf("%s line has path %q", l.Op, l.Path)
				}
				if l.Op == "write" {
					writes = append(writes, l)
				}
			}
			for op, n := range want {
				if lines[op] != n {
					t.Errorf("op log: %d %s lines, want %d", lines[op], op, n)
				}
			}
			for i, w := range writes {
				if w.Off != int64(i)*4096 || w.Len != 4096 || w.Ns <= 0 || w.Ns < w.LowerNs+w.CryptoNs {
					t.Errorf("write line %d: %+v", i, w)
				}
			}
		})
	}
}

// TestMirror runs a real workload on an encrypted mount in mirror mode:
// afterwards the twin directory holds exactly the plaintext of the mount.
func TestMirror(t *testing.T) {
	tm := newVolume(t, variants[0])
	twin := t.TempDir()
	rec := measure.NewRecorder("mirror")
	tm.mount(t, func(o *Options) { o.Recorder = rec; o.Mirror = twin })
	m := tm.mnt
	src := filepath.Join(os.Getenv("GOROOT"), "src", "encoding")
	if _, err := os.Stat(src); err != nil {
		src = filepath.Join(runtimeGOROOT(), "src", "encoding")
	}
	if tarBin, err := exec.LookPath("tar"); err == nil {
		// A real untar. The shell starts outside the mount and changes
		// into it itself: a Go child that chdirs into a mount served by its
		// own parent can deadlock during fork.
		archive := filepath.Join(t.TempDir(), "enc.tar")
		if out, err := exec.Command(tarBin, "-C", filepath.Dir(src), "-cf", archive, "encoding").CombinedOutput(); err != nil {
			t.Fatalf("tar c: %v %s", err, out)
		}
		must(t, os.Mkdir(filepath.Join(m, "enc"), 0755))
		cmd := exec.Command("/bin/sh", "-c", `cd "$1" && exec "$2" --strip-components=1 -xf "$3"`, "sh", filepath.Join(m, "enc"), tarBin, archive)
		cmd.Dir = "/"
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("tar x on the mount: %v %s", err, out)
		}
	} else {
		copyTree(t, src, filepath.Join(m, "enc"))
	}
	// Edits, renames, deletes, links, attributes.
	must(t, os.WriteFile(filepath.Join(m, "enc", "json", "new.go"), []byte("package json\n"), 0644))
	f, err := os.OpenFile(filepath.Join(m, "enc", "json", "decode.go"), os.O_WRONLY|os.O_APPEND, 0)
	must(t, err)
	f.WriteString("// appended\n")
	f.Close()
	must(t, os.Truncate(filepath.Join(m, "enc", "json", "encode.go"), 1000))
	must(t, os.Rename(filepath.Join(m, "enc", "xml"), filepath.Join(m, "xml-moved")))
	must(t, os.RemoveAll(filepath.Join(m, "enc", "gob")))
	must(t, os.Symlink("../xml-moved", filepath.Join(m, "enc", "link")))
	must(t, os.Link(filepath.Join(m, "enc", "json", "new.go"), filepath.Join(m, "hard.go")))
	must(t, os.Chmod(filepath.Join(m, "hard.go"), 0600))
	must(t, unix.Setxattr(filepath.Join(m, "hard.go"), "user.note", []byte("mirrored"), 0))
	// chattr on a file and a directory (where the filesystem below has
	// inode flags): the twin's objects get them too.
	if err := setIoctlFlags(filepath.Join(m, "hard.go"), ioctlFlags(t, filepath.Join(m, "hard.go"))|testNoatimeFl); err == nil {
		must(t, setIoctlFlags(filepath.Join(m, "enc"), ioctlFlags(t, filepath.Join(m, "enc"))|testNodumpFl))
		if got := ioctlFlags(t, filepath.Join(twin, "hard.go")); got&testNoatimeFl == 0 {
			t.Errorf("twin file flags %#x after chattr +A on the mount", got)
		}
		if got := ioctlFlags(t, filepath.Join(twin, "enc")); got&testNodumpFl == 0 {
			t.Errorf("twin directory flags %#x after chattr +d on the mount", got)
		}
	} else {
		t.Logf("no inode flags checked: %v", err)
	}

	compareTrees(t, m, twin)
	snap := rec.Snapshot()
	if len(snap.Twin) == 0 {
		t.Fatal("no twin timings recorded in mirror mode")
	}
	for _, s := range snap.Twin {
		if s.Op == "write" && s.Count == 0 {
			t.Error("no twin writes timed")
		}
	}
}

func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0644)
	})
	must(t, err)
}

// compareTrees checks that two trees hold the same names, types, modes,
// sizes, contents, symlink targets and user xattrs.
func compareTrees(t *testing.T, a, b string) {
	t.Helper()
	seen := map[string]bool{}
	filepath.WalkDir(a, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Errorf("walk %s: %v", p, err)
			return nil
		}
		rel, _ := filepath.Rel(a, p)
		seen[rel] = true
		q := filepath.Join(b, rel)
		sa, errA := os.Lstat(p)
		sb, errB := os.Lstat(q)
		if errA != nil || errB != nil {
			t.Errorf("%s: %v / %v", rel, errA, errB)
			return nil
		}
		if sa.Mode() != sb.Mode() || (sa.Mode().IsRegular() && sa.Size() != sb.Size()) {
			t.Errorf("%s: mode %v size %d vs mode %v size %d", rel, sa.Mode(), sa.Size(), sb.Mode(), sb.Size())
			return nil
		}
		switch {
		case sa.Mode().IsRegular():
			ca, _ := os.ReadFile(p)
			cb, _ := os.ReadFile(q)
			if !bytes.Equal(ca, cb) {
				t.Errorf("%s: content differs", rel)
			}
			va := make([]byte, 256)
			vb := make([]byte, 256)
			na, ea := unix.Getxattr(p, "user.note", va)
			nb, eb := unix.Getxattr(q, "user.note", vb)
			if (ea == nil) != (eb == nil) || ea == nil && !bytes.Equal(va[:na], vb[:nb]) {
				t.Errorf("%s: xattr %q/%v vs %q/%v", rel, va[:max(na, 0)], ea, vb[:max(nb, 0)], eb)
			}
		case sa.Mode()&fs.ModeSymlink != 0:
			la, _ := os.Readlink(p)
			lb, _ := os.Readlink(q)
			if la != lb {
				t.Errorf("%s: link %q vs %q", rel, la, lb)
			}
		}
		return nil
	})
	filepath.WalkDir(b, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(b, p)
		if !seen[rel] {
			t.Errorf("%s: only in the twin", rel)
		}
		return nil
	})
}
