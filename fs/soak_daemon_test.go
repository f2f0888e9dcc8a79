package fs

// The soak's mounts are served by child processes (the test binary running
// TestSoakDaemonHelper), one per mount, so that the daemons' memory and
// goroutines are measured apart from the test's own (its generators, op
// histories and content comparisons), as a user's `twincrypt mount` would
// be.

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
)

const soakDaemonEnv = "TWINCRYPT_SOAK_DAEMON"

// soakDaemon is a child process serving one mount.
type soakDaemon struct {
	name string
	mnt  string
	cmd  *exec.Cmd
	mu   sync.Mutex
	in   io.WriteCloser
	out  *bufio.Reader
	dead bool
}

// daemonStats is one reading of a daemon.
type daemonStats struct {
	rss, heap, objects        int64
	goroutines                int
	nodes, dirIVs, lowerNames int
	files, dirHandles         int
}

func (s *daemonStats) add(o daemonStats) {
	s.rss += o.rss
	s.heap += o.heap
	s.objects += o.objects
	s.goroutines += o.goroutines
	s.nodes += o.nodes
	s.dirIVs += o.dirIVs
	s.lowerNames += o.lowerNames
	s.files += o.files
	s.dirHandles += o.dirHandles
}

// mountSoakDaemon makes a fresh volume of kind v and has a child process
// mount and serve it until the test ends.
func mountSoakDaemon(t testing.TB, v variant) (*testMount, *soakDaemon) {
	t.Helper()
	requireFUSE(t)
	tm := newVolume(t, v)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSoakDaemonHelper$")
	cmd.Env = append(os.Environ(), soakDaemonEnv+"="+tm.lower+"\t"+tm.mnt+"\t"+hex.EncodeToString(tm.master))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	must(t, err)
	out, err := cmd.StdoutPipe()
	must(t, err)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start the soak daemon: %v", err)
	}
	d := &soakDaemon{name: v.name, mnt: tm.mnt, cmd: cmd, in: in, out: bufio.NewReader(out)}
	// The mount is the child's: tm's own cleanup has nothing to unmount.
	tm.unmounted = true
	t.Cleanup(d.stop)
	if line := d.read(); line != "READY" {
		t.Fatalf("soak daemon for %s: %s", v.name, line)
	}
	return tm, d
}

// read returns the next answer line of the daemon (its other output, the
// test framework's, is skipped).
func (d *soakDaemon) read() string {
	for {
		line, err := d.out.ReadString('\n')
		if err != nil {
			d.dead = true
			return "soak daemon: " + err.Error()
		}
		if res, ok := strings.CutPrefix(line, "SOAKD "); ok {
			return strings.TrimSpace(res)
		}
	}
}

// request sends one command line and returns the answer.
func (d *soakDaemon) request(cmd string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.dead {
		return "soak daemon: gone"
	}
	if _, err := fmt.Fprintf(d.in, "%s\n", cmd); err != nil {
		d.dead = true
		return "soak daemon: " + err.Error()
	}
	return d.read()
}

func (d *soakDaemon) stats() (daemonStats, error) {
	var s daemonStats
	line := d.request("stats")
	_, err := fmt.Sscanf(line, "rss %d heap %d objects %d goroutines %d nodes %d dirivs %d lowernames %d files %d dirs %d",
		&s.rss, &s.heap, &s.objects, &s.goroutines, &s.nodes, &s.dirIVs, &s.lowerNames, &s.files, &s.dirHandles)
	if err != nil {
		return s, fmt.Errorf("%s: %q: %v", d.name, line, err)
	}
	return s, nil
}

// profile has the daemon write its heap (after a GC) and goroutine
// profiles into dir, named with its name and tag.
func (d *soakDaemon) profile(dir, tag string) string {
	return d.request("profile\t" + filepath.Join(dir, d.name) + "\t" + tag)
}

// abort kills the daemon with SIGQUIT, which prints its goroutines on
// stderr; its mount's requests then fail (ENOTCONN) instead of hanging.
func (d *soakDaemon) abort() {
	d.cmd.Process.Signal(syscall.SIGQUIT)
}

// stop has the daemon unmount and waits for it; a daemon that does not
// end in a minute is killed and its mount detached.
func (d *soakDaemon) stop() {
	d.mu.Lock()
	d.in.Close()
	d.mu.Unlock()
	done := make(chan struct{})
	go func() {
		d.cmd.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		d.cmd.Process.Kill()
		<-done
	}
	// Dead before it could unmount (aborted): detach what is left.
	unix.Unmount(d.mnt, unix.MNT_DETACH)
}

// TestSoakDaemonHelper is not a test: TestSoak runs the test binary as a
// child with TWINCRYPT_SOAK_DAEMON=LOWER\tMNT\tMASTERKEY(hex), and it
// serves that mount, answering a line "stats" with its memory, goroutines
// and node census, and "profile\tPREFIX\tTAG" by writing profiles, until
// its input ends; then it unmounts and exits.
func TestSoakDaemonHelper(t *testing.T) {
	spec := os.Getenv(soakDaemonEnv)
	if spec == "" {
		t.Skip("helper process for TestSoak: serves one mount")
	}
	f := strings.Split(spec, "\t")
	if len(f) != 3 {
		fmt.Println("SOAKD bad spec")
		os.Exit(1)
	}
	o := Options{Lower: f[0], Log: zerolog.New(os.Stderr).Level(zerolog.WarnLevel)}
	if f[2] != "" {
		cfg, err := config.Load(f[0])
		if err != nil {
			fmt.Println("SOAKD config:", err)
			os.Exit(1)
		}
		master, _ := hex.DecodeString(f[2])
		o.Config, o.MasterKey = cfg, master
	}
	r, err := newRoot(o)
	if err != nil {
		fmt.Println("SOAKD mount:", err)
		os.Exit(1)
	}
	srv, err := r.serve(f[1], o, nil)
	if err != nil {
		fmt.Println("SOAKD mount:", err)
		os.Exit(1)
	}
	fmt.Println("SOAKD READY")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		cmd := strings.Split(sc.Text(), "\t")
		switch cmd[0] {
		case "stats":
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			c := r.census()
			fmt.Printf("SOAKD rss %d heap %d objects %d goroutines %d nodes %d dirivs %d lowernames %d files %d dirs %d\n",
				vmRSS(), ms.HeapInuse, ms.HeapObjects, runtime.NumGoroutine(), c.nodes, c.dirIVs, c.lowerNames, c.files, c.dirHandles)
		case "profile":
			fmt.Println("SOAKD", writeProfiles(cmd[1], cmd[2]))
		default:
			fmt.Println("SOAKD unknown command", cmd[0])
		}
	}
	for i := 0; i < 100; i++ {
		if err = srv.Unmount(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak daemon: unmount %s: %v\n", f[1], err)
		os.Exit(1)
	}
	os.Exit(0)
}
