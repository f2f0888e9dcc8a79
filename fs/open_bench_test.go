package fs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkOpenClose is open(2) and close(2) of one small file on a twin
// mount, on each transport: a FUSE OPEN (and RELEASE) per iteration, the
// entry cached. Run the binaries of two commits one after the other for a
// before/after ratio:
//
//	go test -run x -bench OpenClose -count 5 ./fs
func BenchmarkOpenClose(b *testing.B) {
	requireFUSE(b)
	for _, tr := range []string{TransportDev, TransportUring} {
		b.Run(tr, func(b *testing.B) {
			tm := newVolume(b, variants[2])
			tm.mount(b, func(o *Options) { o.Transport = tr })
			if got := TransportOf(tm.srv).Name; got != tr {
				b.Skipf("transport %s, want %s", TransportOf(tm.srv), tr)
			}
			p := filepath.Join(tm.mnt, "f")
			if err := os.WriteFile(p, []byte("small"), 0644); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					b.Fatal(err)
				}
				unix.Close(fd)
			}
		})
	}
}
