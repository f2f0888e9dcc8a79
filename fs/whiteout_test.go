package fs

import (
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Issue 41 (1): renameat2(old, new, RENAME_WHITEOUT) leaves a whiteout (a
// 0/0 character device) under the old name; overlayfs over the mount
// makes them. Where the old name is long enough to need a `.name`
// sidecar in LOWER, the rename dropped the sidecar: the whiteout was
// missing from listings and its directory could never be removed. Each
// mount must list, stat and remove what a plain directory on the same
// lower does.
func TestRenameWhiteoutLongName(t *testing.T) {
	onLowers(t, testRenameWhiteoutLongName)
}

func testRenameWhiteoutLongName(t *testing.T, dirs map[string]string) {
	long := strings.Repeat("w", 240)
	long2 := strings.Repeat("v", 230)
	cases := []struct{ name, from, to string }{
		{"long-to-short", long, "short"},
		{"short-to-long", "short", long},
		{"long-to-long", long, long2},
	}
	for _, c := range cases {
		got := map[string]string{}
		for _, target := range []string{"native", "xts", "cbc", "twin"} {
			d := filepath.Join(dirs[target], c.name)
			must(t, unix.Mkdir(d, 0755))
			from, to := filepath.Join(d, c.from), filepath.Join(d, c.to)
			fd, err := unix.Open(from, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
			must(t, err)
			unix.Write(fd, []byte("upper file"))
			unix.Close(fd)
			var b strings.Builder
			err = unix.Renameat2(unix.AT_FDCWD, from, unix.AT_FDCWD, to, unix.RENAME_WHITEOUT)
			if err == unix.EINVAL && target == "native" {
				t.Skipf("the lower filesystem takes no RENAME_WHITEOUT: %v", err)
			}
			b.WriteString("rename errno " + en(err) + "\n")
			names := whiteoutListing(t, d)
			b.WriteString("listing: " + strings.Join(shorten(names), " ") + "\n")
			for _, name := range names {
				var st unix.Stat_t
				err := unix.Lstat(filepath.Join(d, name), &st)
				b.WriteString(shorten([]string{name})[0] + ": " + statLine(&st) + " rdev=" + itoa(int(st.Rdev)) + " errno " + en(err) + "\n")
			}
			for _, name := range names {
				b.WriteString("unlink errno " + en(unix.Unlink(filepath.Join(d, name))) + "\n")
			}
			b.WriteString("rmdir errno " + en(unix.Rmdir(d)) + "\n")
			got[target] = b.String()
		}
		if !strings.Contains(got["native"], "type=2 mode=0000") {
			t.Fatalf("%s: no whiteout natively, the test proves nothing:\n%s", c.name, got["native"])
		}
		for _, target := range []string{"xts", "cbc", "twin"} {
			if got[target] != got["native"] {
				t.Errorf("%s on %s:\n%s\nnatively:\n%s", c.name, target, got[target], got["native"])
			}
		}
	}
}

// en is the errno of err as a number.
func en(err error) string { return itoa(int(errnoOf(err))) }

func whiteoutListing(t *testing.T, dir string) []string {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		must(t, err)
		if n == 0 {
			break
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
	sort.Strings(names)
	return names
}

// shorten writes a long name as its first letter and length.
func shorten(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		if len(n) > 20 {
			n = n[:1] + "*" + itoa(len(n))
		}
		out[i] = n
	}
	return out
}
