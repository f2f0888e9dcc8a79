package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// seqSize is the file size of seqwrite and seqread in MiB (the eCryptfs
// article copied huge files; 1 GiB is the peers table's size).
var seqSize = scale[int64]{tiny: 16, small: 128, dflt: 512, large: 1024}

// smallSize is the file size of the smallwrite workloads in MiB (small:
// 8 MiB is already 16384 calls of 512 bytes, each a FUSE request).
var smallSize = scale[int64]{tiny: 4, small: 8, dflt: 64, large: 256}

// Seeds of the workloads' patterns: distinct, so that a file of one
// workload never passes for another's.
const (
	seedSeqWrite = iota + 1
	seedSeqRead
	seedSmallWrite
	seedBonnie
	seedRandRW
)

// writePattern creates path and writes size bytes of pt's generation 0 in
// write calls of block bytes (block divides 1 MiB), then fsyncs and
// closes it. It returns the number of write calls.
func writePattern(ctx context.Context, path string, pt *pattern, size int64, block int) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	var writes int64
	for off := int64(0); off < size; off += oneMiB {
		if err := ctx.Err(); err != nil {
			f.Close()
			return writes, err
		}
		chunk := pt.span(off, int(min(oneMiB, size-off)))
		for k := 0; k < len(chunk); k += block {
			if _, err := f.Write(chunk[k:min(k+block, len(chunk))]); err != nil {
				f.Close()
				return writes, fmt.Errorf("write at offset %d: %w", off+int64(k), err)
			}
			writes++
		}
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return writes, fmt.Errorf("fsync: %w", err)
	}
	return writes, f.Close()
}

// SeqWrite writes one file in 1 MiB blocks and fsyncs it: dd bs=1M
// conv=fsync, the large-file copy of the eCryptfs article. The measured
// part is open, the writes, fsync and close.
type SeqWrite struct{}

func (*SeqWrite) Name() string { return "seqwrite" }

func (*SeqWrite) Describe() string {
	return "write one file in 1 MiB blocks, fsync (dd bs=1M conv=fsync)"
}

func (*SeqWrite) Prepare(context.Context, *Env) error { return nil }

func (w *SeqWrite) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	size := seqSize.pick(env.Size) * oneMiB
	pt := newPattern(seedSeqWrite)
	const name = "seqwrite.dat"
	path := filepath.Join(dir, name)
	var sw stopwatch
	var writes int64
	_, err := sw.lap(func() (err error) {
		writes, err = writePattern(ctx, path, pt, size, oneMiB)
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	verifyHook("seqwrite.written", dir)
	if err := pt.verifyFile(path, name, size, nil); err != nil {
		return Result{}, err
	}
	if err := removeAndCheck(dir, name); err != nil {
		return Result{}, err
	}
	return Result{
		Wall: sw.wall, Bytes: size, Ops: writes, WorkloadCPU: sw.cpu, Verified: true,
		Metrics: map[string]float64{"MiBps": mibps(size, sw.wall)},
	}, nil
}

// SeqRead writes one file (not measured), drops the caches and reads it
// back in 1 MiB blocks: the cold read of a large file. Each block is
// checked as it arrives; the check is left out of the measured time.
type SeqRead struct{}

func (*SeqRead) Name() string { return "seqread" }

func (*SeqRead) Describe() string {
	return "read one file back cold in 1 MiB blocks (dd bs=1M after drop_caches)"
}

func (*SeqRead) Prepare(context.Context, *Env) error { return nil }

func (w *SeqRead) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	size := seqSize.pick(env.Size) * oneMiB
	pt := newPattern(seedSeqRead)
	const name = "seqread.dat"
	path := filepath.Join(dir, name)
	if _, err := writePattern(ctx, path, pt, size, oneMiB); err != nil {
		return Result{}, fmt.Errorf("write %s: %w", name, err)
	}
	verifyHook("seqread.written", dir)
	var res Result
	if !coldCaches(env) {
		// At least the file's own pages go: the read still crosses the
		// filesystem under test, but lower layers may serve it warm.
		if err := dropPathCache(path); err != nil {
			return Result{}, err
		}
		appendNote(&res, "warm read: could not drop caches (only the file's own pages were dropped)")
	}
	var sw stopwatch
	sw.start()
	f, err := os.Open(path)
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	buf := make([]byte, oneMiB)
	var off, reads int64
	for {
		n, err := io.ReadFull(f, buf)
		reads++
		sw.stop()
		if n > 0 {
			if off+int64(n) > size {
				return Result{}, fmt.Errorf("%s: %d bytes past the %d written: %w", name, off+int64(n)-size, size, errContent)
			}
			if err := pt.check(name, buf[:n], off, nil); err != nil {
				return Result{}, err
			}
			off += int64(n)
		}
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			return Result{}, fmt.Errorf("%s: read at offset %d: %w", name, off, err)
		}
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		sw.start()
	}
	sw.start()
	err = f.Close()
	sw.stop()
	if err != nil {
		return Result{}, err
	}
	if off != size {
		return Result{}, fmt.Errorf("%s: read %d bytes, wrote %d: %w", name, off, size, errContent)
	}
	if err := removeAndCheck(dir, name); err != nil {
		return Result{}, err
	}
	res.Wall, res.Bytes, res.Ops, res.WorkloadCPU, res.Verified = sw.wall, size, reads, sw.cpu, true
	res.Metrics = map[string]float64{"MiBps": mibps(size, sw.wall)}
	return res, nil
}

// SmallWrite writes one file in small write calls and fsyncs it: what
// gocryptfs users complain about (dd bs=512 ten times slower). Every call
// is a FUSE WRITE of BlockSize bytes unless the kernel caches writes, and
// on an encrypted mount a call smaller than the 4 KiB extent is a
// read-modify-write.
type SmallWrite struct {
	// BlockSize is the size of each write call in bytes (4096 or 512;
	// it must divide 1 MiB).
	BlockSize int
}

func (w *SmallWrite) Name() string {
	if w.BlockSize%1024 == 0 {
		return fmt.Sprintf("smallwrite%dk", w.BlockSize/1024)
	}
	return fmt.Sprintf("smallwrite%d", w.BlockSize)
}

func (w *SmallWrite) Describe() string {
	return fmt.Sprintf("write one file in %d-byte write calls, fsync (dd bs=%d conv=fsync)", w.BlockSize, w.BlockSize)
}

func (*SmallWrite) Prepare(context.Context, *Env) error { return nil }

func (w *SmallWrite) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	if w.BlockSize <= 0 || oneMiB%w.BlockSize != 0 {
		return Result{}, fmt.Errorf("block size %d does not divide 1 MiB", w.BlockSize)
	}
	defer lockThread()()
	size := smallSize.pick(env.Size) * oneMiB
	pt := newPattern(seedSmallWrite)
	name := w.Name() + ".dat"
	path := filepath.Join(dir, name)
	var sw stopwatch
	var writes int64
	_, err := sw.lap(func() (err error) {
		writes, err = writePattern(ctx, path, pt, size, w.BlockSize)
		return err
	})
	if err != nil {
		return Result{}, fmt.Errorf("%s: %w", name, err)
	}
	verifyHook(w.Name()+".written", dir)
	if err := pt.verifyFile(path, name, size, nil); err != nil {
		return Result{}, err
	}
	if err := removeAndCheck(dir, name); err != nil {
		return Result{}, err
	}
	return Result{
		Wall: sw.wall, Bytes: size, Ops: writes, WorkloadCPU: sw.cpu, Verified: true,
		Metrics: map[string]float64{"MiBps": mibps(size, sw.wall)},
	}, nil
}
