package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// The gzip and srctree workloads need a tree of real source files: Go's
// own src (11.5k files, 116 MB: the size of the gocryptfs benchmark's
// kernel tree, a tenth of its file count) is on every machine that built
// twincrypt. Where it is not, a synthetic tree of the same shape stands in
// and the Note says so.

// srcFile is one entry of a source tree.
type srcFile struct {
	rel   string // path in the tar, with /
	dir   bool
	perm  fs.FileMode
	size  int64
	mtime time.Time
	open  func() (io.ReadCloser, error)
}

// goSrcDir returns Go's src directory, or "".
func goSrcDir() string {
	isDir := func(d string) bool {
		fi, err := os.Stat(d)
		return err == nil && fi.IsDir()
	}
	// The go command on PATH, else the one under GOROOT (if set), says
	// where its tree is; a go binary under DIR/bin/go without a working
	// "go env" still has its tree in DIR. (runtime.GOROOT is deprecated:
	// it is where this binary was built, maybe on another machine.)
	var bins []string
	if b, err := exec.LookPath("go"); err == nil {
		bins = append(bins, b)
	}
	if r := os.Getenv("GOROOT"); r != "" {
		bins = append(bins, filepath.Join(r, "bin", "go"))
	}
	for _, goBin := range bins {
		cmd := exec.Command(goBin, "env", "GOROOT")
		cmd.Dir = "/"
		if out, err := cmd.Output(); err == nil {
			r := strings.TrimSpace(string(out))
			if r != "" && isDir(filepath.Join(r, "src", "net")) {
				return filepath.Join(r, "src")
			}
		}
		if real, err := filepath.EvalSymlinks(goBin); err == nil {
			r := filepath.Dir(filepath.Dir(real))
			if isDir(filepath.Join(r, "src", "net")) {
				return filepath.Join(r, "src")
			}
		}
	}
	return ""
}

// sourceTree lists the source files under Go's src/<sub> for each sub
// (all of src when subs is empty), named src/... in the list; dirs come
// before their contents. origin describes where they came from.
func sourceTree(subs []string) (files []srcFile, origin string, err error) {
	root := goSrcDir()
	if root == "" {
		n := 11478
		switch len(subs) {
		case 1:
			n = 415
		case 2:
			n = 1583
		}
		return syntheticTree(n), "synthetic tree (Go's src not found)", nil
	}
	files = append(files, srcFile{rel: "src", dir: true, perm: 0o755, mtime: time.Unix(1767225600, 0)})
	walkRoots := []string{root}
	if len(subs) > 0 {
		walkRoots = nil
		for _, s := range subs {
			walkRoots = append(walkRoots, filepath.Join(root, s))
		}
	}
	for _, wr := range walkRoots {
		err := filepath.WalkDir(wr, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if rel == "." {
				return nil
			}
			info, err := d.Info()
			if err != nil {
				return err
			}
			f := srcFile{rel: path.Join("src", filepath.ToSlash(rel)), perm: info.Mode().Perm(), mtime: info.ModTime()}
			switch {
			case d.IsDir():
				f.dir = true
			case info.Mode().IsRegular():
				f.size = info.Size()
				f.open = func() (io.ReadCloser, error) { return os.Open(p) }
			default:
				return nil // symlinks, devices: not in Go's tree, not worth a case
			}
			files = append(files, f)
			return nil
		})
		if err != nil {
			return nil, "", fmt.Errorf("list %s: %w", wr, err)
		}
	}
	return files, fmt.Sprintf("Go %s src", runtime.Version()), nil
}

// syntheticTree makes n text files in a tree shaped like a source tree:
// about 12 files per directory, two levels deep, sizes spread like source
// files (a few hundred bytes to a few hundred KB, most near 8 KB).
func syntheticTree(n int) []srcFile {
	mtime := time.Unix(1767225600, 0)
	files := []srcFile{{rel: "src", dir: true, perm: 0o755, mtime: mtime}}
	rng := rand.New(rand.NewPCG(7, 11))
	lastDir := ""
	for i := 0; i < n; i++ {
		d := fmt.Sprintf("src/pkg%03d", i/144)
		if sub := (i / 12) % 12; sub > 0 {
			d = fmt.Sprintf("%s/sub%02d", d, sub)
		}
		if d != lastDir { // sub 0 (the package directory itself) comes first
			files = append(files, srcFile{rel: d, dir: true, perm: 0o755, mtime: mtime})
			lastDir = d
		}
		size := int64(200 + min(rng.ExpFloat64()*8000, 400000))
		seed := uint64(i)
		files = append(files, srcFile{
			rel: fmt.Sprintf("%s/file%04d.go", d, i), perm: 0o644, size: size, mtime: mtime,
			open: func() (io.ReadCloser, error) {
				return io.NopCloser(bytes.NewReader(syntheticText(seed, size))), nil
			},
		})
	}
	return files
}

var syntheticWords = strings.Fields(`func return if else for range var const type struct interface
	map chan go defer select case switch default package import err nil true false int string
	byte error len cap make new append copy buf n i j k ctx dir path file data size offset`)

// syntheticText is size bytes of Go-like text, the same for the same seed.
func syntheticText(seed uint64, size int64) []byte {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	b := make([]byte, 0, size+16)
	col := 0
	for int64(len(b)) < size {
		w := syntheticWords[rng.IntN(len(syntheticWords))]
		b = append(b, w...)
		col += len(w) + 1
		if col > 60 || rng.IntN(9) == 0 {
			b = append(b, '\n')
			col = 0
			if rng.IntN(3) == 0 {
				b = append(b, '\t')
			}
		} else {
			b = append(b, ' ')
		}
	}
	return b[:size]
}

// tarStats is what writeTar reports about the tar it wrote.
type tarStats struct {
	sha256 string
	size   int64
	files  int
	dirs   int
	bytes  int64             // file contents
	md5    map[string]string // file path → MD5 (hex), when asked
}

// writeTar writes a tar of the files to dst. Each pass adds every file
// again under passN/ (when passes > 1) until the tar reaches minSize
// bytes; passes == 1 writes the list once. Owners are root, times are
// whole seconds, so that tar on the target replays chown, chmod and
// utimens as it does for any archive.
func writeTar(ctx context.Context, dst string, files []srcFile, minSize int64, withMD5 bool) (*tarStats, error) {
	out, err := os.Create(dst)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	sum := sha256.New()
	cw := &byteCounter{w: io.MultiWriter(out, sum)}
	tw := tar.NewWriter(cw)
	st := &tarStats{}
	if withMD5 {
		st.md5 = map[string]string{}
	}
	multi := minSize > 0
	for pass := 0; pass == 0 || (multi && cw.n < minSize); pass++ {
		prefix := ""
		if multi {
			prefix = fmt.Sprintf("pass%d/", pass)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: prefix, Mode: 0o755,
				ModTime: time.Unix(1767225600, 0), Uname: "root", Gname: "root"}); err != nil {
				return nil, err
			}
			st.dirs++
		}
		for _, f := range files {
			if multi && cw.n >= minSize {
				break
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			hdr := &tar.Header{Name: prefix + f.rel, Mode: int64(f.perm), ModTime: f.mtime.Truncate(time.Second),
				Uname: "root", Gname: "root"}
			if f.dir {
				hdr.Typeflag, hdr.Name = tar.TypeDir, hdr.Name+"/"
				if err := tw.WriteHeader(hdr); err != nil {
					return nil, err
				}
				st.dirs++
				continue
			}
			hdr.Typeflag, hdr.Size = tar.TypeReg, f.size
			if err := tw.WriteHeader(hdr); err != nil {
				return nil, err
			}
			r, err := f.open()
			if err != nil {
				return nil, err
			}
			h := md5.New()
			n, err := io.Copy(io.MultiWriter(tw, h), r)
			r.Close()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f.rel, err)
			}
			if n != f.size {
				return nil, fmt.Errorf("%s: changed while being archived (%d bytes, listed %d)", f.rel, n, f.size)
			}
			if withMD5 {
				st.md5[hdr.Name] = hex.EncodeToString(h.Sum(nil))
			}
			st.files++
			st.bytes += n
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := out.Close(); err != nil {
		return nil, err
	}
	st.sha256, st.size = hex.EncodeToString(sum.Sum(nil)), cw.n
	return st, nil
}

type byteCounter struct {
	w io.Writer
	n int64
}

func (c *byteCounter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
