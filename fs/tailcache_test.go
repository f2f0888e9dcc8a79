package fs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestAppendTailCache: the encrypted mounts keep the plaintext of a file's
// partial last extent after a write, so that the next append need not read
// it back (ioState.tail). Between appends through one descriptor, every
// other way of changing the file (a write inside the tail or before it,
// ftruncate down and up, fallocate's punch and zero range, an open with
// O_TRUNC, a write through another descriptor that grows the file) goes
// through another descriptor, and after each step the file must hold what
// the same steps leave in a native file, read back from LOWER after a
// remount (the kernel's page cache holds what the program wrote, not what
// the daemon stored). A cache that one of those steps left stale writes
// old bytes back at the next append.
func TestAppendTailCache(t *testing.T) {
	requireFUSE(t)
	type step struct {
		name string
		do   func(app, other *os.File) error
	}
	pat := func(n int, seed byte) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = seed + byte(i*7)
		}
		return b
	}
	appendN := func(n int, seed byte) func(app, other *os.File) error {
		return func(app, _ *os.File) error {
			_, err := app.Write(pat(n, seed))
			return err
		}
	}
	at := func(n int, off int64, seed byte) func(app, other *os.File) error {
		return func(_, other *os.File) error {
			_, err := other.WriteAt(pat(n, seed), off)
			return err
		}
	}
	steps := []step{
		{"append 5000", appendN(5000, 1)},
		{"append 300", appendN(300, 2)},
		{"write inside the tail", at(100, 8200, 3)},
		{"append 17", appendN(17, 4)},
		{"write before the tail", at(50, 10, 5)},
		{"append 2000", appendN(2000, 6)},
		{"ftruncate down into the tail", func(_, o *os.File) error { return o.Truncate(8300) }},
		{"append 111", appendN(111, 7)},
		{"ftruncate up within the extent", func(_, o *os.File) error { return o.Truncate(8700) }},
		{"append 30", appendN(30, 8)},
		{"ftruncate up past the extent", func(_, o *os.File) error { return o.Truncate(13000) }},
		{"append 1000", appendN(1000, 9)},
		{"punch the tail", func(_, o *os.File) error {
			return unix.Fallocate(int(o.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 12300, 500)
		}},
		{"append 40", appendN(40, 10)},
		{"zero range in the tail", func(_, o *os.File) error {
			return unix.Fallocate(int(o.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, 14000, 30)
		}},
		{"append 500", appendN(500, 11)},
		{"append through the other descriptor", at(700, 14540, 12)},
		{"append 3", appendN(3, 13)},
		{"ftruncate to a multiple of 4096", func(_, o *os.File) error { return o.Truncate(12288) }},
		{"append 4097", appendN(4097, 14)},
		{"open O_TRUNC", func(_, o *os.File) error {
			f, err := os.OpenFile(o.Name(), os.O_WRONLY|os.O_TRUNC, 0)
			if err == nil {
				err = f.Close()
			}
			return err
		}},
		{"append 5000 again", appendN(5000, 15)},
		{"append 90", appendN(90, 16)},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.mount(t)
			native := filepath.Join(t.TempDir(), "f")
			var want [][]byte
			// run makes the first n steps on a file at p.
			run := func(p string, n int) {
				app, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				must(t, err)
				defer app.Close()
				other, err := os.OpenFile(p, os.O_RDWR, 0)
				must(t, err)
				defer other.Close()
				for i, s := range steps[:n] {
					if err := s.do(app, other); err != nil {
						t.Fatalf("%s: step %d (%s): %v", p, i, s.name, err)
					}
					if p == native {
						b, err := os.ReadFile(p)
						must(t, err)
						want = append(want, b)
					}
				}
			}
			run(native, len(steps))
			// Each step's state from LOWER: the steps up to i, a
			// remount, a read. Checking only the end would miss a stale
			// tail that a later step wrote over.
			for i := range steps {
				if i%4 != 3 && i != len(steps)-1 {
					continue
				}
				p := filepath.Join(tm.mnt, fmt.Sprintf("f%d", i))
				run(p, i+1)
				tm.unmountNow(t)
				tm.mount(t)
				tm.unmounted = false
				got, err := os.ReadFile(p)
				must(t, err)
				if !bytes.Equal(got, want[i]) {
					t.Fatalf("after step %d (%s): the file (%d bytes) differs from the native one (%d bytes) at byte %d",
						i, steps[i].name, len(got), len(want[i]), diffAt(got, want[i]))
				}
			}
		})
	}
}

func diffAt(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// TestSharedStorageTail: with --shared-storage the daemon keeps no tail
// (cryptIO.noTail): a change of the tail made behind the mount (here,
// through a second mount of the volume) is kept by the mount's next
// append, which re-encrypts the tail as it finds it in LOWER. With the
// cache, the append would write the tail of its own last write back over
// that change.
func TestSharedStorageTail(t *testing.T) {
	requireFUSE(t)
	for _, v := range variants {
		if v.cipher == "" {
			continue // the twin keeps no tail
		}
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.mount(t, func(o *Options) { o.SharedStorage = true })
			second := &testMount{lower: tm.lower, mnt: filepath.Join(t.TempDir(), "mnt"), cfg: tm.cfg,
				master: tm.master, log: &syncBuffer{}}
			must(t, os.Mkdir(second.mnt, 0755))
			second.mount(t, func(o *Options) { o.SharedStorage = true })

			want := bytes.Repeat([]byte{'a'}, 5000)
			app, err := os.OpenFile(filepath.Join(tm.mnt, "f"), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
			must(t, err)
			defer app.Close()
			_, err = app.Write(want)
			must(t, err)
			// Behind the first mount: bytes inside its tail extent.
			other, err := os.OpenFile(filepath.Join(second.mnt, "f"), os.O_WRONLY, 0)
			must(t, err)
			_, err = other.WriteAt(bytes.Repeat([]byte{'b'}, 100), 4200)
			must(t, err)
			must(t, other.Close())
			copy(want[4200:], bytes.Repeat([]byte{'b'}, 100))
			_, err = app.Write(bytes.Repeat([]byte{'c'}, 300))
			must(t, err)
			want = append(want, bytes.Repeat([]byte{'c'}, 300)...)
			must(t, app.Close())

			second.unmountNow(t)
			tm.unmountNow(t)
			tm.mount(t)
			tm.unmounted = false
			got, err := os.ReadFile(filepath.Join(tm.mnt, "f"))
			must(t, err)
			if !bytes.Equal(got, want) {
				t.Fatalf("after a change behind a shared-storage mount and an append through it: %d bytes, differs from the expected %d at byte %d",
					len(got), len(want), diffAt(got, want))
			}
		})
	}
}
