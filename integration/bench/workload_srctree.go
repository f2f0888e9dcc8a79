package bench

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// srcTreeSubdirs is the part of Go's src the srctree tarball holds: tiny
// src/net (415 files, 4 MB), small src/net and src/crypto (1.6k files,
// 17 MB), default and large all of src (11.5k files, 116 MB).
var srcTreeSubdirs = scale[[]string]{tiny: []string{"net"}, small: []string{"net", "crypto"}}

// SrcTree is gocryptfs's canonical benchmark on a source tree, as one
// workload because its steps depend on each other: untar a tarball (tar
// xf), list it (ls -lR), MD5 every file (find | xargs md5sum) and remove
// it (rm -rf). Result.Wall is the sum of the four; Metrics holds each as
// untar_s, lsR_s, md5_s, rm_s, which the runner prints as sub-rows.
//
// ls -lR runs warm, right after the untar (as in gocryptfs's script). The
// caches are dropped before md5, so md5 reads every file through the
// filesystem: it is both the cold-read step and the verification against
// the digests of the originals, computed once in the cache. ls -lR is
// checked too: it must list every file and directory.
type SrcTree struct {
	noPrograms bool // tests: use the Go implementations
	inputs     cachedInputs
}

func (*SrcTree) Name() string { return "srctree" }

func (*SrcTree) Describe() string {
	return "Go's source tree: tar xf, ls -lR, md5sum of every file, rm -rf (gocryptfs's benchmark)"
}

func (w *SrcTree) cache(env *Env) (string, error) {
	return needCache(env, "srctree-"+string(sizeOrSmall(env.Size)))
}

const srcTarName = "src.tar"

func (w *SrcTree) Prepare(ctx context.Context, env *Env) error {
	cdir, err := w.cache(env)
	if err != nil {
		return err
	}
	subs := srcTreeSubdirs.pick(env.Size)
	param := "src/" + strings.Join(subs, " src/")
	if m, err := readMeta(cdir); err == nil && m.Param == param && len(m.MD5) == m.Count && checkMeta(cdir, m) {
		w.inputs.meta, w.inputs.dir = m, cdir
		return nil
	}
	os.Remove(filepath.Join(cdir, metaName))
	files, origin, err := sourceTree(subs)
	if err != nil {
		return err
	}
	st, err := writeTar(ctx, filepath.Join(cdir, srcTarName), files, 0, true)
	if err != nil {
		return fmt.Errorf("build %s: %w", srcTarName, err)
	}
	m := &cacheMeta{
		Param: param, Source: origin,
		Files: map[string]string{srcTarName: st.sha256}, Sizes: map[string]int64{srcTarName: st.size},
		Count: st.files, Dirs: st.dirs, Bytes: st.bytes, MD5: st.md5,
	}
	if err := writeMeta(cdir, m); err != nil {
		return err
	}
	w.inputs.meta, w.inputs.dir = m, cdir
	return nil
}

func (w *SrcTree) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	m, cdir, err := w.inputs.load(env, w.cache)
	if err != nil {
		return Result{}, err
	}
	res := Result{Metrics: map[string]float64{}}
	if !strings.HasPrefix(m.Source, "Go ") {
		appendNote(&res, "%s", m.Source)
	}
	var goSteps []string
	step := func(metric string, ext func() (time.Duration, time.Duration, error), goImpl func() error) error {
		var wall, cpu time.Duration
		var err error
		if ext != nil {
			wall, cpu, err = ext()
		} else {
			goSteps = append(goSteps, strings.TrimSuffix(metric, "_s"))
			var sw stopwatch
			wall, err = sw.lap(goImpl)
			cpu = sw.cpu
		}
		res.Metrics[metric] = wall.Seconds()
		res.Wall += wall
		res.WorkloadCPU += cpu
		return err
	}
	tarball := filepath.Join(cdir, srcTarName)

	// untar
	var untarExt func() (time.Duration, time.Duration, error)
	if p := lookProgram("tar", w.noPrograms); p != "" {
		untarExt = shellCmd{dir: dir, script: `exec "$1" xf "$2"`, args: []string{p, tarball}}.runner(ctx)
	}
	if err := step("untar_s", untarExt, func() error { return untarGo(ctx, tarball, dir) }); err != nil {
		return Result{}, err
	}
	verifyHook("srctree.untarred", dir)

	// ls -lR, counting the entries it lists
	counts := &lineCounter{counts: map[byte]int{}}
	var lsExt func() (time.Duration, time.Duration, error)
	if p := lookProgram("ls", w.noPrograms); p != "" {
		// -A: Go's full src has hidden entries (embed's testdata/.hidden),
		// which plain -lR leaves out of the listing and so of the count.
		lsExt = shellCmd{dir: dir, script: `exec "$1" -lRA src`, args: []string{p}, stdout: counts}.runner(ctx)
	}
	if err := step("lsR_s", lsExt, func() error { return lsGo(ctx, filepath.Join(dir, "src"), counts) }); err != nil {
		return Result{}, err
	}
	if counts.counts['-'] != m.Count || counts.counts['d'] != m.Dirs-1 {
		return Result{}, fmt.Errorf("ls -lR src listed %d files and %d directories, the tarball has %d and %d: %w",
			counts.counts['-'], counts.counts['d'], m.Count, m.Dirs-1, errContent)
	}

	// md5 of every file, cold
	if !coldCaches(env) {
		// The files' own pages at least: md5 must read through the
		// filesystem to verify anything.
		if err := dropTreeCache(filepath.Join(dir, "src")); err != nil {
			return Result{}, err
		}
		appendNote(&res, "md5 warm: could not drop caches (only the files' own pages were dropped)")
	}
	var sums bytes.Buffer
	var md5Ext func() (time.Duration, time.Duration, error)
	find, xargs, md5sum := lookProgram("find", w.noPrograms), lookProgram("xargs", w.noPrograms), lookProgram("md5sum", w.noPrograms)
	if find != "" && xargs != "" && md5sum != "" {
		md5Ext = shellCmd{dir: dir, script: `"$1" src -type f -print0 | "$2" -0 "$3"`,
			args: []string{find, xargs, md5sum}, stdout: &sums}.runner(ctx)
	}
	if err := step("md5_s", md5Ext, func() error { return md5Go(ctx, dir, "src", &sums) }); err != nil {
		return Result{}, err
	}
	if err := checkMD5s(sums.Bytes(), m.MD5); err != nil {
		return Result{}, err
	}

	// rm -rf
	var rmExt func() (time.Duration, time.Duration, error)
	if p := lookProgram("rm", w.noPrograms); p != "" {
		rmExt = shellCmd{dir: dir, script: `exec "$1" -rf src`, args: []string{p}}.runner(ctx)
	}
	if err := step("rm_s", rmExt, func() error { return os.RemoveAll(filepath.Join(dir, "src")) }); err != nil {
		return Result{}, err
	}
	if err := checkDirEmpty(dir); err != nil {
		return Result{}, fmt.Errorf("after rm -rf: %w", err)
	}
	if len(goSteps) > 0 {
		appendNote(&res, "Go implementation of %s (programs not installed)", strings.Join(goSteps, ", "))
	}
	res.Bytes, res.Ops, res.Verified = 2*m.Bytes, int64(m.Count), true
	return res, nil
}

// runner returns c.run bound to ctx, for SrcTree's steps.
func (c shellCmd) runner(ctx context.Context) func() (time.Duration, time.Duration, error) {
	return func() (time.Duration, time.Duration, error) { return c.run(ctx) }
}

// untarGo extracts a tar of directories and regular files into dir, as
// tar xf does (modes and file times; not owners).
func untarGo(ctx context.Context, tarball, dir string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer f.Close()
	tr := tar.NewReader(bufio.NewReaderSize(f, 1<<20))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !filepath.IsLocal(name) {
			return fmt.Errorf("untar: unsafe name %q", hdr.Name)
		}
		p := filepath.Join(dir, filepath.FromSlash(name))
		mode := fs.FileMode(hdr.Mode).Perm()
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.Mkdir(p, mode|0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
		case tar.TypeReg:
			out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return err
			}
			if _, err := io.Copy(out, tr); err != nil {
				out.Close()
				return fmt.Errorf("untar %s: %w", name, err)
			}
			if err := out.Close(); err != nil {
				return err
			}
			if err := os.Chtimes(p, hdr.ModTime, hdr.ModTime); err != nil {
				return err
			}
		default:
			return fmt.Errorf("untar: %s: unexpected type %c", name, hdr.Typeflag)
		}
	}
}

// lsGo does what ls -lR does to a filesystem, an lstat of every entry,
// and counts regular files as '-' and directories as 'd' (root excluded).
func lsGo(ctx context.Context, root string, c *lineCounter) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if p == root {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		switch {
		case fi.IsDir():
			c.counts['d']++
		case fi.Mode().IsRegular():
			c.counts['-']++
		default:
			c.counts['?']++
		}
		return nil
	})
}

// md5Go writes md5sum's output for every regular file under dir/sub.
func md5Go(ctx context.Context, dir, sub string, out io.Writer) error {
	buf := make([]byte, 128<<10)
	return filepath.WalkDir(filepath.Join(dir, sub), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		h := md5.New()
		_, err = io.CopyBuffer(h, f, buf)
		f.Close()
		if err != nil {
			return fmt.Errorf("read %s: %w", p, err)
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(out, "%x  %s\n", h.Sum(nil), filepath.ToSlash(rel))
		return nil
	})
}

// checkMD5s compares md5sum output with the originals' digests.
func checkMD5s(out []byte, want map[string]string) error {
	seen := 0
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		escaped := strings.HasPrefix(line, `\`)
		line = strings.TrimPrefix(line, `\`)
		sum, name, ok := strings.Cut(line, "  ")
		if !ok || len(sum) != 32 {
			return fmt.Errorf("md5sum: unexpected line %q", line)
		}
		if escaped {
			name = strings.NewReplacer(`\\`, `\`, `\n`, "\n").Replace(name)
		}
		name = strings.TrimPrefix(name, "./")
		w, ok := want[name]
		if !ok {
			return fmt.Errorf("md5: %s: not in the tarball: %w", name, errContent)
		}
		if sum != w {
			return fmt.Errorf("md5: %s: %s, the original's is %s: %w", name, sum, w, errContent)
		}
		seen++
	}
	if seen != len(want) {
		got := map[string]bool{}
		for _, line := range strings.Split(string(out), "\n") {
			if _, name, ok := strings.Cut(line, "  "); ok {
				got[strings.TrimPrefix(name, "./")] = true
			}
		}
		for _, name := range sortedNames(want) {
			if !got[name] {
				return fmt.Errorf("md5: %s: missing (%d of %d files): %w", name, seen, len(want), errContent)
			}
		}
		return fmt.Errorf("md5: %d of %d files: %w", seen, len(want), errContent)
	}
	return nil
}

// dropTreeCache drops the cached pages of every regular file under root.
func dropTreeCache(root string) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		dropFileCache(f)
		return f.Close()
	})
}
