// Package control serves a mount's live statistics on a Unix socket and
// queries them: `twincrypt stats MNT` is the client.
//
// The socket of the mount at MNT lives at SocketPath(MNT):
// $XDG_RUNTIME_DIR/twincrypt/ (or /run/twincrypt as root, or
// $TMPDIR/twincrypt-UID when neither exists), named after a hash of
// the mount point's absolute path. The directory is 0700 and the socket
// 0600, and the server also checks the peer's credentials (SO_PEERCRED):
// only the daemon's own user and root get an answer.
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
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// ErrNoDaemon means nothing answers on the mount's socket.
var ErrNoDaemon = errors.New("no twincrypt daemon answers for this mount point")

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
	path string
	snap func() measure.Snapshot
	wg   sync.WaitGroup
}

// Listen creates the socket for mnt; snap is called for every request.
func Listen(mnt string, snap func() measure.Snapshot) (*Server, error) {
	path := SocketPath(mnt)
	if err := os.MkdirAll(filepath.Dir(path), 0700); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	if err := os.Chmod(filepath.Dir(path), 0700); err != nil {
		return nil, fmt.Errorf("control socket directory: %w", err)
	}
	// A socket left by a daemon that was killed: remove it if dead.
	if c, err := net.DialTimeout("unix", path, 200*time.Millisecond); err == nil {
		c.Close()
		return nil, fmt.Errorf("control socket %s: another daemon serves this mount point", path)
	}
	os.Remove(path)
	old := unix.Umask(0177)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	unix.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	if err := os.Chmod(path, 0600); err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{ln: ln, path: path, snap: snap}
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
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	var cred *unix.Ucred
	var cerr error
	raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil {
		return false
	}
	return cred.Uid == 0 || int(cred.Uid) == os.Geteuid()
}

// Close removes the socket and waits for the accept loop to end.
func (s *Server) Close() error {
	err := s.ln.Close()
	os.Remove(s.path)
	s.wg.Wait()
	return err
}

// Query asks the daemon of the mount at mnt for its statistics.
func Query(mnt string) (measure.Snapshot, error) {
	var snap measure.Snapshot
	path := SocketPath(mnt)
	c, err := net.DialTimeout("unix", path, 2*time.Second)
	if err != nil {
		return snap, fmt.Errorf("%w (%s: %v)", ErrNoDaemon, path, err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("stats\n")); err != nil {
		return snap, err
	}
	if err := json.NewDecoder(c).Decode(&snap); err != nil {
		return snap, fmt.Errorf("stats from %s: %w (refused: the daemon runs as another user?)", path, err)
	}
	return snap, nil
}
