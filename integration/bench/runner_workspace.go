package bench

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Workspace is the directory all targets keep their lower data in, so
// that they all stand on the same filesystem: by default a tmpfs mounted
// for the bench (as root; memory is the one "disk" every machine has and
// it is the same for everyone), or a directory under --on on a real disk.
type Workspace struct {
	// Dir is the workspace (the tmpfs mount point, or a fresh directory
	// under --on).
	Dir string
	// Desc says what filesystem Dir is on ("tmpfs (dedicated, 16.0 GiB)",
	// "ext4 on /dev/nvme0n1p2 (/srv)").
	Desc  string
	tmpfs bool
}

// NewWorkspace makes the workspace. With on == "", as root it mounts a
// tmpfs of three quarters of the available memory on a new directory in
// $TMPDIR; without root it uses that directory as it is. With on, it
// makes a fresh directory under on.
func NewWorkspace(on string) (*Workspace, error) {
	parent := on
	if on != "" {
		real, err := realPath(on)
		if err != nil {
			return nil, fmt.Errorf("--on %s: %w", on, err)
		}
		parent = real
	}
	dir, err := os.MkdirTemp(parent, "twincrypt-bench-")
	if err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	if dir, err = realPath(dir); err != nil {
		return nil, fmt.Errorf("workspace: %w", err)
	}
	w := &Workspace{Dir: dir}
	if on == "" && os.Geteuid() == 0 {
		size := memAvailable() / 4 * 3
		if size < 1<<30 {
			size = 1 << 30
		}
		opts := fmt.Sprintf("size=%d,mode=0755", size)
		if err := unix.Mount("twincrypt-bench", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err == nil {
			w.tmpfs = true
			w.Desc = fmt.Sprintf("tmpfs (dedicated, %.1f GiB)", float64(size)/(1<<30))
			return w, nil
		}
	}
	w.Desc = describeFS(dir)
	return w, nil
}

// Close removes the workspace: whatever is still mounted below it is
// detached first (so that removal cannot reach through a mount), then the
// tmpfs is unmounted or the directory removed.
func (w *Workspace) Close() error {
	var errs []error
	for _, m := range mountsUnder(w.Dir) {
		if m == w.Dir {
			continue
		}
		errs = append(errs, fmt.Errorf("%s was still mounted; detached", m))
		_ = unix.Unmount(m, unix.MNT_DETACH)
	}
	if w.tmpfs {
		if err := unmount(w.Dir); err != nil {
			errs = append(errs, err)
		}
		if err := os.Remove(w.Dir); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	if err := os.RemoveAll(w.Dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		m := unescapeMount(f[4])
		if m == dir || strings.HasPrefix(m, dir+"/") {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool { return len(out[i]) > len(out[j]) })
	return out
}

// describeFS names the filesystem dir is on, from the mount table:
// "ext4 on /dev/vda (/)".
func describeFS(dir string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return dir
	}
	defer f.Close()
	best, desc := "", dir
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// mountinfo: ID parent major:minor root mountpoint opts... - fstype source superopts
		sep := -1
		for i, x := range fields {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || sep+2 >= len(fields) {
			continue
		}
		m := unescapeMount(fields[4])
		if (dir == m || strings.HasPrefix(dir, strings.TrimSuffix(m, "/")+"/")) && len(m) >= len(best) {
			best = m
			desc = fmt.Sprintf("%s on %s (%s)", fields[sep+1], fields[sep+2], m)
		}
	}
	return desc
}

// memAvailable is MemAvailable from /proc/meminfo in bytes (0 if unknown).
func memAvailable() int64 {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "MemAvailable:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
