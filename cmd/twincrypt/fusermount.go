package main

// What fusermount3 says when a mount fails. A user who may not mount FUSE
// directly (not root) mounts through go-fuse, which runs fusermount3 with
// our stderr and reports only its raw wait status: "fusermount exited with
// code 256". The reason ("fusermount3: option allow_other only allowed if
// 'user_allow_other' is set in /etc/fuse.conf", "fusermount3: failed to
// open /dev/fuse: Permission denied") went to the terminal in the
// foreground and to the log or /dev/null in the background. withFusermount
// catches it so that the error says it, the same way in both.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxCaptured bounds what is kept of stderr while mounting (debug output
// can be long); the rest is passed on.
const maxCaptured = 64 << 10

// goFuseStatus matches go-fuse's report of a failed fusermount, whose
// number is a raw wait status (exit code << 8), not an exit code.
var goFuseStatus = regexp.MustCompile(`fusermount exited with code (\d+)`)

// fusermountError is a failed fusermount3: its own message (may be empty)
// and how it ended. It unwraps to go-fuse's error.
type fusermountError struct {
	msg    string
	status syscall.WaitStatus
	err    error
}

func (e *fusermountError) Error() string {
	how := fmt.Sprintf("fusermount exited with status %d", e.status.ExitStatus())
	if e.status.Signaled() {
		how = fmt.Sprintf("fusermount killed by %v", e.status.Signal())
	}
	if e.msg == "" {
		return how
	}
	return e.msg + " (" + how + ")"
}

func (e *fusermountError) Unwrap() error { return e.err }

// withFusermount runs mount with stderr (fd 2, which fusermount3
// inherits) caught in a pipe. On success everything caught is passed on to
// the real stderr; on a failed fusermount the error carries fusermount's
// lines and real exit status, and only the other lines are passed on.
func withFusermount(mount func() error) error {
	caught, err := catchStderr(mount)
	var fe *fusermountError
	if err != nil {
		if m := goFuseStatus.FindStringSubmatch(err.Error()); m != nil {
			raw, _ := strconv.Atoi(m[1])
			fe = &fusermountError{status: syscall.WaitStatus(raw), err: err}
		}
	}
	var keep, rest []string
	for _, line := range strings.SplitAfter(string(caught), "\n") {
		// fusermount3 names itself by its argv[0], which go-fuse sets to
		// the full path: "/usr/bin/fusermount3: ...".
		prog, msg, ok := strings.Cut(line, ": ")
		if fe != nil && ok && strings.HasPrefix(filepath.Base(prog), "fusermount") {
			keep = append(keep, filepath.Base(prog)+": "+strings.TrimSpace(msg))
		} else if line != "" {
			rest = append(rest, line)
		}
	}
	os.Stderr.WriteString(strings.Join(rest, ""))
	if fe == nil {
		return err
	}
	fe.msg = strings.Join(keep, "; ")
	return fe
}

// catchStderr runs fn with fd 2 pointing into a pipe and returns what was
// written there (at most maxCaptured bytes; more goes to the real
// stderr). If fd 2 cannot be redirected, fn runs as it is.
func catchStderr(fn func() error) ([]byte, error) {
	saved, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		return nil, fn()
	}
	defer unix.Close(saved)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		return nil, fn()
	}
	// The read end is non-blocking so that it can take a deadline; the
	// write end, which becomes fd 2, stays blocking like a terminal.
	if err := unix.SetNonblock(p[0], true); err != nil {
		unix.Close(p[0])
		unix.Close(p[1])
		return nil, fn()
	}
	r := os.NewFile(uintptr(p[0]), "stderr while mounting")
	defer r.Close()
	if err := unix.Dup3(p[1], 2, 0); err != nil {
		unix.Close(p[1])
		return nil, fn()
	}
	unix.Close(p[1])
	var buf bytes.Buffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(&overflowWriter{buf: &buf, max: maxCaptured, rest: fdWriter(saved)}, r)
	}()
	err = fn()
	restoreErr := unix.Dup3(saved, 2, 0) // also drops our copy of the write end
	// fusermount3 has exited (go-fuse waits for it), so EOF comes at once
	// unless something else started meanwhile still holds the pipe; do not
	// wait for that one.
	r.SetReadDeadline(time.Now().Add(2 * time.Second))
	<-done
	if restoreErr != nil {
		return buf.Bytes(), errors.Join(err, fmt.Errorf("restore stderr: %w", restoreErr))
	}
	return buf.Bytes(), err
}

// fdWriter writes to a descriptor that it does not own (an *os.File
// would close it when collected).
type fdWriter int

func (fd fdWriter) Write(p []byte) (int, error) {
	n, err := unix.Write(int(fd), p)
	if n < 0 {
		n = 0
	}
	return n, err
}

// overflowWriter keeps up to max bytes in buf and passes the rest on.
type overflowWriter struct {
	buf  *bytes.Buffer
	max  int
	rest io.Writer
}

func (w *overflowWriter) Write(p []byte) (int, error) {
	if room := w.max - w.buf.Len(); room > 0 {
		n := min(room, len(p))
		w.buf.Write(p[:n])
		p = p[n:]
		if len(p) == 0 {
			return n, nil
		}
		m, err := w.rest.Write(p)
		return n + m, err
	}
	return w.rest.Write(p)
}
