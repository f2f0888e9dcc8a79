package fs

import (
	"bytes"
	"errors"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoPlaintextLeaks writes distinctive content and names through the
// encrypted mount and checks that no byte sequence or name of them appears
// anywhere under LOWER.
func TestNoPlaintextLeaks(t *testing.T) {
	for _, v := range variants[:2] {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			pattern := []byte("SECRET-PATTERN-0123456789-")
			content := bytes.Repeat(pattern, 50000)
			names := []string{"secretname-alpha", "SECRETDIR-beta", strings.Repeat("secretlong", 25)}
			dir := filepath.Join(tm.mnt, names[1])
			must(t, os.Mkdir(dir, 0755))
			must(t, os.WriteFile(filepath.Join(tm.mnt, names[0]), content, 0644))
			must(t, os.WriteFile(filepath.Join(dir, names[2]), content[:5], 0644))
			must(t, os.Symlink("secret-link-target", filepath.Join(tm.mnt, "secretlink")))
			must(t, unix.Setxattr(filepath.Join(tm.mnt, names[0]), "user.k", []byte("secret-xattr-value"), 0))

			needles := [][]byte{[]byte("SECRET"), []byte("secret"), pattern[:8]}
			err := filepath.WalkDir(tm.lower, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					return err
				}
				for _, n := range needles {
					if bytes.Contains([]byte(d.Name()), n) {
						t.Errorf("plaintext name under LOWER: %s", p)
					}
				}
				if d.Type()&fs.ModeSymlink != 0 {
					target, _ := os.Readlink(p)
					if strings.Contains(target, "secret") {
						t.Errorf("plaintext symlink target under LOWER: %s", p)
					}
					return nil
				}
				buf := make([]byte, 64<<10)
				if sz, err := unix.Lgetxattr(p, "user.k", buf); err == nil && bytes.Contains(buf[:sz], []byte("secret")) {
					t.Errorf("plaintext xattr under LOWER: %s", p)
				}
				if d.Type().IsRegular() {
					b, err := os.ReadFile(p)
					if err != nil {
						return err
					}
					for _, n := range needles {
						if bytes.Contains(b, n) {
							t.Errorf("plaintext content in %s", p)
						}
					}
				}
				return nil
			})
			must(t, err)
			// And it all reads back.
			got, err := os.ReadFile(filepath.Join(tm.mnt, names[0]))
			must(t, err)
			if !bytes.Equal(got, content) {
				t.Fatal("content does not read back")
			}
		})
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestRandomOpsAgainstTwin applies one seeded random sequence of writes,
// truncates and reads to a file on the encrypted mount and on the twin and
// compares every read and the final content.
func TestRandomOpsAgainstTwin(t *testing.T) {
	for _, v := range variants[:2] {
		t.Run(v.name, func(t *testing.T) {
			crypt := mountVariant(t, v)
			twin := mountVariant(t, variants[2])
			rng := rand.New(rand.NewSource(42))
			fc, err := os.OpenFile(filepath.Join(crypt.mnt, "f"), os.O_RDWR|os.O_CREATE, 0644)
			must(t, err)
			defer fc.Close()
			ft, err := os.OpenFile(filepath.Join(twin.mnt, "f"), os.O_RDWR|os.O_CREATE, 0644)
			must(t, err)
			defer ft.Close()
			sizes := []int{1, 15, 16, 17, 4095, 4096, 4097, 8192 + 3, 100000, 1 << 20, 3 << 20}
			for step := 0; step < 300; step++ {
				switch op := rng.Intn(10); {
				case op < 5:
					n := sizes[rng.Intn(len(sizes))]
					off := int64(rng.Intn(6 << 20))
					data := make([]byte, n)
					rng.Read(data)
					_, e1 := fc.WriteAt(data, off)
					_, e2 := ft.WriteAt(data, off)
					if e1 != nil || e2 != nil {
						t.Fatalf("step %d write(%d, %d): crypt %v, twin %v", step, off, n, e1, e2)
					}
				case op < 7:
					size := int64(rng.Intn(7 << 20))
					if rng.Intn(4) == 0 {
						size = int64(rng.Intn(3 * 4096))
					}
					must(t, fc.Truncate(size))
					must(t, ft.Truncate(size))
				default:
					n := sizes[rng.Intn(len(sizes))]
					off := int64(rng.Intn(7 << 20))
					b1, b2 := make([]byte, n), make([]byte, n)
					n1, e1 := fc.ReadAt(b1, off)
					n2, e2 := ft.ReadAt(b2, off)
					if n1 != n2 || !bytes.Equal(b1[:n1], b2[:n2]) || (e1 == nil) != (e2 == nil) {
						t.Fatalf("step %d read(%d, %d): crypt %d %v, twin %d %v", step, off, n, n1, e1, n2, e2)
					}
				}
				s1, _ := fc.Stat()
				s2, _ := ft.Stat()
				if s1.Size() != s2.Size() {
					t.Fatalf("step %d: size crypt %d twin %d", step, s1.Size(), s2.Size())
				}
			}
			a, err := os.ReadFile(filepath.Join(crypt.mnt, "f"))
			must(t, err)
			b, err := os.ReadFile(filepath.Join(twin.mnt, "f"))
			must(t, err)
			if !bytes.Equal(a, b) {
				t.Fatal("final content differs from the twin")
			}
		})
	}
}

// TestEdgeFiles covers sizes and names that break naive implementations.
func TestEdgeFiles(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			for _, size := range []int{0, 1, 15, 16, 17, 4079, 4080, 4081, 4095, 4096, 4097, 12345} {
				p := filepath.Join(tm.mnt, "size", "f"+itoa(size))
				os.MkdirAll(filepath.Dir(p), 0755)
				data := bytes.Repeat([]byte{byte(size)}, size)
				must(t, os.WriteFile(p, data, 0644))
				st, err := os.Stat(p)
				must(t, err)
				if st.Size() != int64(size) {
					t.Errorf("size %d: stat says %d", size, st.Size())
				}
				got, err := os.ReadFile(p)
				must(t, err)
				if !bytes.Equal(got, data) {
					t.Errorf("size %d: content differs", size)
				}
			}
			// A 255-byte name, then one too long.
			long := strings.Repeat("n", 255)
			must(t, os.WriteFile(filepath.Join(tm.mnt, long), []byte("x"), 0644))
			ents, err := os.ReadDir(tm.mnt)
			must(t, err)
			found := false
			for _, e := range ents {
				found = found || e.Name() == long
			}
			if !found {
				t.Error("255-byte name not listed")
			}
			must(t, os.Rename(filepath.Join(tm.mnt, long), filepath.Join(tm.mnt, long[:254]+"m")))
			if _, err := os.Stat(filepath.Join(tm.mnt, long[:254]+"m")); err != nil {
				t.Errorf("renamed long name: %v", err)
			}
			must(t, os.Remove(filepath.Join(tm.mnt, long[:254]+"m")))
			if err := os.WriteFile(filepath.Join(tm.mnt, long+"x"), nil, 0644); !errors.Is(err, syscall.ENAMETOOLONG) {
				t.Errorf("256-byte name: %v", err)
			}

			// Hard links share content.
			a, b := filepath.Join(tm.mnt, "a"), filepath.Join(tm.mnt, "size", "b")
			must(t, os.WriteFile(a, []byte("hello"), 0644))
			must(t, os.Link(a, b))
			must(t, os.WriteFile(b, []byte("world!"), 0644))
			if got, _ := os.ReadFile(a); string(got) != "world!" {
				t.Errorf("hard link content %q", got)
			}

			// Rename over an open file: the open handle keeps the old data.
			c := filepath.Join(tm.mnt, "c")
			must(t, os.WriteFile(c, []byte("old content"), 0644))
			fh, err := os.Open(c)
			must(t, err)
			defer fh.Close()
			must(t, os.WriteFile(filepath.Join(tm.mnt, "d"), []byte("new"), 0644))
			must(t, os.Rename(filepath.Join(tm.mnt, "d"), c))
			buf := make([]byte, 64)
			n, _ := fh.ReadAt(buf, 0)
			if string(buf[:n]) != "old content" {
				t.Errorf("open file after rename-over reads %q", buf[:n])
			}
			if got, _ := os.ReadFile(c); string(got) != "new" {
				t.Errorf("renamed-over file reads %q", got)
			}

			// O_APPEND.
			f, err := os.OpenFile(c, os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			f.Write([]byte("+1"))
			f.Write([]byte("+2"))
			f.Close()
			if got, _ := os.ReadFile(c); string(got) != "new+1+2" {
				t.Errorf("append gives %q", got)
			}
		})
	}
}

// TestSparse5GiB makes a 5 GiB sparse file: it must read zeros, report its
// size and use almost no space below.
func TestSparse5GiB(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			p := filepath.Join(tm.mnt, "sparse")
			f, err := os.Create(p)
			must(t, err)
			defer f.Close()
			must(t, f.Truncate(5<<30))
			_, err = f.WriteAt([]byte("end"), 5<<30-3)
			must(t, err)
			_, err = f.WriteAt([]byte("mid"), 2<<30+4094)
			must(t, err)
			st, err := os.Stat(p)
			must(t, err)
			if st.Size() != 5<<30 {
				t.Fatalf("size %d", st.Size())
			}
			buf := make([]byte, 8192)
			n, err := f.ReadAt(buf, 1<<30)
			if err != nil || n != len(buf) || !bytes.Equal(buf, make([]byte, 8192)) {
				t.Fatalf("hole reads %d bytes, %v, zero=%v", n, err, bytes.Equal(buf, make([]byte, 8192)))
			}
			n, _ = f.ReadAt(buf[:6], 2<<30+4093)
			if string(buf[:n]) != "\x00mid\x00\x00" {
				t.Fatalf("data across an extent boundary reads %q", buf[:n])
			}
			var used int64
			filepath.WalkDir(tm.lower, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					var s syscall.Stat_t
					syscall.Stat(p, &s)
					used += s.Blocks * 512
				}
				return nil
			})
			if used > 1<<20 {
				t.Errorf("5 GiB sparse file uses %d bytes below", used)
			}
		})
	}
}

func itoa(i int) string { return strconv.Itoa(i) }
