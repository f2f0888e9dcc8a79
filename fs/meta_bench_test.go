package fs

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// BenchmarkMetadata is the many-small-files path of the daemon, in this
// process so that the Go profilers see it: on a twin and an aes-xts mount
// over /dev/shm, a tree of TWINCRYPT_BENCH_FILES small files (default
// 5000, 20 per directory) made as tar x makes them (create, write,
// utimes, chown, chmod, close), listed as ls -lR does twice (readdir,
// lstat and two getxattrs per entry), and removed as rm -rf does. One
// metric per step and mount: ns per file. Profile with:
//
//	go test -run x -bench Metadata -benchtime 3x -cpuprofile cpu.out -memprofile mem.out -mutexprofile mutex.out ./fs
//	go tool pprof -top -cum fs.test cpu.out
func BenchmarkMetadata(b *testing.B) {
	requireFUSE(b)
	files := envInt("TWINCRYPT_BENCH_FILES", 5000)
	dir := benchDir(b)
	mnts := map[string]string{}
	kinds := []string{"twin", "xts"}
	for _, k := range kinds {
		v := variants[2] // twin
		if k == "xts" {
			v = variants[0]
		}
		tm := newVolume(b, v)
		lower := filepath.Join(dir, k+"-lower")
		if err := os.Rename(tm.lower, lower); err != nil {
			// Another filesystem: copy the config over.
			os.Mkdir(lower, 0755)
			ents, _ := os.ReadDir(tm.lower)
			for _, e := range ents {
				data, _ := os.ReadFile(filepath.Join(tm.lower, e.Name()))
				os.WriteFile(filepath.Join(lower, e.Name()), data, 0400)
			}
		}
		tm.lower = lower
		tm.mount(b)
		mnts[k] = tm.mnt
	}
	content := make([]byte, 3000)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	untar := func(root string) {
		for i := 0; i < files; i++ {
			d := filepath.Join(root, "d"+strconv.Itoa(i/20))
			if i%20 == 0 {
				if err := os.Mkdir(d, 0755); err != nil {
					b.Fatal(err)
				}
			}
			f, err := os.OpenFile(filepath.Join(d, strconv.Itoa(i)), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0600)
			if err != nil {
				b.Fatal(err)
			}
			f.Write(content)
			ts := []unix.Timespec{{Nsec: unix.UTIME_OMIT}, unix.NsecToTimespec(mtime.UnixNano())}
			unix.UtimesNanoAt(int(f.Fd()), "", ts, unix.AT_EMPTY_PATH)
			f.Chown(0, 0)
			f.Chmod(0644)
			f.Close()
		}
	}
	lsR := func(root string) {
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				b.Fatal(err)
			}
			var st syscall.Stat_t
			syscall.Lstat(p, &st)
			unix.Lgetxattr(p, "security.selinux", nil)
			unix.Getxattr(p, "system.posix_acl_access", nil)
			return nil
		})
	}
	steps := []struct {
		name string
		do   func(string)
	}{
		{"untar", untar}, {"lsR", lsR}, {"lsR-warm", lsR},
		{"rm", func(root string) {
			if err := os.RemoveAll(root); err != nil {
				b.Fatal(err)
			}
		}},
	}
	total := map[string]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, k := range kinds {
			root := filepath.Join(mnts[k], "tree")
			if err := os.Mkdir(root, 0755); err != nil {
				b.Fatal(err)
			}
			for _, s := range steps {
				t0 := time.Now()
				s.do(root)
				total[k+"-"+s.name] += time.Since(t0)
			}
		}
	}
	b.StopTimer()
	for name, d := range total {
		b.ReportMetric(float64(d.Nanoseconds())/float64(b.N*files), name+"-ns/file")
	}
}
