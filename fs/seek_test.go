package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// everyVariant is variants plus encrypted content with plaintext names.
func everyVariant() []variant {
	vs := append([]variant(nil), variants...)
	for _, v := range vs {
		if v.plaintextNames {
			return vs
		}
	}
	return append(vs, variant{name: "plainnames", cipher: "aes-xts", keyBytes: 64, plaintextNames: true})
}

// sparseStep is one operation building a sparse file.
type sparseStep struct {
	kind     string // "write", "truncate", "fallocate"
	off, n   int64
	fallMode uint32
}

func wr(off, n int64) sparseStep  { return sparseStep{kind: "write", off: off, n: n} }
func trunc(size int64) sparseStep { return sparseStep{kind: "truncate", off: size} }
func falloc(mode uint32, off, n int64) sparseStep {
	return sparseStep{kind: "fallocate", off: off, n: n, fallMode: mode}
}

// sparseLayouts are files with holes at the start, in the middle and at
// the end, single bytes of data at extent edges, fallocate'd, punched and
// truncate-extended regions.
func sparseLayouts() map[string][]sparseStep {
	const K = 1024
	keep := uint32(unix.FALLOC_FL_KEEP_SIZE)
	punch := uint32(unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE)
	l := map[string][]sparseStep{
		"empty":              nil,
		"issue-repro":        {trunc(64 * K), wr(64*K, 2)},
		"dense":              {wr(0, 20000)},
		"hole-start":         {wr(50000, 10000)},
		"hole-middle":        {wr(0, 8192), wr(100000, 100)},
		"hole-end":           {wr(0, 5000), trunc(200000)},
		"holes-everywhere":   {wr(10000, 3), wr(70000, 5000), wr(140000, 1), trunc(300001)},
		"unaligned":          {wr(4095, 1), trunc(12289)},
		"truncate-extended":  {wr(0, 3000), trunc(3000 + 2*4096 + 7)},
		"shrink-grow":        {wr(0, 50000), trunc(10000), trunc(30000)},
		"tail-spill":         {wr(0, 4090), trunc(3 * 4096)},
		"aligned-end":        {wr(8192, 4096), trunc(4 * 4096)},
		"fallocate":          {wr(0, 100), falloc(0, 3*4096, 5*4096), wr(9*4096, 10)},
		"fallocate-keep":     {wr(0, 100), falloc(keep, 100, 64*K), trunc(40000)},
		"fallocate-only":     {falloc(0, 0, 20000)},
		"punch":              {wr(0, 64*K), falloc(punch, 8*K, 32*K)},
		"punch-unaligned":    {wr(0, 64*K), falloc(punch, 5000, 30000)},
		"zero-range":         {wr(0, 64*K), falloc(unix.FALLOC_FL_ZERO_RANGE, 4096, 5*4096)},
		"large-sparse":       {trunc(64 << 20), wr(32<<20, 1), wr(64<<20-1, 1)},
		"data-every-4th-ext": {wr(0, 1), wr(4*4096+17, 1), wr(8*4096+4095, 1), wr(12*4096, 4096), trunc(15*4096 + 1)},
	}
	for _, off := range []int64{0, 1, 31, 32, 4063, 4064, 4095, 4096, 4097, 8191, 40000, 1<<20 - 1} {
		l[fmt.Sprintf("byte-at-%d", off)] = []sparseStep{trunc(1 << 20), wr(off, 1)}
	}
	return l
}

// buildSparse makes the file p from steps; data bytes are never zero.
func buildSparse(t *testing.T, p string, steps []sparseStep) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for i, s := range steps {
		switch s.kind {
		case "write":
			b := make([]byte, s.n)
			for j := range b {
				b[j] = byte(1 + (int64(j)+s.off+int64(i))%251)
			}
			_, err = f.WriteAt(b, s.off)
		case "truncate":
			err = f.Truncate(s.off)
		case "fallocate":
			err = unix.Fallocate(int(f.Fd()), s.fallMode, s.off, s.n)
		}
		if err != nil {
			t.Fatalf("%s step %d %+v: %v", p, i, s, err)
		}
	}
}

// seekWalk checks SEEK_DATA/SEEK_HOLE on the file p against the rules of
// lseek(2): every offset returned is at or after the one asked, data lies
// below the size, holes read as zeros, each whence agrees with the other,
// a walk from data to hole to data always advances, both whences give
// ENXIO at and after the size. It returns the file rebuilt from the walk's
// data regions (zeros elsewhere), which must equal the file, and the data
// regions.
func seekWalk(t *testing.T, p string) (rebuilt []byte, data [][2]int64) {
	t.Helper()
	full, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	size := int64(len(full))
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	seek := func(off int64, whence int) (int64, error) {
		return unix.Seek(fd, off, whence)
	}
	rebuilt = make([]byte, size)
	pos := int64(0)
	for steps := 0; pos < size; steps++ {
		if steps > 1<<16 {
			t.Fatalf("%s: walk of %d bytes does not end", p, size)
		}
		d, err := seek(pos, unix.SEEK_DATA)
		if err == syscall.ENXIO {
			break // a hole to the end
		}
		if err != nil {
			t.Fatalf("%s: SEEK_DATA(%d): %v", p, pos, err)
		}
		if d < pos || d >= size {
			t.Fatalf("%s (size %d): SEEK_DATA(%d) = %d", p, size, pos, d)
		}
		if d > pos {
			if hh, err := seek(pos, unix.SEEK_HOLE); err != nil || hh != pos {
				t.Fatalf("%s: SEEK_DATA(%d) = %d says hole, but SEEK_HOLE(%d) = %d, %v", p, pos, d, pos, hh, err)
			}
		}
		h, err := seek(d, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("%s: SEEK_HOLE(%d): %v", p, d, err)
		}
		if h <= d || h > size {
			t.Fatalf("%s (size %d): SEEK_DATA(%d) = %d then SEEK_HOLE(%d) = %d: no progress", p, size, pos, d, d, h)
		}
		if dd, err := seek(d, unix.SEEK_DATA); err != nil || dd != d {
			t.Fatalf("%s: SEEK_DATA(%d) = %d, %v: not data at its own answer", p, d, dd, err)
		}
		copy(rebuilt[d:h], full[d:h])
		data = append(data, [2]int64{d, h})
		pos = h
	}
	for _, whence := range []int{unix.SEEK_DATA, unix.SEEK_HOLE} {
		for _, off := range []int64{size, size + 1, size + 5000} {
			if n, err := seek(off, whence); err != syscall.ENXIO {
				t.Errorf("%s (size %d): lseek(%d, whence %d) = %d, %v, want ENXIO", p, size, off, whence, n, err)
			}
		}
	}
	// Probes around every extent boundary of the first 64 KiB and near
	// the end.
	var probes []int64
	for b := int64(0); b <= min(size, 64<<10); b += 4096 {
		probes = append(probes, b-1, b, b+1, b+2048)
	}
	probes = append(probes, size-4097, size-4096, size-2, size-1)
	for _, x := range probes {
		if x < 0 || x >= size {
			continue
		}
		d, derr := seek(x, unix.SEEK_DATA)
		h, herr := seek(x, unix.SEEK_HOLE)
		if herr != nil || h < x || h > size {
			t.Fatalf("%s (size %d): SEEK_HOLE(%d) = %d, %v", p, size, x, h, herr)
		}
		if !bytes.Equal(full[x:min(size, h)], rebuilt[x:min(size, h)]) && h > x {
			// [x,h) is data: the walk must have copied it.
			t.Fatalf("%s: SEEK_HOLE(%d) = %d, but the walk called part of it a hole", p, x, h)
		}
		if derr == syscall.ENXIO {
			if !allZero(full[x:]) {
				t.Fatalf("%s: SEEK_DATA(%d) = ENXIO, but the file holds data after it", p, x)
			}
			continue
		}
		if derr != nil || d < x || d >= size {
			t.Fatalf("%s (size %d): SEEK_DATA(%d) = %d, %v", p, size, x, d, derr)
		}
		if d > x && h != x || h > x && d != x {
			t.Fatalf("%s: at %d SEEK_DATA = %d and SEEK_HOLE = %d disagree", p, x, d, h)
		}
		if !allZero(full[x:d]) {
			t.Fatalf("%s: SEEK_DATA(%d) = %d skips data", p, x, d)
		}
	}
	return rebuilt, data
}

// holesKept checks that the holes of the native file (data regions ref)
// are holes on the mount too (data regions got), allowing the extent at
// each edge of a native hole to be reported as data: a mount may report
// zeros as data, but a sparse file must stay sparse when copied.
func holesKept(size int64, ref, got [][2]int64) error {
	inData := func(regions [][2]int64, lo, hi int64) bool {
		for _, r := range regions {
			if r[0] < hi && lo < r[1] {
				return true
			}
		}
		return false
	}
	for e := int64(1); (e+2)*4096 <= size; e++ {
		lo, hi := e*4096, (e+1)*4096
		if !inData(ref, lo-4096, hi+4096) && inData(got, lo, hi) {
			return fmt.Errorf("[%d,%d) is in the middle of a native hole but reported as data", lo, hi)
		}
	}
	return nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// TestSeekDataHole walks every sparse layout with SEEK_DATA/SEEK_HOLE on
// every variant and on a native directory.
func TestSeekDataHole(t *testing.T) {
	layouts := sparseLayouts()
	nativeData := map[string][][2]int64{}
	check := func(t *testing.T, dir string, native map[string][]byte) {
		for name, steps := range layouts {
			p := filepath.Join(dir, name)
			buildSparse(t, p, steps)
			full, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if native != nil && !bytes.Equal(full, native[name]) {
				t.Errorf("%s: content differs from native", name)
			}
			rebuilt, data := seekWalk(t, p)
			if !bytes.Equal(rebuilt, full) {
				t.Errorf("%s: the file rebuilt from its SEEK_DATA/SEEK_HOLE walk differs from a full read", name)
			}
			if native == nil {
				nativeData[name] = data
			} else if err := holesKept(int64(len(full)), nativeData[name], data); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	}
	ref := map[string][]byte{}
	nativeDir := t.TempDir()
	check(t, nativeDir, nil)
	for name := range layouts {
		b, err := os.ReadFile(filepath.Join(nativeDir, name))
		if err != nil {
			t.Fatal(err)
		}
		ref[name] = b
	}
	for _, v := range everyVariant() {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			check(t, tm.mnt, ref)
		})
	}
}

// runTool runs a command that must finish within 30 s; a tool looping
// on lseek is killed and reported instead of hanging the test.
func runTool(t *testing.T, name string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s not installed: %v", name, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatalf("%s %q did not finish (lseek loop?): %s", name, args, out)
	}
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
}

// TestSparseCopyTools copies sparse files out of and into each variant
// with cp (--sparse=always and the default) and tar --sparse, which walk
// the files with SEEK_DATA and SEEK_HOLE (and used to loop forever on the
// encrypted mounts), and compares the copies.
func TestSparseCopyTools(t *testing.T) {
	layouts := sparseLayouts()
	picked := []string{"issue-repro", "hole-start", "hole-middle", "hole-end", "unaligned", "fallocate", "punch-unaligned", "large-sparse", "byte-at-4097"}
	for _, v := range everyVariant() {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			src := filepath.Join(tm.mnt, "src")
			must(t, os.Mkdir(src, 0755))
			for _, name := range picked {
				buildSparse(t, filepath.Join(src, name), layouts[name])
			}
			out := t.TempDir()
			for _, name := range picked {
				runTool(t, "cp", "--sparse=always", filepath.Join(src, name), filepath.Join(out, name))
				runTool(t, "cp", "--sparse=always", filepath.Join(src, name), filepath.Join(tm.mnt, name+".cp"))
				runTool(t, "cp", filepath.Join(src, name), filepath.Join(out, name+".auto"))
			}
			tarball := filepath.Join(t.TempDir(), "a.tar")
			runTool(t, "tar", "--sparse", "-cf", tarball, "-C", tm.mnt, "src")
			untar := t.TempDir()
			runTool(t, "tar", "--sparse", "-xf", tarball, "-C", untar)
			for _, name := range picked {
				want, err := os.ReadFile(filepath.Join(src, name))
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range []string{filepath.Join(out, name), filepath.Join(out, name+".auto"), filepath.Join(tm.mnt, name+".cp"), filepath.Join(untar, "src", name)} {
					got, err := os.ReadFile(p)
					if err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(got, want) {
						t.Errorf("%s: copy %s differs from the original", name, p)
					}
				}
			}
		})
	}
}
