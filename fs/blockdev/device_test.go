package blockdev

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/luks"
)

func TestLayoutIV(t *testing.T) {
	for _, tc := range []struct {
		ss       int
		ivShift  uint
		ivOffset uint64
		off      int64
		want     uint64
	}{
		{512, 0, 0, 0, 0},
		{512, 0, 0, 512, 1},
		{512, 0, 0, 1 << 30, 1 << 21},
		// 4096-byte sectors, IV in 512-byte units: sector n has IV 8n.
		{4096, 0, 0, 4096, 8},
		{4096, 0, 0, 3 * 4096, 24},
		// iv_large_sectors: sector n has IV n.
		{4096, 3, 0, 3 * 4096, 3},
		{2048, 2, 0, 5 * 2048, 5},
		// plain mode --skip 100 adds 100 to every IV.
		{512, 0, 100, 512, 101},
		{4096, 3, 7, 4096, 8},
	} {
		l, err := newLayout(&luks.Volume{SectorSize: tc.ss, IVShift: tc.ivShift, IVOffset: tc.ivOffset, Size: -1}, 1<<40)
		if err != nil {
			t.Fatal(err)
		}
		if got := l.iv(tc.off); got != tc.want {
			t.Errorf("sector %d, shift %d, skip %d: IV at %d = %d, want %d", tc.ss, tc.ivShift, tc.ivOffset, tc.off, got, tc.want)
		}
	}
}

func TestNewLayout(t *testing.T) {
	const img = 10 << 20
	for _, tc := range []struct {
		name     string
		v        luks.Volume
		wantSize int64 // 0: refused
	}{
		{"dynamic", luks.Volume{SectorSize: 512, Offset: 1 << 20, Size: -1}, 9 << 20},
		{"dynamic rounds down to sectors", luks.Volume{SectorSize: 4096, Offset: 1<<20 + 512, Size: -1}, 9<<20 - 4096},
		{"fixed", luks.Volume{SectorSize: 4096, Offset: 2 << 20, Size: 4 << 20}, 4 << 20},
		{"fixed to the end", luks.Volume{SectorSize: 512, Offset: 2 << 20, Size: 8 << 20}, 8 << 20},
		{"too large", luks.Volume{SectorSize: 512, Offset: 2 << 20, Size: 8<<20 + 512}, 0},
		{"partial sector", luks.Volume{SectorSize: 4096, Size: 4096 + 512}, 0},
		{"zero size", luks.Volume{SectorSize: 512, Size: 0}, 0},
		{"offset past the end", luks.Volume{SectorSize: 512, Offset: img + 512, Size: -1}, 0},
		{"no sector after the offset", luks.Volume{SectorSize: 4096, Offset: img - 512, Size: -1}, 0},
		{"sector 256", luks.Volume{SectorSize: 256, Size: -1}, 0},
		{"sector 8192", luks.Volume{SectorSize: 8192, Size: -1}, 0},
		{"sector 1536", luks.Volume{SectorSize: 1536, Size: -1}, 0},
		{"IV shift beyond the sector", luks.Volume{SectorSize: 4096, IVShift: 4, Size: -1}, 0},
		{"negative offset", luks.Volume{SectorSize: 512, Offset: -512, Size: -1}, 0},
	} {
		l, err := newLayout(&tc.v, img)
		switch {
		case tc.wantSize == 0 && err == nil:
			t.Errorf("%s: accepted, size %d", tc.name, l.size)
		case tc.wantSize == 0 && !errors.Is(err, errGeometry):
			t.Errorf("%s: error %v does not wrap errGeometry", tc.name, err)
		case tc.wantSize != 0 && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.wantSize != 0 && l.size != tc.wantSize:
			t.Errorf("%s: size %d, want %d", tc.name, l.size, tc.wantSize)
		}
	}
}

func openTestDevice(t *testing.T, tv *testVolume, ro bool) *device {
	t.Helper()
	d, err := openDevice(Options{Image: tv.image, Volume: tv.v, ReadOnly: ro})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.close)
	return d
}

// TestDeviceReadWrite writes at the edge offsets below FUSE and checks the
// image with the independent decoder after every write.
func TestDeviceReadWrite(t *testing.T) {
	for _, g := range geometries {
		t.Run(g.name, func(t *testing.T) {
			tv := newTestVolume(t, g)
			d := openTestDevice(t, tv, false)
			model := tv.plaintext(t)
			for _, tc := range ioCases(g.sectorSize) {
				data := randBytes(tc.n)
				var o opRun
				n, errno := d.write(&o, data, tc.off)
				if errno != 0 || n != tc.n {
					t.Fatalf("write %d at %d: %d, %v", tc.n, tc.off, n, errno)
				}
				copy(model[tc.off:], data)
				got := make([]byte, tc.n)
				if n, errno := d.read(&o, got, tc.off); errno != 0 || n != tc.n || !bytes.Equal(got, data) {
					t.Fatalf("read back %d at %d: %d, %v, equal %v", tc.n, tc.off, n, errno, bytes.Equal(got, data))
				}
				if i := firstDiff(tv.plaintext(t), model); i >= 0 {
					t.Fatalf("after writing %d at %d: image decrypts differently at payload offset %d", tc.n, tc.off, i)
				}
			}
			// The whole volume, read in unaligned pieces.
			got := make([]byte, 0, testPayload)
			buf := make([]byte, 100003)
			for off := int64(0); ; {
				n, errno := d.read(&opRun{}, buf, off)
				if errno != 0 {
					t.Fatal(errno)
				}
				if n == 0 {
					break
				}
				got = append(got, buf[:n]...)
				off += int64(n)
			}
			if i := firstDiff(got, model); i >= 0 {
				t.Fatalf("volume read differs from the model at %d (len %d)", i, len(got))
			}
			tv.checkOutside(t)
		})
	}
}

func TestDeviceEnd(t *testing.T) {
	tv := newTestVolume(t, geometries[1])
	d := openTestDevice(t, tv, false)
	var o opRun
	if n, errno := d.write(&o, make([]byte, 10), testPayload); n != 0 || errno != syscall.ENOSPC {
		t.Errorf("write at the end: %d, %v; want ENOSPC", n, errno)
	}
	if n, errno := d.write(&o, make([]byte, 10), testPayload-4); n != 4 || errno != 0 {
		t.Errorf("write across the end: %d, %v; want 4 bytes", n, errno)
	}
	if n, errno := d.read(&o, make([]byte, 10), testPayload); n != 0 || errno != 0 {
		t.Errorf("read at the end: %d, %v; want 0 bytes", n, errno)
	}
	if n, errno := d.read(&o, make([]byte, 10), testPayload-3); n != 3 || errno != 0 {
		t.Errorf("read across the end: %d, %v; want 3 bytes", n, errno)
	}
	tv.checkOutside(t)
}

func TestDeviceReadOnly(t *testing.T) {
	tv := newTestVolume(t, geometries[0])
	d := openTestDevice(t, tv, true)
	if _, errno := d.write(&opRun{}, make([]byte, 512), 0); errno != syscall.EROFS {
		t.Errorf("write to a read-only device: %v, want EROFS", errno)
	}
	// A second read-only opener shares the image; a writer does not.
	openTestDevice(t, tv, true)
	if _, err := openDevice(Options{Image: tv.image, Volume: tv.v}); !errors.Is(err, ErrImageBusy) {
		t.Errorf("read-write open of an image open read-only elsewhere: %v, want ErrImageBusy", err)
	}
}

func TestDeviceExclusive(t *testing.T) {
	tv := newTestVolume(t, geometries[0])
	openTestDevice(t, tv, false)
	for _, ro := range []bool{false, true} {
		if _, err := openDevice(Options{Image: tv.image, Volume: tv.v, ReadOnly: ro}); !errors.Is(err, ErrImageBusy) {
			t.Errorf("second open (ro=%v) of an image open read-write: %v, want ErrImageBusy", ro, err)
		}
	}
}

func TestDeviceTruncatedImage(t *testing.T) {
	tv := newTestVolume(t, geometries[0])
	d := openTestDevice(t, tv, false)
	if err := d.f.Truncate(testOffset + testPayload/2); err != nil {
		t.Fatal(err)
	}
	if _, errno := d.read(&opRun{}, make([]byte, 512), testPayload-512); errno != syscall.EIO {
		t.Errorf("read beyond a truncated image: %v, want EIO", errno)
	}
	if _, errno := d.write(&opRun{}, make([]byte, 10), testPayload-512+1); errno != syscall.EIO {
		t.Errorf("partial-sector write beyond a truncated image: %v, want EIO", errno)
	}
}

// TestDeviceConcurrentPartialWrites has writers fill disjoint, unaligned
// byte ranges that share sectors. Without the read-modify-write lock one
// writer's merge would put back stale bytes of another's sector.
func TestDeviceConcurrentPartialWrites(t *testing.T) {
	for _, g := range []geometry{geometries[0], geometries[2]} {
		t.Run(g.name, func(t *testing.T) {
			tv := newTestVolume(t, g)
			d := openTestDevice(t, tv, false)
			const writers, piece, rounds = 4, 37, 200
			model := tv.plaintext(t)
			var wg sync.WaitGroup
			errs := make(chan error, writers)
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					data := bytes.Repeat([]byte{byte('a' + w)}, piece)
					for r := range rounds {
						off := int64((r*writers + w) * piece)
						if _, errno := d.write(&opRun{}, data, off); errno != 0 {
							errs <- fmt.Errorf("writer %d at %d: %v", w, off, errno)
							return
						}
					}
				}()
				for r := range rounds {
					copy(model[(r*writers+w)*piece:], bytes.Repeat([]byte{byte('a' + w)}, piece))
				}
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			if i := firstDiff(tv.plaintext(t), model); i >= 0 {
				t.Fatalf("concurrent partial writes lost data at payload offset %d", i)
			}
		})
	}
}

// TestDeviceNoAllocs: a request takes its buffer from the pool and works
// sector by sector in place, so serving it allocates nothing.
func TestDeviceNoAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("skipping: sync.Pool drops items at random under the race detector")
	}
	tv := newTestVolume(t, geometries[0])
	d := openTestDevice(t, tv, false)
	buf := make([]byte, 1<<20)
	for _, tc := range []struct {
		name string
		off  int64
		n    int
	}{{"aligned", 0, 1 << 20}, {"unaligned", 1000, 1<<20 - 2000}} {
		for op, f := range map[string]func(){
			"write": func() { d.write(&opRun{}, buf[:tc.n], tc.off) },
			"read":  func() { d.read(&opRun{}, buf[:tc.n], tc.off) },
		} {
			if allocs := testing.AllocsPerRun(20, f); allocs >= 1 {
				t.Errorf("%s %s: %.1f allocations per request, want none", tc.name, op, allocs)
			}
		}
	}
}
