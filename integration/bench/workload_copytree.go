package bench

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
)

// copyFiles is the number of files of copytree: Phoronix copied 364 JPEG
// images (1.3 GB) from a flash drive with cp -va.
const copyFiles = 364

// copyFileSize is the size of each of them in KiB (large: 3.5 MiB, the
// article's 1.3 GB in all).
var copyFileSize = scale[int64]{tiny: 16, small: 256, dflt: 1024, large: 3584}

// CopyTree copies a directory of 364 incompressible files, built once in
// the cache (outside every target), into the target with cp -r, and checks
// the SHA-256 of every copy.
type CopyTree struct {
	noPrograms bool // tests: use the Go copy even where cp is installed
	inputs     cachedInputs
}

func (*CopyTree) Name() string { return "copytree" }

func (*CopyTree) Describe() string {
	return "cp -r of 364 incompressible files into the target (Phoronix: 364 JPEGs, 1.3 GB)"
}

func (w *CopyTree) cache(env *Env) (string, error) {
	return needCache(env, "copytree-"+string(sizeOrSmall(env.Size)))
}

func (w *CopyTree) Prepare(ctx context.Context, env *Env) error {
	cdir, err := w.cache(env)
	if err != nil {
		return err
	}
	size := copyFileSize.pick(env.Size) << 10
	param := fmt.Sprintf("%d files of %d bytes", copyFiles, size)
	if m, err := readMeta(cdir); err == nil && m.Param == param && checkMeta(cdir, m) && countEntries(filepath.Join(cdir, "img")) == copyFiles {
		w.inputs.meta, w.inputs.dir = m, cdir
		return nil
	}
	if err := os.RemoveAll(filepath.Join(cdir, "img")); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(cdir, "img"), 0o755); err != nil {
		return err
	}
	os.Remove(filepath.Join(cdir, metaName))
	m := &cacheMeta{Param: param, Files: map[string]string{}, Sizes: map[string]int64{}, Count: copyFiles}
	buf := make([]byte, size)
	for i := 1; i <= copyFiles; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		var key [32]byte
		binary.LittleEndian.PutUint64(key[:], uint64(i))
		copy(key[8:], "twincrypt copytree")
		rand.NewChaCha8(key).Read(buf)
		// A JPEG's start-of-image and APP0 markers, for whoever looks.
		copy(buf, []byte{0xff, 0xd8, 0xff, 0xe0})
		name := path.Join("img", fmt.Sprintf("IMG_%04d.jpg", i))
		if err := os.WriteFile(filepath.Join(cdir, name), buf, 0o644); err != nil {
			return err
		}
		sum := sha256.Sum256(buf)
		m.Files[name] = hex.EncodeToString(sum[:])
		m.Sizes[name] = size
		m.Bytes += size
	}
	if err := writeMeta(cdir, m); err != nil {
		return err
	}
	w.inputs.meta, w.inputs.dir = m, cdir
	return nil
}

func (w *CopyTree) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	m, cdir, err := w.inputs.load(env, w.cache)
	if err != nil {
		return Result{}, err
	}
	var res Result
	src := filepath.Join(cdir, "img")
	if cp := lookProgram("cp", w.noPrograms); cp != "" {
		appendNote(&res, "cp -r: %s", cp)
		wall, cpu, err := shellCmd{dir: dir, script: `exec "$1" -r "$2" img`, args: []string{cp, src}}.run(ctx)
		if err != nil {
			return Result{}, err
		}
		res.Wall, res.WorkloadCPU = wall, cpu
	} else {
		appendNote(&res, "cp not installed: Go copy")
		var sw stopwatch
		if _, err := sw.lap(func() error { return goCopyDir(ctx, src, filepath.Join(dir, "img")) }); err != nil {
			return Result{}, err
		}
		res.Wall, res.WorkloadCPU = sw.wall, sw.cpu
	}
	verifyHook("copytree.copied", dir)
	if err := verifyTree(ctx, dir, m); err != nil {
		return Result{}, err
	}
	if err := removeAndCheck(dir, "img"); err != nil {
		return Result{}, err
	}
	res.Bytes, res.Ops, res.Verified = m.Bytes, int64(m.Count), true
	res.Metrics = map[string]float64{"MiBps": mibps(m.Bytes, res.Wall)}
	return res, nil
}

// goCopyDir copies the regular files of the flat directory src into the
// new directory dst.
func goCopyDir(ctx context.Context, src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o755); err != nil {
		return err
	}
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := copyRegular(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyRegular(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", dst, err)
	}
	return out.Close()
}

// verifyTree checks that dir holds exactly the files m lists (names
// relative to dir, with /), each with its SHA-256, read after dropping
// its cached pages.
func verifyTree(ctx context.Context, dir string, m *cacheMeta) error {
	seen := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		want, ok := m.Files[rel]
		if !ok {
			return fmt.Errorf("verify: %s: not in the original tree: %w", rel, errContent)
		}
		got, size, err := sha256Cold(p)
		if err != nil {
			return fmt.Errorf("verify: %w", err)
		}
		if size != m.Sizes[rel] {
			return fmt.Errorf("verify: %s: %d bytes, the original has %d: %w", rel, size, m.Sizes[rel], errContent)
		}
		if got != want {
			return fmt.Errorf("verify: %s: sha256 %s, the original's is %s: %w", rel, got, want, errContent)
		}
		seen++
		return nil
	})
	if err != nil {
		return err
	}
	if seen != len(m.Files) {
		for _, name := range sortedNames(m.Files) {
			if _, err := os.Lstat(filepath.Join(dir, filepath.FromSlash(name))); err != nil {
				return fmt.Errorf("verify: %s: missing (%d of %d files found): %w", name, seen, len(m.Files), errContent)
			}
		}
		return fmt.Errorf("verify: %d of %d files found: %w", seen, len(m.Files), errContent)
	}
	return nil
}

// sha256Cold hashes a file after dropping its cached pages.
func sha256Cold(p string) (string, int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	dropFileCache(f)
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return "", 0, fmt.Errorf("read %s: %w", p, err)
	}
	return hex.EncodeToString(h.Sum(nil)), n, nil
}

// countEntries is the number of entries in dir, -1 when it cannot be read.
func countEntries(dir string) int {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return -1
	}
	return len(ents)
}

// sizeOrSmall names the size a workload runs at (an empty Size is small).
func sizeOrSmall(s Size) Size {
	switch s {
	case SizeTiny, SizeDefault, SizeLarge:
		return s
	}
	return SizeSmall
}
