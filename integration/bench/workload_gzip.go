package bench

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// gzipTarSize is the size of the tar gzip compresses, in MiB (large:
// Phoronix's 745 MB armyops.tar; default: the peers table's 256 MiB;
// small: about a second of gzip -6, to keep the default run in budget).
var gzipTarSize = scale[int64]{tiny: 8, small: 32, dflt: 256, large: 745}

// Gzip is Phoronix's `gzip -c armyops.tar > armyops.tar.gz` on the
// target: a tar of real files (Go's source tree, repeated to the size) is
// copied onto the target (not measured), the caches are dropped, and gzip
// reads it and writes the .gz on the target. Mostly CPU: the layer's cost
// should hide behind gzip's. Verified by gunzip -c of the result, whose
// SHA-256 must be the original tar's.
type Gzip struct {
	noPrograms bool // tests: use compress/gzip
	inputs     cachedInputs
}

func (*Gzip) Name() string { return "gzip" }

func (*Gzip) Describe() string {
	return "gzip -c of a tar of source files, from and to the target (Phoronix: 745 MB tar)"
}

func (w *Gzip) cache(env *Env) (string, error) {
	return needCache(env, "gzip-"+string(sizeOrSmall(env.Size)))
}

const gzipTarName = "data.tar"

func (w *Gzip) Prepare(ctx context.Context, env *Env) error {
	cdir, err := w.cache(env)
	if err != nil {
		return err
	}
	minSize := gzipTarSize.pick(env.Size) * oneMiB
	param := fmt.Sprintf("tar of at least %d bytes", minSize)
	if m, err := readMeta(cdir); err == nil && m.Param == param && checkMeta(cdir, m) {
		w.inputs.meta, w.inputs.dir = m, cdir
		return nil
	}
	os.Remove(filepath.Join(cdir, metaName))
	files, origin, err := sourceTree(nil)
	if err != nil {
		return err
	}
	st, err := writeTar(ctx, filepath.Join(cdir, gzipTarName), files, minSize, false)
	if err != nil {
		return fmt.Errorf("build %s: %w", gzipTarName, err)
	}
	m := &cacheMeta{Param: param, Source: origin, Files: map[string]string{gzipTarName: st.sha256},
		Sizes: map[string]int64{gzipTarName: st.size}, Count: st.files, Bytes: st.size}
	if err := writeMeta(cdir, m); err != nil {
		return err
	}
	w.inputs.meta, w.inputs.dir = m, cdir
	return nil
}

func (w *Gzip) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	m, cdir, err := w.inputs.load(env, w.cache)
	if err != nil {
		return Result{}, err
	}
	var res Result
	if !strings.HasPrefix(m.Source, "Go ") {
		appendNote(&res, "%s", m.Source)
	}
	const gzName = gzipTarName + ".gz"
	tarPath, gzPath := filepath.Join(dir, gzipTarName), filepath.Join(dir, gzName)
	if err := copyFileSync(filepath.Join(cdir, gzipTarName), tarPath); err != nil {
		return Result{}, fmt.Errorf("copy the tar onto the target: %w", err)
	}
	verifyHook("gzip.copied", dir)
	if !coldCaches(env) {
		if err := dropPathCache(tarPath); err != nil {
			return Result{}, err
		}
		appendNote(&res, "warm: could not drop caches (only the tar's own pages were dropped)")
	}
	gzipProg, gunzipProg := lookProgram("gzip", w.noPrograms), lookProgram("gunzip", w.noPrograms)
	if gzipProg != "" {
		res.Wall, res.WorkloadCPU, err = shellCmd{dir: dir, script: `exec "$1" -c "$2" > "$3"`,
			args: []string{gzipProg, gzipTarName, gzName}}.run(ctx)
	} else {
		appendNote(&res, "gzip not installed: Go compress/gzip")
		var sw stopwatch
		_, err = sw.lap(func() error { return gzipGo(tarPath, gzPath) })
		res.Wall, res.WorkloadCPU = sw.wall, sw.cpu
	}
	if err != nil {
		return Result{}, err
	}
	verifyHook("gzip.compressed", dir)
	fi, err := os.Stat(gzPath)
	if err != nil {
		return Result{}, err
	}
	if err := dropPathCache(gzPath); err != nil {
		return Result{}, err
	}
	sum := sha256.New()
	if gunzipProg != "" {
		_, _, err = shellCmd{dir: dir, script: `exec "$1" -c "$2"`, args: []string{gunzipProg, gzName}, stdout: sum}.run(ctx)
	} else {
		err = gunzipGo(gzPath, sum)
	}
	if err != nil {
		return Result{}, fmt.Errorf("verify: %w", err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != m.Files[gzipTarName] {
		return Result{}, fmt.Errorf("verify: gunzip -c %s: sha256 %s, the original tar's is %s: %w",
			gzName, got, m.Files[gzipTarName], errContent)
	}
	if err := removeAndCheck(dir, gzipTarName, gzName); err != nil {
		return Result{}, err
	}
	tarSize := m.Sizes[gzipTarName]
	res.Bytes, res.Ops, res.Verified = tarSize+fi.Size(), 1, true
	res.Metrics = map[string]float64{"MiBps": mibps(tarSize, res.Wall)}
	if fi.Size() > 0 {
		res.Metrics["ratio"] = float64(tarSize) / float64(fi.Size())
	}
	return res, nil
}

func gzipGo(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	// Buffered as gzip's own output is (compress/gzip alone would write
	// every small block it emits).
	bw := bufio.NewWriterSize(out, 32<<10)
	zw := gzip.NewWriter(bw)
	if _, err := io.Copy(zw, in); err != nil {
		out.Close()
		return err
	}
	if err := zw.Close(); err != nil {
		out.Close()
		return err
	}
	if err := bw.Flush(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func gunzipGo(src string, w io.Writer) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	zr, err := gzip.NewReader(in)
	if err != nil {
		return fmt.Errorf("gunzip %s: %w", src, err)
	}
	if _, err := io.Copy(w, zr); err != nil {
		return fmt.Errorf("gunzip %s: %w", src, err)
	}
	return zr.Close()
}

// copyFileSync copies src to dst and fsyncs dst, so that dropping the
// caches afterwards leaves nothing dirty behind.
func copyFileSync(src, dst string) error {
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
		return err
	}
	if err := out.Sync(); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// dropPathCache drops the cached pages of the file at p.
func dropPathCache(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	dropFileCache(f)
	return f.Close()
}
