package fs

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/content"
)

// remountFresh mounts the volume of tm a second time at a new mount point,
// after tm was unmounted: nothing of the first mount is cached.
func remountFresh(t *testing.T, tm *testMount) *testMount {
	t.Helper()
	tm.unmountNow(t)
	tm2 := &testMount{lower: tm.lower, mnt: filepath.Join(t.TempDir(), "mnt2"), cfg: tm.cfg, master: tm.master, log: &syncBuffer{}}
	must(t, os.Mkdir(tm2.mnt, 0755))
	tm2.mount(t)
	return tm2
}

// TestLowerWriterDocumentedLimits demonstrates what cipher/FORMAT.md and
// docs/threat-model.md say a LOWER writer can do undetected (issue #16 (8)), so that
// the documents are checked: if a later format binds a sealed value to its
// file, or authenticates content, this test fails and the documents must
// change with it.
//
//   - user.* xattr values are sealed with the attribute's name only: a
//     value copied from one file to the same attribute of another reads
//     back as the other file's value;
//   - symlink targets are sealed as "symlink" only: a lower link's target
//     copied to another link makes that link point where the first does;
//   - an all-zero unit is a hole: zeroing an extent in LOWER makes it read
//     as zeros, with no error.
func TestLowerWriterDocumentedLimits(t *testing.T) {
	for _, v := range diffVariants {
		if v.cipher == "" {
			continue // the twin stores everything in the clear
		}
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			m := func(rel string) string { return filepath.Join(tm.mnt, rel) }
			must(t, os.WriteFile(m("a"), []byte("file a"), 0644))
			must(t, os.WriteFile(m("b"), []byte("file b"), 0644))
			must(t, unix.Setxattr(m("a"), "user.secret", []byte("value of a"), 0))
			must(t, unix.Setxattr(m("b"), "user.secret", []byte("value of b"), 0))
			must(t, os.Symlink("/target/of/la", m("la")))
			must(t, os.Symlink("/target/of/lb", m("lb")))
			data := make([]byte, 3*content.ExtentSize)
			for i := range data {
				data[i] = byte(i%251 + 1)
			}
			must(t, os.WriteFile(m("z"), data, 0644))
			la, lb := lowerPath(t, tm, "la"), lowerPath(t, tm, "lb")
			lowerA, lowerB, lowerZ := lowerPath(t, tm, "a"), lowerPath(t, tm, "b"), lowerPath(t, tm, "z")
			tm.unmountNow(t)

			// The LOWER writer: a's sealed xattr value replaced by b's, la's
			// sealed target by lb's, z's second extent by zeros.
			buf := make([]byte, 4096)
			n, err := unix.Getxattr(lowerB, "user.secret", buf)
			must(t, err)
			must(t, unix.Setxattr(lowerA, "user.secret", buf[:n], 0))
			target, err := os.Readlink(lb)
			must(t, err)
			must(t, os.Remove(la))
			must(t, os.Symlink(target, la))
			f, err := os.OpenFile(lowerZ, os.O_WRONLY, 0)
			must(t, err)
			_, err = f.WriteAt(make([]byte, content.ExtentSize), content.HeaderSize+content.ExtentSize)
			must(t, err)
			must(t, f.Close())

			tm2 := remountFresh(t, tm)
			m = func(rel string) string { return filepath.Join(tm2.mnt, rel) }
			n, err = unix.Getxattr(m("a"), "user.secret", buf)
			if err != nil || string(buf[:n]) != "value of b" {
				t.Errorf("xattr value swapped in LOWER: a reads %q, %v; FORMAT.md says it reads b's value", buf[:n], err)
			}
			if got, err := os.Readlink(m("la")); err != nil || got != "/target/of/lb" {
				t.Errorf("symlink target swapped in LOWER: la -> %q, %v; FORMAT.md says it points where lb does", got, err)
			}
			got, err := os.ReadFile(m("z"))
			want := append(append(append([]byte(nil), data[:content.ExtentSize]...), make([]byte, content.ExtentSize)...), data[2*content.ExtentSize:]...)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("extent zeroed in LOWER: read %d bytes, %v; FORMAT.md says extent 1 reads as zeros, the others unchanged (equal: %v)",
					len(got), err, bytes.Equal(got, want))
			}
		})
	}
}
