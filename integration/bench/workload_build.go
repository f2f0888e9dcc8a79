package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// buildUnits is the number of C files the build workload compiles.
var buildUnits = scale[int]{tiny: 24, small: 96, dflt: 384, large: 1536}

// buildGroups is the number of group headers; unit i includes g(i mod
// buildGroups).h besides common.h and two system headers.
const buildGroups = 8

// Build is a compiler's job: make -j (one job per CPU) of a generated C
// project on the target, as a developer's edit-compile cycle sees it. The
// sources are put on the target untimed; then a full build (every unit
// compiled with its dependency file, an archive, a link), a make with
// nothing to do (make's stat of every source, header, object and
// dependency file), and a rebuild after one group header changed (an
// eighth of the units, the archive and the link again).
//
// gcc and ar are deterministic: Prepare builds the project once in the
// cache, and every object, the archive and the program made on the target
// must have that reference build's SHA-256 (read cold), and the program's
// output must be the sum the generator computed. make and a C compiler are
// needed (the run is skipped where they are not installed).
type Build struct {
	inputs cachedInputs
}

func (*Build) Name() string { return "build" }

func (*Build) Describe() string {
	return "make -j of a generated C project: full build, nothing to do, rebuild after a header changed"
}

func (w *Build) cache(env *Env) (string, error) {
	return needCache(env, "build-"+string(sizeOrSmall(env.Size)))
}

const (
	buildSrcDir  = "project" // in the cache and in the run's directory
	buildRefDir  = "reference"
	buildProgram = "prog"
	buildArchive = "libunits.a"
)

// buildMakefile builds obj/uNNNN.o from src/uNNNN.c with dependency files
// (-MMD -MP: a header's change rebuilds what includes it), the archive and
// the program.
const buildMakefile = `CC = cc
CFLAGS = -O2 -Iinclude -MMD -MP
SRCS = $(sort $(wildcard src/*.c))
OBJS = $(patsubst src/%.c,obj/%.o,$(SRCS))

prog: obj/main.o libunits.a
	$(CC) -o $@ obj/main.o libunits.a

libunits.a: $(OBJS)
	rm -f $@
	ar rcD $@ $(OBJS)

obj/%.o: src/%.c | obj
	$(CC) $(CFLAGS) -c $< -o $@

obj/main.o: main.c | obj
	$(CC) $(CFLAGS) -c main.c -o $@

obj:
	mkdir -p obj

-include $(OBJS:.o=.d) obj/main.d
`

// buildUnit is the C source of unit i and the value its function returns
// for x, computed as the C code does (unsigned 32-bit arithmetic).
func buildUnit(i int) (src string, value func(x uint32) uint32) {
	var tab [16]uint32
	seed := uint32(i)*2654435761 + 12345
	for k := range tab {
		seed = seed*1664525 + 1013904223
		tab[k] = seed >> 8
	}
	g := i % buildGroups
	bias := uint32(g*7 + 3)
	var b strings.Builder
	fmt.Fprintf(&b, "#include <stdio.h>\n#include <string.h>\n#include \"common.h\"\n#include \"g%d.h\"\n\n", g)
	fmt.Fprintf(&b, "static const unsigned tab[16] = {")
	for k, v := range tab {
		if k > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%du", v)
	}
	b.WriteString("};\n\n")
	fmt.Fprintf(&b, "unsigned u%04d(unsigned x)\n{\n\tunsigned s = x;\n\tchar buf[16];\n", i)
	b.WriteString("\tfor (int k = 0; k < 16; k++)\n\t\ts = MIX(s, tab[k]);\n")
	b.WriteString("\tsnprintf(buf, sizeof buf, \"%u\", s);\n")
	fmt.Fprintf(&b, "\treturn s + (unsigned)strlen(buf) + G%d_BIAS;\n}\n", g)
	value = func(x uint32) uint32 {
		s := x
		for _, t := range tab {
			s = s*31 + (t ^ (s >> 7)) // MIX, as common.h defines it
		}
		return s + uint32(len(strconv.FormatUint(uint64(s), 10))) + bias
	}
	return b.String(), value
}

// buildProject returns the project's files (path → content) for n units
// and the line the program prints.
func buildProject(n int) (map[string]string, string) {
	files := map[string]string{
		"Makefile":         buildMakefile,
		"include/common.h": "#ifndef COMMON_H\n#define COMMON_H\n#define MIX(s, t) ((s) * 31u + ((t) ^ ((s) >> 7)))\n#endif\n",
	}
	for g := 0; g < buildGroups; g++ {
		files[fmt.Sprintf("include/g%d.h", g)] = fmt.Sprintf("#ifndef G%d_H\n#define G%d_H\n#define G%d_BIAS %du\n#endif\n", g, g, g, g*7+3)
	}
	var main strings.Builder
	main.WriteString("#include <stdio.h>\n\n")
	var sum uint32
	for i := 0; i < n; i++ {
		src, value := buildUnit(i)
		files[fmt.Sprintf("src/u%04d.c", i)] = src
		fmt.Fprintf(&main, "unsigned u%04d(unsigned);\n", i)
		sum += value(uint32(i))
	}
	main.WriteString("\nint main(void)\n{\n\tunsigned sum = 0;\n")
	for i := 0; i < n; i++ {
		fmt.Fprintf(&main, "\tsum += u%04d(%du);\n", i, i)
	}
	main.WriteString("\tprintf(\"%u\\n\", sum);\n\treturn 0;\n}\n")
	files["main.c"] = main.String()
	return files, fmt.Sprintf("%d\n", sum)
}

// writeProject writes files under dir.
func writeProject(dir string, files map[string]string) error {
	for _, rel := range sortedNames(files) {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(files[rel]), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func needBuildTools() (makeProg, cc string, err error) {
	makeProg, cc = lookProgram("make", false), lookProgram("cc", false)
	var missing []string
	for name, p := range map[string]string{"make": makeProg, "cc": cc, "ar": lookProgram("ar", false)} {
		if p == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return "", "", fmt.Errorf("%w: %s not installed", ErrSkipped, strings.Join(missing, ", "))
	}
	return makeProg, cc, nil
}

// makeJobs is make's -j: one job per CPU.
func makeJobs() string { return "-j" + strconv.Itoa(runtime.NumCPU()) }

// buildOutputs lists the files a build makes whose content is checked:
// every object, the archive and the program (relative to the project).
func buildOutputs(n int) []string {
	out := []string{"obj/main.o", buildArchive, buildProgram}
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("obj/u%04d.o", i))
	}
	return out
}

func (w *Build) Prepare(ctx context.Context, env *Env) error {
	makeProg, cc, err := needBuildTools()
	if err != nil {
		return err
	}
	cdir, err := w.cache(env)
	if err != nil {
		return err
	}
	version, err := programVersion(ctx, cc, nil)
	if err != nil {
		return err
	}
	n := buildUnits.pick(env.Size)
	param := fmt.Sprintf("%d units", n)
	if m, err := readMeta(cdir); err == nil && m.Param == param && m.Source == version && checkMeta(cdir, m) {
		w.inputs.meta, w.inputs.dir = m, cdir
		return nil
	}
	os.Remove(filepath.Join(cdir, metaName))
	for _, d := range []string{buildSrcDir, buildRefDir} {
		if err := os.RemoveAll(filepath.Join(cdir, d)); err != nil {
			return err
		}
	}
	files, want := buildProject(n)
	if err := writeProject(filepath.Join(cdir, buildSrcDir), files); err != nil {
		return err
	}
	// The reference build, from a copy of the sources.
	ref := filepath.Join(cdir, buildRefDir)
	if err := writeProject(ref, files); err != nil {
		return err
	}
	var out bytes.Buffer
	if _, _, err := (shellCmd{dir: ref, script: `"$1" -s ` + makeJobs() + ` && exec ./` + buildProgram,
		args: []string{makeProg}, stdout: &out}).run(ctx); err != nil {
		return fmt.Errorf("reference build: %w", err)
	}
	if out.String() != want {
		return fmt.Errorf("reference build: %s printed %q, the generator computed %q", buildProgram, out.String(), want)
	}
	m := &cacheMeta{Param: param, Source: version, Files: map[string]string{}, Sizes: map[string]int64{}, Count: n}
	for rel, content := range files {
		m.Bytes += int64(len(content))
		sum := sha256.Sum256([]byte(content))
		m.Files[filepath.Join(buildSrcDir, rel)] = hex.EncodeToString(sum[:])
		m.Sizes[filepath.Join(buildSrcDir, rel)] = int64(len(content))
	}
	for _, rel := range buildOutputs(n) {
		sum, size, err := sha256File(filepath.Join(ref, rel))
		if err != nil {
			return err
		}
		m.Files[filepath.Join(buildRefDir, rel)], m.Sizes[filepath.Join(buildRefDir, rel)] = sum, size
	}
	m.MD5 = map[string]string{"output": want}
	if err := writeMeta(cdir, m); err != nil {
		return err
	}
	w.inputs.meta, w.inputs.dir = m, cdir
	return nil
}

func (w *Build) Run(ctx context.Context, dir string, env *Env) (Result, error) {
	defer lockThread()()
	makeProg, _, err := needBuildTools()
	if err != nil {
		return Result{}, err
	}
	m, cdir, err := w.inputs.load(env, w.cache)
	if err != nil {
		return Result{}, err
	}
	n := m.Count
	proj := filepath.Join(dir, buildSrcDir)
	// The sources onto the target, untimed (srctree times an untar).
	files := map[string]string{}
	for key := range m.Files {
		if rel, ok := strings.CutPrefix(key, buildSrcDir+string(filepath.Separator)); ok {
			b, err := os.ReadFile(filepath.Join(cdir, key))
			if err != nil {
				return Result{}, err
			}
			files[rel] = string(b)
		}
	}
	if err := writeProject(proj, files); err != nil {
		return Result{}, err
	}
	res := Result{Metrics: map[string]float64{}}
	step := func(metric, script string) error {
		wall, cpu, err := (shellCmd{dir: proj, script: script, args: []string{makeProg}}).run(ctx)
		res.Metrics[metric] = wall.Seconds()
		res.Wall += wall
		res.WorkloadCPU += cpu
		return err
	}
	jobs := makeJobs()
	if err := step("build_s", `exec "$1" -s `+jobs); err != nil {
		return Result{}, err
	}
	if err := step("noop_s", `exec "$1" -s `+jobs); err != nil {
		return Result{}, err
	}
	// A header an eighth of the units include changes: make must find
	// them by their dependency files. Its mtime is set a second ahead, so
	// that it is newer than every object whatever the clock's grain.
	if err := step("rebuild_s", `printf '/* changed */\n' >> include/g0.h && touch -d '+1 second' include/g0.h && exec "$1" -s `+jobs); err != nil {
		return Result{}, err
	}
	verifyHook("build.built", dir)

	// Verify, cold: every output is the reference build's, byte for byte
	// (the header's comment changes no object), and the program prints
	// the generator's sum.
	if !coldCaches(env) {
		if err := dropTreeCache(proj); err != nil {
			return Result{}, err
		}
		appendNote(&res, "verified warm: could not drop caches (only the files' own pages were dropped)")
	}
	var outBytes int64
	for _, rel := range buildOutputs(n) {
		got, size, err := sha256File(filepath.Join(proj, rel))
		if err != nil {
			return Result{}, fmt.Errorf("verify: %w", err)
		}
		key := filepath.Join(buildRefDir, rel)
		if got != m.Files[key] || size != m.Sizes[key] {
			return Result{}, fmt.Errorf("verify: %s: %d bytes, sha256 %s; the reference build's: %d bytes, %s: %w",
				rel, size, got, m.Sizes[key], m.Files[key], errContent)
		}
		outBytes += size
	}
	var out bytes.Buffer
	if err := (shellCmd{dir: proj, script: `exec ./` + buildProgram, stdout: &out}).runQuiet(ctx); err != nil {
		return Result{}, fmt.Errorf("verify: run %s: %w", buildProgram, err)
	}
	if out.String() != m.MD5["output"] {
		return Result{}, fmt.Errorf("verify: %s printed %q, want %q: %w", buildProgram, out.String(), m.MD5["output"], errContent)
	}
	if err := removeAndCheck(dir, buildSrcDir); err != nil {
		return Result{}, err
	}
	appendNote(&res, "%s, make %s", m.Source, jobs)
	res.Bytes, res.Ops, res.Verified = m.Bytes+outBytes, int64(n), true
	return res, nil
}
