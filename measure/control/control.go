// Package control serves a mount's live statistics on a Unix socket and
// queries them: `twincrypt stats MNT` is the client.
//
// The socket of the mount at MNT lives at SocketPath(MNT):
// $XDG_RUNTIME_DIR/twincrypt/ (or /run/twincrypt as root, or
// $TMPDIR/twincrypt-UID when neither exists), named after a hash of
// the mount point's absolute path. The directory must be the daemon
// user's own, mode 0700, and not a symlink (checked without following it;
// anything else is refused and live stats are off), the socket is 0600,
// and the server also checks the peer's credentials (SO_PEERCRED): only
// the daemon's own user and root get an answer. The client checks the
// server the same way: an answer counts only from a server that runs as
// the client's own user or as root (ErrForeignServer), so that another
// user who got a socket in its place (a directory open to others) cannot
// feed it made-up numbers or text.
//
// The protocol is one request line ("stats\n") and one JSON answer.
package control

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
	"github.com/twincrypt/twincrypt/measure/printable"
)

var (
	// ErrNoDaemon means nothing answers on the mount's socket.
	ErrNoDaemon = errors.New("no twincrypt daemon answers for this mount point")
	// ErrPermission means a socket is there but this user may not use it:
	// the daemon runs as another user.
	ErrPermission = errors.New("permission denied (the daemon runs as another user; only that user and root may read its stats)")
	// ErrUnsafeDir means the socket directory is not one this user made
	// for itself (a symlink, another user's, or open to others): it is
	// refused and live stats are off.
	ErrUnsafeDir = errors.New("refusing it; live stats off")
	// ErrForeignServer means the process serving the socket runs as
	// neither this user nor root: not a daemon of ours, its answer is
	// not read.
	ErrForeignServer = errors.New("the socket is served by another user's process, not by a daemon of yours or root's; refusing its answer")
)

// maxAnswer bounds the answer read from a socket (a snapshot is a few KiB).
const maxAnswer = 16 << 20

// errRefused is the server's answer to a peer of another user.
const errRefused = "permission denied"

// Dir returns the directory that holds the sockets of this user.
func Dir() string {
	if os.Geteuid() == 0 {
		return "/run/twincrypt"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "twincrypt")
	}
	return filepath.Join(os.TempDir(), "twincrypt-"+strconv.Itoa(os.Geteuid()))
}

// SocketPath returns the socket of the mount at mnt (any form of the path).
func SocketPath(mnt string) string {
	abs, err := filepath.Abs(mnt)
	if err == nil {
		mnt = abs
	}
	sum := sha256.Sum256([]byte(mnt))
	return filepath.Join(Dir(), hex.EncodeToString(sum[:8])+".sock")
}

// Server answers stats requests for one mount.
type Server struct {
	ln   *net.UnixListener
	dir  *os.File // the checked socket directory, held open
	name string   // the socket's name in dir
	path string
	snap func() measure.Snapshot
	wg   sync.WaitGroup
}

// openDir opens the socket directory dir, creating it (0700) if it does
// not exist, and checks it without following symlinks: a directory of our
// own (euid), with no group or other permission bits. With
// XDG_RUNTIME_DIR unset the directory is in /tmp, where another user may
// have planted a symlink or a directory of their own under its name; both
// are refused, and nothing we did not create is ever chmod-ed.
func openDir(dir string, create bool) (*os.File, error) {
	created := false
	if create {
		if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
			return nil, fmt.Errorf("stats socket directory: %w", err)
		}
		err := unix.Mkdir(dir, 0o700)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, fmt.Errorf("stats socket directory %s: %w", dir, err)
		}
		created = err == nil
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		var st unix.Stat_t
		if lerr := unix.Lstat(dir, &st); lerr == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
			return nil, fmt.Errorf("stats socket directory %s is a symlink (owned by uid %d): %w", dir, st.Uid, ErrUnsafeDir)
		} else if lerr == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return nil, fmt.Errorf("stats socket directory %s is not a directory: %w", dir, ErrUnsafeDir)
		}
		return nil, fmt.Errorf("stats socket directory %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, fmt.Errorf("stats socket directory %s: %w", dir, err)
	}
	if int(st.Uid) != os.Geteuid() {
		f.Close()
		return nil, fmt.Errorf("stats socket directory %s is owned by uid %d, not %d: %w", dir, st.Uid, os.Geteuid(), ErrUnsafeDir)
	}
	if perm := st.Mode & 0o7777; perm != 0o700 {
		// Only a directory we have just made (under a strange umask) is
		// ours to fix.
		if !created || unix.Fchmod(fd, 0o700) != nil {
			f.Close()
			return nil, fmt.Errorf("stats socket directory %s has mode %04o, want 0700: %w", dir, perm, ErrUnsafeDir)
		}
	}
	return f, nil
}

// inDir is a path that names name inside the open directory dir through
// /proc/self/fd, so that bind and connect reach the checked directory even
// if its path were swapped afterwards. Without /proc it is the plain path.
func inDir(dir *os.File, name string) string {
	p := "/proc/self/fd/" + strconv.Itoa(int(dir.Fd())) + "/" + name
	if _, err := os.Stat(filepath.Dir(p)); err != nil {
		return filepath.Join(dir.Name(), name)
	}
	return p
}

// Listen creates the socket for mnt; snap is called for every request.
// It refuses (with ErrUnsafeDir) a socket directory that is not ours.
func Listen(mnt string, snap func() measure.Snapshot) (*Server, error) {
	path := SocketPath(mnt)
	dir, err := openDir(filepath.Dir(path), true)
	if err != nil {
		return nil, err
	}
	name := filepath.Base(path)
	bindPath := inDir(dir, name)
	// A socket left by a daemon that was killed: remove it if dead.
	if c, err := net.DialTimeout("unix", bindPath, 200*time.Millisecond); err == nil {
		c.Close()
		dir.Close()
		return nil, fmt.Errorf("control socket %s: another daemon serves this mount point", path)
	}
	unix.Unlinkat(int(dir.Fd()), name, 0)
	old := unix.Umask(0177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: bindPath, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		dir.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// Close unlinks through the directory descriptor, not by path.
	ln.SetUnlinkOnClose(false)
	if err := unix.Fchmodat(int(dir.Fd()), name, 0o600, 0); err != nil {
		ln.Close()
		unix.Unlinkat(int(dir.Fd()), name, 0)
		dir.Close()
		return nil, fmt.Errorf("control socket: %w", err)
	}
	s := &Server{ln: ln, dir: dir, name: name, path: path, snap: snap}
	s.wg.Add(1)
	go s.serve()
	return s, nil
}

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

func (s *Server) serve() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			return
		}
		go s.answer(c)
	}
}

func (s *Server) answer(c *net.UnixConn) {
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if !peerAllowed(c) {
		fmt.Fprintf(c, "{\"error\":%q}\n", errRefused)
		return
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "stats\n" {
		fmt.Fprintf(c, "{\"error\":%q}\n", "unknown request")
		return
	}
	json.NewEncoder(c).Encode(s.snap())
}

// peerAllowed admits the daemon's own user and root.
func peerAllowed(c *net.UnixConn) bool {
	uid, err := peerUid(c)
	return err == nil && (uid == 0 || int(uid) == os.Geteuid())
}

// peerUid is the uid of the process at the other end of c (SO_PEERCRED:
// its credentials when it called listen or connect).
func peerUid(c *net.UnixConn) (uint32, error) {
	cred, err := peerCred(c)
	if err != nil {
		return 0, err
	}
	return cred.Uid, nil
}

// peerCred is the process at the other end of c (SO_PEERCRED).
func peerCred(c *net.UnixConn) (*unix.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// ServerPID is the process ID of the daemon serving the mount at mnt,
// from its socket (SO_PEERCRED: the process that listens), with Query's
// check of the server's user. It sends no request (the server answers a
// connection closed without one with nothing anyone reads).
func ServerPID(mnt string) (int, error) {
	c, cred, err := dialServer(mnt, "")
	if err != nil {
		return 0, err
	}
	c.Close()
	return int(cred.Pid), nil
}

// dialServer connects to the socket of the mount at mnt and checks that
// the server runs as this user or as root (ErrForeignServer); what
// prefixes the message of a failed credentials check.
func dialServer(mnt, what string) (net.Conn, *unix.Ucred, error) {
	path := SocketPath(mnt)
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return nil, nil, fmt.Errorf("%s: %w", path, ErrPermission)
		}
		return nil, nil, fmt.Errorf("%w (%s: %v)", ErrNoDaemon, path, err)
	}
	cred, err := peerCred(c.(*net.UnixConn))
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("%s%s: credentials of the server: %w", what, path, err)
	}
	if cred.Uid != 0 && int(cred.Uid) != os.Geteuid() {
		c.Close()
		return nil, nil, fmt.Errorf("%s (uid %d): %w", path, cred.Uid, ErrForeignServer)
	}
	return c, cred, nil
}

// Close removes the socket and waits for the accept loop to end.
func (s *Server) Close() error {
	err := s.ln.Close()
	unix.Unlinkat(int(s.dir.Fd()), s.name, 0)
	s.dir.Close()
	s.wg.Wait()
	return err
}

// Query asks the daemon of the mount at mnt for its statistics.
func Query(mnt string) (measure.Snapshot, error) {
	var snap measure.Snapshot
	path := SocketPath(mnt)
	c, _, err := dialServer(mnt, "stats from ")
	if err != nil {
		return snap, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("stats\n")); err != nil {
		return snap, err
	}
	var answer struct {
		measure.Snapshot
		Error string `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(c, maxAnswer)).Decode(&answer); err != nil {
		return snap, fmt.Errorf("stats from %s: %w", path, err)
	}
	if answer.Error == errRefused {
		return snap, fmt.Errorf("%s: %w", path, ErrPermission)
	}
	if answer.Error != "" {
		return snap, fmt.Errorf("stats from %s: %s", path, printable.String(answer.Error))
	}
	return answer.Snapshot, nil
}

// CheckDir reports whether this user's socket directory, if it exists
// already, would be refused by Listen. A daemon started in the background
// logs the refusal where nobody may look; its parent calls CheckDir to say
// it on the terminal.
func CheckDir() error {
	dir, err := openDir(Dir(), false)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return err
	}
	return dir.Close()
}

// RemoveStale removes the socket of the mount at mnt when no daemon
// answers on it any more (one killed with SIGKILL could not remove it). A
// socket directory that Listen would refuse is left alone.
func RemoveStale(mnt string) {
	path := SocketPath(mnt)
	dir, err := openDir(filepath.Dir(path), false)
	if err != nil {
		return
	}
	defer dir.Close()
	name := filepath.Base(path)
	c, err := net.DialTimeout("unix", inDir(dir, name), time.Second)
	if err == nil {
		c.Close()
		return
	}
	if errors.Is(err, unix.ECONNREFUSED) {
		unix.Unlinkat(int(dir.Fd()), name, 0)
	}
}
