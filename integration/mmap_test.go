package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// The mmap side of testMmap runs in a child process (this test binary,
// re-executed): a page fault on the mount cannot be served by the process
// that takes it, because the Go runtime may be stopping the world while
// the faulting thread sits in the kernel waiting for the FUSE server that
// lives in the same process.
const (
	mmapHelperEnv = "TWINCRYPT_MMAP_HELPER" // "write" or "read"
	mmapFileEnv   = "TWINCRYPT_MMAP_FILE"   // the file on the mount
	mmapWantEnv   = "TWINCRYPT_MMAP_WANT"   // the expected content, outside the mount
)

func TestMain(m *testing.M) {
	if op := os.Getenv(mmapHelperEnv); op != "" {
		if err := mmapHelper(op, os.Getenv(mmapFileEnv), os.Getenv(mmapWantEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "mmap helper:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// mmapHelper makes the file at path hold want ("write": through a writable
// MAP_SHARED mapping, changing only the pages that differ, then msync) or
// checks that it does ("read": through a read-only MAP_SHARED mapping).
func mmapHelper(op, path, wantPath string) error {
	want, err := os.ReadFile(wantPath)
	if err != nil {
		return err
	}
	flag, prot := os.O_RDONLY, unix.PROT_READ
	if op == "write" {
		flag, prot = os.O_RDWR|os.O_CREATE, unix.PROT_READ|unix.PROT_WRITE
	} else if op != "read" {
		return fmt.Errorf("unknown op %q", op)
	}
	f, err := os.OpenFile(path, flag, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Size() != int64(len(want)) {
		if op == "read" {
			return fmt.Errorf("%s is %d bytes, want %d", path, st.Size(), len(want))
		}
		if err := f.Truncate(int64(len(want))); err != nil {
			return err
		}
	}
	m, err := unix.Mmap(int(f.Fd()), 0, len(want), prot, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("mmap: %w", err)
	}
	if op == "read" {
		defer unix.Munmap(m)
		if !bytes.Equal(m, want) {
			i := 0
			for i < len(m) && m[i] == want[i] {
				i++
			}
			return fmt.Errorf("%s read through mmap differs from the expected content at byte %d of %d", path, i, len(want))
		}
		return nil
	}
	// Touch the pages in a scattered order (stride 7, coprime with most
	// page counts), writing only those that differ.
	const page = 4096
	pages := (len(want) + page - 1) / page
	for k := 0; k < pages; k++ {
		p := (k * 7) % pages
		if pages%7 == 0 {
			p = k
		}
		a, b := p*page, min((p+1)*page, len(want))
		if !bytes.Equal(m[a:b], want[a:b]) {
			copy(m[a:b], want[a:b])
		}
	}
	if err := unix.Msync(m, unix.MS_SYNC); err != nil {
		return fmt.Errorf("msync: %w", err)
	}
	if err := unix.Munmap(m); err != nil {
		return fmt.Errorf("munmap: %w", err)
	}
	return f.Close()
}

// runMmapHelper runs the helper on path with want as expected content.
func runMmapHelper(t *testing.T, op, path string, want []byte) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wantPath := filepath.Join(t.TempDir(), "want")
	if err := os.WriteFile(wantPath, want, 0o644); err != nil {
		t.Fatal(err)
	}
	runIn(t, t.TempDir(), []string{mmapHelperEnv + "=" + op, mmapFileEnv + "=" + path, mmapWantEnv + "=" + wantPath}, exe)
}

// readBack reads path with read(2) and compares it with want.
func readBack(t *testing.T, what, path string, want []byte) {
	t.Helper()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		t.Errorf("%s: read(2) gives %d bytes differing from the expected %d at byte %d", what, len(got), len(want), i)
	}
}

// testMmap writes through MAP_SHARED mappings and reads back with read(2),
// and the reverse, on the same mount and after a remount (which rules out
// answers from the page cache).
func testMmap(t *testing.T, vol *Volume) {
	work := mustMkdir(t, filepath.Join(vol.Mnt, "mmap"))
	shared := filepath.Join(work, "shared.bin")
	// 3 MiB and a partial extent: spans many extents and a tail unit.
	want := randBytes(1, 3<<20+1234)
	runMmapHelper(t, "write", shared, want)
	readBack(t, "mmap write, read(2)", shared, want)

	// Patch a few unaligned ranges of the existing file through a new
	// mapping: read-modify-write of partial extents and of the tail.
	want2 := bytes.Clone(want)
	for _, r := range [][2]int{{0, 1}, {4090, 4100}, {100*4096 + 17, 100*4096 + 317}, {len(want) - 5, len(want)}} {
		for i := r[0]; i < r[1]; i++ {
			want2[i] ^= 0xa5
		}
	}
	runMmapHelper(t, "write", shared, want2)
	readBack(t, "mmap patch, read(2)", shared, want2)

	// The reverse: pwrite in odd-sized chunks, last chunk first, then
	// read through a mapping.
	pw := filepath.Join(work, "pwrite.bin")
	want3 := randBytes(3, 2<<20+777)
	f, err := os.OpenFile(pw, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	const chunk = 5000
	for off := (len(want3) - 1) / chunk * chunk; off >= 0; off -= chunk {
		if _, err := unix.Pwrite(int(f.Fd()), want3[off:min(off+chunk, len(want3))], int64(off)); err != nil {
			t.Fatalf("pwrite at %d: %v", off, err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	runMmapHelper(t, "read", pw, want3)

	checkNamesHidden(t, vol, "mmap", "shared.bin", "pwrite.bin")

	vol.Remount(t)
	readBack(t, "after remount, read(2) of the mmap-written file", shared, want2)
	runMmapHelper(t, "read", shared, want2)
	runMmapHelper(t, "read", pw, want3)
}
