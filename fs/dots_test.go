package fs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// getdents lists dir with getdents64 itself (os.File.Readdirnames drops
// "." and ".."): name → inode number and d_type.
func getdents(t *testing.T, dir string) map[string][2]uint64 {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ents := map[string][2]uint64{}
	buf := make([]byte, 4096) // small: several calls on a big directory
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			t.Fatalf("getdents %s: %v", dir, err)
		}
		if n == 0 {
			return ents
		}
		for b := buf[:n]; len(b) > 0; {
			ino, typ, name, reclen := parseDirent(b)
			b = b[reclen:]
			if _, dup := ents[name]; dup {
				t.Errorf("%s lists %q twice", dir, name)
			}
			ents[name] = [2]uint64{ino, uint64(typ)}
		}
	}
}

// nameDiff says which names of want got lacks and which it has too many.
func nameDiff(got, want string) string {
	g, w := map[string]bool{}, map[string]bool{}
	for _, n := range strings.Fields(got) {
		g[n] = true
	}
	for _, n := range strings.Fields(want) {
		w[n] = true
	}
	var missing, extra []string
	for n := range w {
		if !g[n] {
			missing = append(missing, n)
		}
	}
	for n := range g {
		if !w[n] {
			extra = append(extra, n)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	return fmt.Sprintf("missing %q, extra %q", missing, extra)
}

func sortedNames(m map[string][2]uint64) string {
	var s []string
	for k := range m {
		s = append(s, k)
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

// TestDotEntries lists the root and a subdirectory of every variant with
// getdents: the names are the native directory's, "." and ".." included,
// as directories, "." with the directory's own inode number and ".." of
// the subdirectory with the root's; ls -la, find and rm -rf of a deep tree
// work as natively.
func TestDotEntries(t *testing.T) {
	for _, tool := range []string{"ls", "find", "rm"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (coreutils, findutils): %v", tool, err)
		}
	}
	build := func(t *testing.T, dir string) {
		must(t, os.WriteFile(filepath.Join(dir, "a"), []byte("a"), 0644))
		must(t, os.Mkdir(filepath.Join(dir, "sub"), 0755))
		must(t, os.WriteFile(filepath.Join(dir, "sub", "x"), nil, 0644))
		must(t, os.Mkdir(filepath.Join(dir, "sub", "y"), 0755))
		must(t, os.Symlink("a", filepath.Join(dir, "sub", "l")))
		for i := 0; i < 300; i++ { // a listing over several getdents calls
			must(t, os.WriteFile(filepath.Join(dir, "sub", fmt.Sprintf("file-with-a-longer-name-%03d", i)), nil, 0644))
		}
		deep := filepath.Join(dir, "deep")
		for i := 0; i < 30; i++ {
			deep = filepath.Join(deep, fmt.Sprintf("d%d", i))
			must(t, os.MkdirAll(deep, 0755))
			must(t, os.WriteFile(filepath.Join(deep, "f"), []byte("f"), 0644))
		}
	}
	type result struct{ root, sub, find string }
	run := func(t *testing.T, dir string) result {
		build(t, dir)
		var r result
		for _, d := range []struct {
			rel string
			out *string
		}{{"", &r.root}, {"sub", &r.sub}} {
			p := filepath.Join(dir, d.rel)
			ents := getdents(t, p)
			*d.out = sortedNames(ents)
			var st, parent unix.Stat_t
			must(t, unix.Stat(p, &st))
			must(t, unix.Stat(p+"/..", &parent))
			for _, dot := range []string{".", ".."} {
				if e, ok := ents[dot]; !ok || e[1] != unix.DT_DIR {
					t.Errorf("%s: %q listed %v, want a directory", p, dot, e)
				}
			}
			if ents["."][0] != st.Ino {
				t.Errorf("%s: \".\" has inode %d, stat says %d", p, ents["."][0], st.Ino)
			}
			if d.rel != "" && ents[".."][0] != parent.Ino {
				t.Errorf("%s: \"..\" has inode %d, stat of .. says %d", p, ents[".."][0], parent.Ino)
			}
			if e := ents["l"]; d.rel == "sub" && e[1] != unix.DT_LNK {
				t.Errorf("%s: symlink l listed as type %d", p, e[1])
			}
		}
		out, err := exec.Command("ls", "-la", dir, filepath.Join(dir, "sub")).CombinedOutput()
		if err != nil {
			t.Fatalf("ls -la: %v\n%s", err, out)
		}
		for _, want := range []string{" .\n", " ..\n", " sub\n", " l -> a\n"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("ls -la %s has no line ending in %q; it begins:\n%.400s", dir, want, out)
			}
		}
		cmd := exec.Command("find", ".")
		cmd.Dir = dir
		out, err = cmd.Output()
		if err != nil {
			t.Fatalf("find: %v\n%s", err, out)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		sort.Strings(lines)
		r.find = strings.Join(lines, "\n")
		if out, err := exec.Command("rm", "-rf", filepath.Join(dir, "deep"), filepath.Join(dir, "sub")).CombinedOutput(); err != nil {
			t.Fatalf("rm -rf: %v\n%s", err, out)
		}
		if ents := getdents(t, dir); sortedNames(ents) != ". .. a" {
			t.Errorf("after rm -rf %s lists %.200s", dir, sortedNames(ents))
		}
		return r
	}
	ref := run(t, t.TempDir())
	if !strings.HasPrefix(ref.root, ". .. ") {
		t.Fatalf("native root lists %s", ref.root)
	}
	for _, v := range everyVariant() {
		t.Run(v.name, func(t *testing.T) {
			got := run(t, mountVariant(t, v).mnt)
			if got.root != ref.root {
				t.Errorf("root listing differs from native: %s", nameDiff(got.root, ref.root))
			}
			if got.sub != ref.sub {
				t.Errorf("sub listing differs from native: %s", nameDiff(got.sub, ref.sub))
			}
			if got.find != ref.find {
				t.Errorf("find output differs from native: %s", nameDiff(got.find, ref.find))
			}
		})
	}
}
