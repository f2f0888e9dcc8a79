package fs

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkLowerOpen is the daemon's part of an OPEN on the lower
// filesystem, in one run: "plain" is what it did before (openat2 beneath
// the root, the fstat of newFile, the close at RELEASE), "checked" what it
// does now (an O_PATH openat2, reopenRegular: its fstat, the reopen
// through /proc, the fcntl that clears O_NONBLOCK; the O_PATH descriptor's
// close, then the same fstat and close).
func BenchmarkLowerOpen(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("small"), 0644); err != nil {
		b.Fatal(err)
	}
	rootFd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(rootFd)
	const flags = syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC
	var st syscall.Stat_t
	b.Run("plain", func(b *testing.B) {
		for range b.N {
			fd, err := openBeneath(rootFd, "f", flags, 0)
			if err != nil {
				b.Fatal(err)
			}
			syscall.Fstat(fd, &st)
			unix.Close(fd)
		}
	})
	b.Run("nonblock", func(b *testing.B) {
		// The cheaper way not taken (openFile says why): an open with
		// O_NONBLOCK, the type from newFile's fstat, O_NONBLOCK cleared.
		for range b.N {
			fd, err := openBeneath(rootFd, "f", flags|syscall.O_NONBLOCK, 0)
			if err != nil {
				b.Fatal(err)
			}
			syscall.Fstat(fd, &st)
			unix.FcntlInt(uintptr(fd), unix.F_SETFL, 0)
			unix.Close(fd)
		}
	})
	b.Run("checked", func(b *testing.B) {
		r, s := &root{}, &side{lower: dir}
		for range b.N {
			pfd, err := openBeneath(rootFd, "f", unix.O_PATH|syscall.O_NOFOLLOW, 0)
			if err != nil {
				b.Fatal(err)
			}
			fd, errno := r.reopenRegular(untimed, s, nil, "f", pfd, flags, false)
			unix.Close(pfd)
			if errno != 0 {
				b.Fatal(errno)
			}
			syscall.Fstat(fd, &st)
			unix.Close(fd)
		}
	})
	b.Run("checked-proc-path", func(b *testing.B) {
		// The reopen by the whole /proc/self/fd/N path, which lowerfd.Reopen
		// avoids by keeping /proc/self/fd open.
		for range b.N {
			pfd, err := openBeneath(rootFd, "f", unix.O_PATH|syscall.O_NOFOLLOW, 0)
			if err != nil {
				b.Fatal(err)
			}
			syscall.Fstat(pfd, &st)
			fd, err := unix.Open(procFd(pfd), flags&^syscall.O_NOFOLLOW, 0)
			unix.Close(pfd)
			if err != nil {
				b.Fatal(err)
			}
			syscall.Fstat(fd, &st)
			unix.Close(fd)
		}
	})
}

// BenchmarkReadSmallFile is the read of a metadata file (a directory IV,
// read once per directory and remembered; a long name's sidecar, read at
// each listing of the name), in one run: "nonblock" is what it did before
// (an openat2 with O_NONBLOCK, an fstat for the type, the pread, the
// close), "checked" what readSmallFile does now (an O_PATH openat2, its
// fstat, the reopen through /proc, two closes, the pread).
func BenchmarkReadSmallFile(b *testing.B) {
	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), make([]byte, 16), 0644); err != nil {
		b.Fatal(err)
	}
	rootFd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Close(rootFd)
	buf := make([]byte, 17)
	var st syscall.Stat_t
	b.Run("nonblock", func(b *testing.B) {
		for range b.N {
			fd, err := openBeneath(rootFd, "f", syscall.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
			if err != nil {
				b.Fatal(err)
			}
			if syscall.Fstat(fd, &st); st.Mode&syscall.S_IFMT != syscall.S_IFREG {
				b.Fatal("not regular")
			}
			if n, err := preadFull(fd, buf, 0); err != nil || n != 16 {
				b.Fatal(n, err)
			}
			unix.Close(fd)
		}
	})
	b.Run("checked", func(b *testing.B) {
		for range b.N {
			if got, err := readSmallFile(rootFd, "f", 17); err != nil || len(got) != 16 {
				b.Fatal(len(got), err)
			}
		}
	})
}
