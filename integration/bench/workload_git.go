package bench

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Git is version control on a source tree, the work a developer's
// checkout sees: clone a repository of srctree's files (Go's src/net,
// src/{net,crypto}, src, src) through git's pack protocol, so that the
// target receives a pack, indexes it and checks the tree out; a git status
// with the index settled (every file's lstat, every directory listed);
// append a line to every tenth file and commit; check the previous commit
// out (those files rewritten); git gc (every object read, a new pack
// written). The repository is built once in the cache, packed.
//
// Verified: the tree checked out last is the original, file for file
// (MD5s read cold), git status finds nothing to report, and git fsck
// --full finds every object whole. git is needed: there is no stand-in
// for it (the run is skipped where it is not installed).
type Git struct {
	inputs cachedInputs
}

func (*Git) Name() string { return "git" }

func (*Git) Describe() string {
	return "git on a source tree: clone (pack protocol), status, commit of edits, checkout, gc"
}

func (w *Git) cache(env *Env) (string, error) {
	return needCache(env, "git-"+string(sizeOrSmall(env.Size)))
}

const (
	gitRepoName = "repo.git"
	gitWork     = "w" // the clone, in the run's directory
)

// gitEnv makes every git the workload runs independent of the machine's
// and the user's configuration, with fixed identities and dates (the same
// commits, byte for byte, on every target), no automatic gc, and any
// owner accepted (the cache may be another user's).
var gitEnv = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
	"GIT_AUTHOR_NAME=bench", "GIT_AUTHOR_EMAIL=bench@twincrypt.invalid",
	"GIT_COMMITTER_NAME=bench", "GIT_COMMITTER_EMAIL=bench@twincrypt.invalid",
	"GIT_AUTHOR_DATE=2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE=2026-01-01T00:00:00Z",
	"GIT_CONFIG_COUNT=3", "GIT_CONFIG_KEY_0=gc.auto", "GIT_CONFIG_VALUE_0=0",
	"GIT_CONFIG_KEY_1=safe.directory", "GIT_CONFIG_VALUE_1=*",
	"GIT_CONFIG_KEY_2=maintenance.auto", "GIT_CONFIG_VALUE_2=false"}

// gitCmd is a shell script run with gitEnv, git as "$1".
func gitCmd(dir, script string, args ...string) shellCmd {
	return shellCmd{dir: dir, script: script, args: args, env: gitEnv}
}

func needGit() (string, error) {
	if p := lookProgram("git", false); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("%w: git not installed", ErrSkipped)
}

func (w *Git) Prepare(ctx context.Context, env *Env) error {
	git, err := needGit()
	if err != nil {
		return err
	}
	cdir, err := w.cache(env)
	if err != nil {
		return err
	}
	version, err := programVersion(ctx, git, gitEnv)
	if err != nil {
		return err
	}
	subs := srcTreeSubdirs.pick(env.Size)
	param := "src/" + strings.Join(subs, " src/")
	if m, err := readMeta(cdir); err == nil && m.Param == param && m.Source == version && len(m.MD5) == m.Count && checkMeta(cdir, m) {
		w.inputs.meta, w.inputs.dir = m, cdir
		return nil
	}
	os.Remove(filepath.Join(cdir, metaName))
	for _, n := range []string{gitRepoName, "work", srcTarName} {
		if err := os.RemoveAll(filepath.Join(cdir, n)); err != nil {
			return err
		}
	}
	files, _, err := sourceTree(subs)
	if err != nil {
		return err
	}
	tarball := filepath.Join(cdir, srcTarName)
	st, err := writeTar(ctx, tarball, files, 0, true)
	if err != nil {
		return fmt.Errorf("build the tree: %w", err)
	}
	work := filepath.Join(cdir, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return err
	}
	if err := untarGo(ctx, tarball, work); err != nil {
		return err
	}
	// One commit of the tree (every file: -f, because the vendored
	// packages of Go's full src carry .gitignore files of their own), then
	// a bare clone of it, fully packed, as a server holds a repository.
	if _, _, err := gitCmd(cdir, `"$1" -C work init -q && "$1" -C work add -A -f && "$1" -C work commit -q -m "source tree" && `+
		`"$1" clone -q --bare work `+gitRepoName+` && "$1" -C `+gitRepoName+` repack -adq`, git).run(ctx); err != nil {
		return fmt.Errorf("build the repository: %w", err)
	}
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.Remove(tarball); err != nil {
		return err
	}
	packs, err := filepath.Glob(filepath.Join(cdir, gitRepoName, "objects", "pack", "*.pack"))
	if err != nil || len(packs) != 1 {
		return fmt.Errorf("the repository in %s has %d packs, want 1 (%v)", cdir, len(packs), err)
	}
	head := filepath.Join(gitRepoName, "HEAD")
	headSum, headSize, err := sha256File(filepath.Join(cdir, head))
	if err != nil {
		return err
	}
	packSum, packSize, err := sha256File(packs[0])
	if err != nil {
		return err
	}
	packRel, _ := filepath.Rel(cdir, packs[0])
	m := &cacheMeta{
		Param: param, Source: version,
		Files: map[string]string{head: headSum, packRel: packSum}, Sizes: map[string]int64{head: headSize, "pack": packSize},
		Count: st.files, Dirs: st.dirs, Bytes: st.bytes, MD5: st.md5,
	}
	if err := writeMeta(cdir, m); err != nil {
		return err
	}
	w.inputs.meta, w.inputs.dir = m, cdir
	return nil
}

func (w *Git) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	git, err := needGit()
	if err != nil {
		return Result{}, err
	}
	m, cdir, err := w.inputs.load(env, w.cache)
	if err != nil {
		return Result{}, err
	}
	res := Result{Metrics: map[string]float64{}}
	step := func(metric string, c shellCmd) error {
		wall, cpu, err := c.run(ctx)
		res.Metrics[metric] = wall.Seconds()
		res.Wall += wall
		res.WorkloadCPU += cpu
		return err
	}
	work := filepath.Join(dir, gitWork)
	status := func() (string, error) {
		var out bytes.Buffer
		c := gitCmd(work, `exec "$1" status --porcelain`, git)
		c.stdout = &out
		_, _, err := c.run(ctx)
		return out.String(), err
	}

	// clone: --no-local, so that the objects come as a pack over git's
	// own protocol (upload-pack to index-pack), as from a server, not
	// copied or hard-linked.
	if err := step("clone_s", gitCmd(dir, `exec "$1" clone -q --no-local "$2" `+gitWork, git, filepath.Join(cdir, gitRepoName))); err != nil {
		return Result{}, err
	}
	// The first status after a clone reads the files again whose times
	// are not older than the index's (git's "racy" entries) and writes
	// the index anew: not timed. It runs a second after the clone, so
	// that the index it writes is newer than every file and the timed
	// status sees a settled checkout (without the pause it was 0.03 or
	// 0.2 s on one target from repeat to repeat, as the clock fell).
	time.Sleep(1100 * time.Millisecond)
	if _, err := status(); err != nil {
		return Result{}, err
	}
	var out bytes.Buffer
	c := gitCmd(work, `exec "$1" status --porcelain`, git)
	c.stdout = &out
	if err := step("status_s", c); err != nil {
		return Result{}, err
	}
	if s := strings.TrimSpace(out.String()); s != "" {
		return Result{}, fmt.Errorf("git status of a fresh clone: %s: %w", firstLine(s), errContent)
	}
	// Edit every tenth tracked file (the same ones on every target) and
	// commit.
	if err := step("commit_s", gitCmd(work, `"$1" ls-files -z | tr '\0' '\n' | awk 'NR % 10 == 1' | `+
		`while IFS= read -r f; do printf '// edited by the bench\n' >> "$f" || exit 1; done && exec "$1" commit -q -a -m edit`, git)); err != nil {
		return Result{}, err
	}
	// Back to the original tree: the edited files are rewritten.
	if err := step("checkout_s", gitCmd(work, `exec "$1" checkout -q HEAD~1`, git)); err != nil {
		return Result{}, err
	}
	if err := step("gc_s", gitCmd(work, `exec "$1" gc -q`, git)); err != nil {
		return Result{}, err
	}
	verifyHook("git.done", dir)

	// Verify: the tree is the original, read cold ...
	if !coldCaches(env) {
		if err := dropTreeCache(work); err != nil {
			return Result{}, err
		}
		appendNote(&res, "verified warm: could not drop caches (only the files' own pages were dropped)")
	}
	var sums bytes.Buffer
	if err := (shellCmd{dir: work, script: `find src -type f -print0 | xargs -0 md5sum`, stdout: &sums}).runQuiet(ctx); err != nil {
		return Result{}, err
	}
	if err := checkMD5s(sums.Bytes(), m.MD5); err != nil {
		return Result{}, err
	}
	// ... git agrees, and every object is whole.
	s, err := status()
	if err != nil {
		return Result{}, err
	}
	if s = strings.TrimSpace(s); s != "" {
		return Result{}, fmt.Errorf("git status after checkout HEAD~1: %s: %w", firstLine(s), errContent)
	}
	if _, _, err := gitCmd(work, `exec "$1" fsck --full --no-dangling --no-progress`, git).run(ctx); err != nil {
		return Result{}, fmt.Errorf("verify: %w: %w", err, errContent)
	}
	if err := removeAndCheck(dir, gitWork); err != nil {
		return Result{}, err
	}
	appendNote(&res, "%s", m.Source)
	res.Bytes, res.Ops, res.Verified = m.Bytes+m.Sizes["pack"], int64(m.Count), true
	return res, nil
}

// firstLine is s up to its first newline.
func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// runQuiet runs c for its effect and output, untimed.
func (c shellCmd) runQuiet(ctx context.Context) error {
	_, _, err := c.run(ctx)
	return err
}
