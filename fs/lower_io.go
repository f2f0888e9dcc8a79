package fs

import "syscall"

// Whole reads and writes of a lower file at an offset, for both
// transforms and the timed calls of acct: pread(2) and pwrite(2) may
// return short counts and EINTR, which every caller would otherwise loop
// over itself.

// preadFull reads until dst is full or the file ends.
func preadFull(fd int, dst []byte, off int64) (int, error) {
	done := 0
	for done < len(dst) {
		n, err := syscall.Pread(fd, dst[done:], off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			break
		}
		done += n
	}
	return done, nil
}

// pwriteFull writes all of src or fails.
func pwriteFull(fd int, src []byte, off int64) (int, error) {
	done := 0
	for done < len(src) {
		n, err := syscall.Pwrite(fd, src[done:], off+int64(done))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		done += n
	}
	return done, nil
}
