package crashsim

import (
	"os"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRecorderBarriers: twincrypt's FSYNC (fsync and fdatasync) of a file
// and FSYNCDIR of a directory reach the lower filesystem as barriers on
// the right inodes, and the barriers force what the model says.
func TestRecorderBarriers(t *testing.T) {
	requireRecorder(t)
	for _, v := range Variants {
		w := Workload{Name: "barriers", Run: func(e *Env) error {
			f, err := os.Create(e.Path(WorkDir + "/f"))
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := f.Write(data(5, 5000)); err != nil {
				return err
			}
			if err := unix.Fdatasync(int(f.Fd())); err != nil {
				return err
			}
			if _, err := f.Write(data(6, 100)); err != nil {
				return err
			}
			if err := f.Sync(); err != nil {
				return err
			}
			return e.FsyncDir(WorkDir)
		}}
		r, err := record(t.TempDir(), w, v)
		if err != nil {
			t.Fatal(err)
		}
		if r.modelOK != "" {
			t.Errorf("%s: replay: %s", v.Name, r.modelOK)
		}
		var file, dir ID = -1, -1
		var kinds []string
		for _, o := range r.ops {
			switch {
			case o.Kind == OpWrite && file < 0:
				file = o.Ino
			case o.Kind == OpFsync && o.Ino == file && o.Datasync:
				kinds = append(kinds, "fdatasync")
			case o.Kind == OpFsync && o.Ino == file:
				kinds = append(kinds, "fsync")
			case o.Kind == OpFsyncDir:
				dir = o.Ino
				kinds = append(kinds, "fsyncdir")
			}
		}
		if got := fmtList(kinds); got != "fdatasync fsync fsyncdir" {
			t.Errorf("%s: barriers on the file and its directory: %q, want fdatasync fsync fsyncdir", v.Name, got)
		}
		if dir < 0 || r.start.Inodes[dir] == nil || r.start.Inodes[dir].Type != syscall.S_IFDIR {
			t.Errorf("%s: FSYNCDIR on #%d, not on the workload's directory", v.Name, dir)
		}
		// Everything is forced at the end: no free page, all metadata.
		m := newModel(r.ops)
		for i, o := range r.ops {
			if o.Kind == OpWrite && m.dataBarrier[i] >= len(r.ops) {
				t.Errorf("%s: op %d (%s) not forced by the final fsync", v.Name, i, o)
			}
		}
		if m.forcedMeta[len(r.ops)] != m.metaBefore[len(r.ops)-1] {
			t.Errorf("%s: %d of %d metadata ops forced by the final fsyncdir", v.Name, m.forcedMeta[len(r.ops)], m.metaBefore[len(r.ops)-1])
		}
	}
}

// TestRecorderReplay: every kind of call twincrypt makes on LOWER, logged
// and replayed on the snapshot, gives what the backing directory holds
// (modes, xattrs, symlinks, hard links, renames over and exchanges,
// truncates, fallocate, removals).
func TestRecorderReplay(t *testing.T) {
	requireRecorder(t)
	for _, v := range Variants {
		w := Workload{Name: "replay", Run: func(e *Env) error {
			p := func(s string) string { return e.Path(WorkDir + "/" + s) }
			steps := []func() error{
				func() error { return os.WriteFile(p("a"), data(7, 10000), 0640) },
				func() error { return os.WriteFile(p(longName("b")), data(8, 3000), 0600) },
				func() error { return os.Truncate(p("a"), 5000) },
				func() error { return os.Truncate(p("a"), 7000) },
				func() error { return os.Chmod(p("a"), 0604) },
				func() error { return unix.Setxattr(p("a"), "user.k", []byte("v"), 0) },
				func() error { return unix.Removexattr(p("a"), "user.k") },
				func() error { return unix.Setxattr(p("a"), "user.k2", []byte("v2"), 0) },
				func() error { return os.Symlink("a", p("s")) },
				func() error { return os.Symlink(longName("target"), p(longName("s"))) },
				func() error { return os.Link(p("a"), p("hard")) },
				func() error { return os.MkdirAll(p("d/e"), 0750) },
				func() error { return os.Rename(p(longName("b")), p("d/e/b")) },
				func() error { return os.WriteFile(p("c"), []byte("c"), 0644) },
				func() error { return os.Rename(p("c"), p("a")) },
				func() error {
					return unix.Renameat2(unix.AT_FDCWD, p("hard"), unix.AT_FDCWD, p("d/e/b"), unix.RENAME_EXCHANGE)
				},
				func() error {
					f, err := os.OpenFile(p("d/e/b"), os.O_RDWR, 0)
					if err != nil {
						return err
					}
					defer f.Close()
					if err := unix.Fallocate(int(f.Fd()), 0, 0, 20000); err != nil {
						return err
					}
					return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 4096, 8192)
				},
				func() error { return os.Remove(p("s")) },
				func() error { return os.Mkdir(p("gone"), 0755) },
				func() error { return os.Remove(p("gone")) },
			}
			for _, s := range steps {
				if err := s(); err != nil {
					return err
				}
			}
			return nil
		}}
		r, err := record(t.TempDir(), w, v)
		if err != nil {
			t.Fatal(err)
		}
		if r.modelOK != "" {
			t.Errorf("%s: the log replayed differs from the backing directory: %s", v.Name, r.modelOK)
		}
		if len(r.ops) < 30 {
			t.Errorf("%s: only %d ops logged", v.Name, len(r.ops))
		}
	}
}

func fmtList(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out
}
