package fs

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// streamFiles is the size of the directories below: a listing of several
// daemon batches (direntBufSize of lower entries each) on every variant.
const streamFiles = 3000

// streamName is the i-th name of those directories.
func streamName(i int) string {
	return fmt.Sprintf("stream-entry-%05d-with-a-longer-name-to-fill-batches", i)
}

// fillStreamDir creates streamFiles empty files in dir.
func fillStreamDir(t *testing.T, dir string) {
	t.Helper()
	for i := range streamFiles {
		must(t, os.WriteFile(filepath.Join(dir, streamName(i)), nil, 0o644))
	}
}

// posDirent is a directory entry as getdents(2) gives it, with its d_off.
type posDirent struct {
	name string
	off  int64
}

// readPos reads the entries of the open directory fd from its offset to
// the end, with a getdents buffer of bufSize bytes (max entries: all).
func readPos(t *testing.T, fd, bufSize, max int) []posDirent {
	t.Helper()
	var ents []posDirent
	buf := make([]byte, bufSize)
	for max < 0 || len(ents) < max {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		must(t, err)
		if n == 0 {
			break
		}
		for b := buf[:n]; len(b) > 0; {
			reclen := int(binary.NativeEndian.Uint16(b[16:18]))
			name := b[19:reclen]
			if i := bytes.IndexByte(name, 0); i >= 0 {
				name = name[:i]
			}
			ents = append(ents, posDirent{string(name), int64(binary.NativeEndian.Uint64(b[8:16]))})
			b = b[reclen:]
		}
	}
	return ents
}

func posNames(ents []posDirent) []string {
	var s []string
	for _, e := range ents {
		s = append(s, e.name)
	}
	return s
}

// TestListingStreams: an open directory holds one batch of its listing,
// not the whole of it, while it is being read, and nothing of it once
// read to the end; the listing is complete and has each name once.
func TestListingStreams(t *testing.T) {
	for _, v := range diffVariants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.mount(t)
			dir := filepath.Join(tm.mnt, "d")
			must(t, os.Mkdir(dir, 0o755))
			fillStreamDir(t, dir)
			fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
			must(t, err)
			defer unix.Close(fd)
			// One getdents of 4 KiB: a READDIRPLUS of a page.
			first := readPos(t, fd, 4096, 1)
			held := func() (n, handles int) {
				tm.root.open.Range(func(k, _ any) bool {
					if d, ok := k.(*dirHandle); ok {
						d.mu.Lock()
						n = max(n, cap(d.batch))
						d.mu.Unlock()
						handles++
					}
					return true
				})
				return n, handles
			}
			n, handles := held()
			if handles == 0 {
				t.Fatal("no open directory handle in the daemon")
			}
			// A batch is at most two lower getdents of direntBufSize;
			// a lower record is at least 24 bytes (20 + a name).
			if limit := 2 * direntBufSize / 64; n > limit || n >= streamFiles {
				t.Errorf("an open directory holds %d entries after the first page of %d: want one batch (< %d)", n, streamFiles, limit)
			}
			rest := readPos(t, fd, 4096, -1)
			if n, _ := held(); n != 0 {
				t.Errorf("a directory read to its end still holds %d entries", n)
			}
			names := posNames(append(first, rest...))
			slices.Sort(names)
			want := []string{".", ".."}
			for i := range streamFiles {
				want = append(want, streamName(i))
			}
			slices.Sort(want)
			if !slices.Equal(names, want) {
				t.Errorf("listing of %d names: got %d entries, want %d, each name once", streamFiles, len(names), len(want))
			}
		})
	}
}

// TestSeekdirLikeNative: telldir/seekdir positions (the d_off of an
// entry) on the mount behave as on a native directory of the lower
// filesystem: a seek back to a position read earlier continues with the
// same entries, in the listing's first batch, at a batch boundary and
// past it. And where listings reach the daemon (--shared-storage), after
// a name not read yet was removed, a seek to a position before it does
// not return it: the daemon seeks the lower directory to the lower
// filesystem's own position, it keeps no copy of the listing. (A default
// mount's kernel serves an open directory that it listed in full from
// its cached listing until rewinddir, removed names included: the FUSE
// readdir cache checks for changes only at offset 0. POSIX leaves open
// whether a name removed after opendir or rewinddir is still returned.)
func TestSeekdirLikeNative(t *testing.T) {
	check := func(t *testing.T, dir string, removal bool) {
		fillStreamDir(t, dir)
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		must(t, err)
		defer unix.Close(fd)
		all := readPos(t, fd, 2048, -1)
		if len(all) != streamFiles+2 {
			t.Fatalf("listing: %d entries, want %d", len(all), streamFiles+2)
		}
		for _, k := range []int{0, 1, 40, streamFiles / 3, streamFiles / 2, streamFiles} {
			if _, err := unix.Seek(fd, all[k].off, 0); err != nil {
				t.Fatalf("seek to the position after entry %d: %v", k, err)
			}
			if got, want := posNames(readPos(t, fd, 2048, -1)), posNames(all[k+1:]); !slices.Equal(got, want) {
				t.Errorf("after a seek to the position after entry %d: %d entries (first %q), want %d (first %q)",
					k, len(got), first(got), len(want), first(want))
			}
		}
		if !removal {
			return
		}
		k := streamFiles / 2
		var gone string
		for _, e := range all[k+5:] {
			if e.name != "." && e.name != ".." {
				gone = e.name
				break
			}
		}
		must(t, syscall.Unlink(filepath.Join(dir, gone)))
		if _, err := unix.Seek(fd, all[k].off, 0); err != nil {
			t.Fatal(err)
		}
		got := posNames(readPos(t, fd, 2048, -1))
		if slices.Contains(got, gone) {
			t.Errorf("a seek to a position before %s, removed since the listing: the listing has it still", gone)
		}
		var want []string
		for _, e := range all[k+1:] {
			if e.name != gone {
				want = append(want, e.name)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("after a removal and a seek: %d entries, want %d", len(got), len(want))
		}
	}
	t.Run("native", func(t *testing.T) {
		// The reference: the lower filesystem of the mounts below.
		check(t, t.TempDir(), true)
	})
	for _, v := range diffVariants {
		for _, shared := range []bool{false, true} {
			name := v.name
			if shared {
				name += "/shared-storage"
			}
			t.Run(name, func(t *testing.T) {
				tm := newVolume(t, v)
				tm.mount(t, func(o *Options) { o.SharedStorage = shared })
				dir := filepath.Join(tm.mnt, "d")
				must(t, os.Mkdir(dir, 0o755))
				check(t, dir, shared)
			})
		}
	}
}

func first(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return s[0]
}
