package fs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestLockHelper is not a test: TestLocks runs the test binary as a second
// process with TWINCRYPT_LOCK_FILE set, and this tries a read lock there.
func TestLockHelper(t *testing.T) {
	p := os.Getenv("TWINCRYPT_LOCK_FILE")
	if p == "" {
		t.Skip("helper process for TestLocks")
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		os.Exit(3)
	}
	lk := syscall.Flock_t{Type: syscall.F_RDLCK}
	err = syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk)
	if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EACCES) {
		os.Exit(4)
	}
	if err != nil {
		os.Exit(5)
	}
	os.Exit(0)
}

// TestLocks checks lock semantics on a plain directory (the reference) and
// on every mount: POSIX record locks belong to the process (a second lock
// by the same process on another descriptor is granted) and conflict
// between processes; flock and OFD locks conflict between descriptors.
func TestLocks(t *testing.T) {
	dirs := map[string]string{"native": t.TempDir()}
	for _, v := range variants {
		dirs[v.name] = mountVariant(t, v).mnt
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(dir, "lockfile")
			f1, err := os.Create(p)
			must(t, err)
			defer f1.Close()
			f2, err := os.OpenFile(p, os.O_RDWR, 0)
			must(t, err)
			defer f2.Close()

			wr := syscall.Flock_t{Type: syscall.F_WRLCK}
			must(t, syscall.FcntlFlock(f1.Fd(), syscall.F_SETLK, &wr))
			rd := syscall.Flock_t{Type: syscall.F_RDLCK}
			if err := syscall.FcntlFlock(f2.Fd(), syscall.F_SETLK, &rd); err != nil {
				t.Errorf("same-process POSIX lock on a second descriptor: %v, want success", err)
			}
			// Restore the write lock (the read lock above converted it).
			must(t, syscall.FcntlFlock(f1.Fd(), syscall.F_SETLK, &wr))
			cmd := exec.Command(os.Args[0], "-test.run=^TestLockHelper$")
			cmd.Env = append(os.Environ(), "TWINCRYPT_LOCK_FILE="+p)
			err = cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 4 {
				t.Errorf("another process got a read lock under our write lock: %v", err)
			}
			un := syscall.Flock_t{Type: syscall.F_UNLCK}
			must(t, syscall.FcntlFlock(f1.Fd(), syscall.F_SETLK, &un))
			if err := exec.Command(os.Args[0], "-test.run=^TestLockHelper$").Run(); err != nil {
				// Without the env var the helper skips: exit 0.
				t.Fatalf("helper: %v", err)
			}
			cmd = exec.Command(os.Args[0], "-test.run=^TestLockHelper$")
			cmd.Env = append(os.Environ(), "TWINCRYPT_LOCK_FILE="+p)
			if err := cmd.Run(); err != nil {
				t.Errorf("read lock after unlock refused: %v", err)
			}

			must(t, syscall.Flock(int(f1.Fd()), syscall.LOCK_EX))
			if err := syscall.Flock(int(f2.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); !errors.Is(err, syscall.EWOULDBLOCK) {
				t.Errorf("flock on a second descriptor: %v, want EWOULDBLOCK", err)
			}
			must(t, syscall.Flock(int(f1.Fd()), syscall.LOCK_UN))

			ofd := unix.Flock_t{Type: unix.F_WRLCK}
			must(t, unix.FcntlFlock(f1.Fd(), unix.F_OFD_SETLK, &ofd))
			if err := unix.FcntlFlock(f2.Fd(), unix.F_OFD_SETLK, &ofd); !errors.Is(err, syscall.EAGAIN) {
				t.Errorf("OFD lock on a second descriptor: %v, want EAGAIN", err)
			}
		})
	}
}
