package main

// The shell-facing surface: completion scripts run in a real bash, man
// pages generated from the commands, --version from the build info, as a
// Linux user meets them.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// bashCompletionLib is where Debian's bash-completion package puts the
// functions (_get_comp_words_by_ref) that cobra's bash script relies on.
const bashCompletionLib = "/usr/share/bash-completion/bash_completion"

// TestCompletionBash sources 'twincrypt completion bash' in a real bash,
// checks that 'complete -p twincrypt' shows it registered, and runs the
// completion function as bash would on TAB: subcommands, a prefix, flags
// (including the recovery flags), and the completion command's shells.
func TestCompletionBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("skipping: bash is not installed")
	}
	if _, err := os.Stat(bashCompletionLib); err != nil {
		t.Skipf("skipping: %s is missing (Debian package bash-completion), which cobra's bash script needs", bashCompletionLib)
	}
	r := twincrypt(t, "", "completion", "bash")
	r.expectExit(t, 0, "completion bash")
	dir := tempDir(t)
	script := filepath.Join(dir, "twincrypt.bash")
	if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	// The script runs "twincrypt __complete ..." by the name typed: the
	// binary must be on PATH as twincrypt.
	if err := os.Symlink(binPath, filepath.Join(dir, "twincrypt")); err != nil {
		t.Fatal(err)
	}
	const driver = `
source "$LIB"
source "$SCRIPT"
complete -p twincrypt
# c LINE: complete LINE as TAB at its end would, print one candidate a line.
c() {
	COMP_LINE="$1"; COMP_POINT=${#COMP_LINE}
	read -ra COMP_WORDS <<<"$1"
	[[ "$1" == *" " ]] && COMP_WORDS+=("")
	COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
	COMPREPLY=()
	__start_twincrypt twincrypt
	echo "== $1"
	printf '%s\n' "${COMPREPLY[@]}"
}
c "twincrypt "
c "twincrypt pas"
c "twincrypt mount --master"
c "twincrypt completion "
`
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bash, "--norc", "--noprofile", "-c", driver)
	cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "LIB="+bashCompletionLib, "SCRIPT="+script)
	// Directories named like the completion commands in the working
	// directory must not turn them into the mount helper form
	// ('twincrypt LOWER MNT').
	cmd.Dir = dir
	for _, d := range []string{"completion", "__complete", "__completeNoDesc"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("bash: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	out := stdout.String()
	if !strings.Contains(out, "complete -o default -F __start_twincrypt twincrypt\n") {
		t.Errorf("complete -p twincrypt does not show the completion function:\n%s", out)
	}
	got := map[string][]string{}
	var cur string
	for _, line := range strings.Split(out, "\n") {
		if l, ok := strings.CutPrefix(line, "== "); ok {
			cur = l
			got[cur] = []string{}
		} else if cur != "" && line != "" {
			got[cur] = append(got[cur], line)
		}
	}
	want := map[string][]string{
		"twincrypt pas":            {"passwd"},
		"twincrypt mount --master": {"--masterkey", "--masterkey-file"},
		"twincrypt completion ":    {"bash", "fish", "powershell", "zsh"},
	}
	var subs []string
	root, _ := newRootCmd()
	for _, c := range root.Commands() {
		if c.IsAvailableCommand() {
			subs = append(subs, c.Name())
		}
	}
	subs = append(subs, "help")
	want["twincrypt "] = subs
	for line, w := range want {
		g := append([]string(nil), got[line]...)
		sort.Strings(g)
		sort.Strings(w)
		if strings.Join(g, " ") != strings.Join(w, " ") {
			t.Errorf("completing %q: %v, want %v", line, g, w)
		}
	}
	for _, hidden := range []string{manCmdName, "__complete"} {
		for _, c := range got["twincrypt "] {
			if c == hidden {
				t.Errorf("hidden command %s offered as a completion", hidden)
			}
		}
	}
}

// TestCompletionZshFish checks the other shells' scripts: generated, and
// valid syntax for the shell where it is installed.
func TestCompletionZshFish(t *testing.T) {
	for _, sh := range []struct{ name, marker string }{
		{"zsh", "#compdef twincrypt"},
		{"fish", "complete -c twincrypt"},
	} {
		r := twincrypt(t, "", "completion", sh.name)
		r.expectExit(t, 0, "completion "+sh.name)
		if !strings.Contains(r.stdout, sh.marker) {
			t.Errorf("completion %s lacks %q", sh.name, sh.marker)
		}
		bin, err := exec.LookPath(sh.name)
		if err != nil {
			t.Logf("%s not installed: syntax not checked", sh.name)
			continue
		}
		script := filepath.Join(tempDir(t), "twincrypt."+sh.name)
		if err := os.WriteFile(script, []byte(r.stdout), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(bin, "-n", script).CombinedOutput(); err != nil {
			t.Errorf("%s -n: %v\n%s", sh.name, err, out)
		}
	}
}

// manPageName is the file cobra/doc writes for c: the command path with
// dashes, section 1.
func manPageName(c *cobra.Command) string {
	return strings.ReplaceAll(c.CommandPath(), " ", "-") + ".1"
}

// TestManPages runs the generator behind 'make man' into a temporary
// directory and checks one page per command, each a man page of its
// command with the help text in it.
func TestManPages(t *testing.T) {
	dir := filepath.Join(tempDir(t), "man1")
	cmd := exec.Command(binPath, manCmdName, dir)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH=1800000000")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", manCmdName, err, out)
	}
	root, _ := newRootCmd()
	want := map[string]*cobra.Command{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		want[manPageName(c)] = c
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
				walk(sub)
			}
		}
	}
	walk(root)
	for _, must := range []string{"twincrypt.1", "twincrypt-init.1", "twincrypt-mount.1", "twincrypt-passwd.1", "twincrypt-blockdev-open.1", "twincrypt-completion-bash.1"} {
		if want[must] == nil {
			t.Errorf("the command tree has no %s", must)
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, e := range entries {
		got[e.Name()] = true
		if want[e.Name()] == nil {
			t.Errorf("unexpected page %s (a hidden command?)", e.Name())
		}
	}
	for name, c := range want {
		if !got[name] {
			t.Errorf("no man page %s for '%s'", name, c.CommandPath())
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		page := string(data)
		title := strings.ReplaceAll(c.CommandPath(), " ", "-")
		for _, s := range []string{
			`.TH "TWINCRYPT" "1" "Jan 2027"`,
			".SH NAME\n" + title + " - " + c.Short,
			".SH SYNOPSIS",
		} {
			if !strings.Contains(page, s) {
				t.Errorf("%s lacks %q", name, s)
			}
		}
	}
	rootPage, _ := os.ReadFile(filepath.Join(dir, "twincrypt.1"))
	status, _, ok := strings.Cut(string(rootPage), ".SH EXIT STATUS\n")
	if !ok || !strings.Contains(status, ".SH DESCRIPTION") {
		t.Errorf("twincrypt.1 has no EXIT STATUS section after its description")
	}
	for _, e := range exitCodeDoc {
		if !strings.Contains(string(rootPage), fmt.Sprintf(".TP\n.B %d\n", e.code)) {
			t.Errorf("twincrypt.1 lacks exit code %d", e.code)
		}
	}
	mount, _ := os.ReadFile(filepath.Join(dir, "twincrypt-mount.1"))
	if !bytes.Contains(mount, []byte(`\fB--masterkey-file\fP`)) {
		t.Errorf("twincrypt-mount.1 does not document --masterkey-file")
	}
	if man, err := exec.LookPath("man"); err == nil {
		out, err := exec.Command(man, "-l", "-P", "cat", filepath.Join(dir, "twincrypt-init.1")).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "twincrypt-init - Create an encrypted volume") {
			t.Errorf("man -l twincrypt-init.1: %v\n%s", err, out)
		}
	}
}

func TestFormatVersion(t *testing.T) {
	s := func(kv ...string) []debug.BuildSetting {
		var out []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			out = append(out, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return out
	}
	tests := []struct {
		settings []debug.BuildSetting
		want     string
	}{
		{s("vcs.revision", "abc123", "vcs.time", "2026-12-01T15:00:00Z", "vcs.modified", "false"),
			"v1.2.3 (revision abc123, 2026-12-01T15:00:00Z) go1.26.8"},
		{s("vcs.revision", "abc123", "vcs.modified", "true"),
			"v1.2.3 (revision abc123, with uncommitted changes) go1.26.8"},
		{s("-buildvcs", "false"), "v1.2.3 (revision unknown: built without VCS information) go1.26.8"},
	}
	for _, tt := range tests {
		if got := formatVersion("v1.2.3", tt.settings, "go1.26.8"); got != tt.want {
			t.Errorf("formatVersion(%v) = %q, want %q", tt.settings, got, tt.want)
		}
	}
}

// TestVersionFromCheckout copies this source tree (the files git tracks
// or would track, as they are now) into a fresh repository, commits it,
// builds twincrypt there with VCS stamping on (as 'go build' and 'go
// install' do in a checkout by default; git worktrees, where .git is a
// file, get no stamp from Go) and checks that --version names that
// commit, unmodified, and the module version Go stamped.
func TestVersionFromCheckout(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("skipping: git is not installed")
	}
	topOut, err := exec.Command(git, "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Skipf("skipping: not in a git checkout (%v)", err)
	}
	top := strings.TrimSpace(string(topOut))
	list, err := exec.Command(git, "-C", top, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(tempDir(t), "checkout")
	for _, rel := range strings.Split(string(list), "\x00") {
		if rel == "" {
			continue
		}
		data, err := os.ReadFile(filepath.Join(top, rel))
		if err != nil {
			continue // deleted in the working tree, or not a file
		}
		dst := filepath.Join(clone, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitIn := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(git, append([]string{"-C", clone, "-c", "user.name=test", "-c", "user.email=test@example.org"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	gitIn("init", "-q")
	gitIn("add", "-A")
	gitIn("commit", "-q", "-m", "snapshot")
	rev := gitIn("rev-parse", "HEAD")
	bin := filepath.Join(tempDir(t), "twincrypt")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/twincrypt")
	build.Dir = clone
	build.Env = append(os.Environ(), "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	line := strings.TrimSpace(string(out))
	wantRev := "revision " + rev + ", "
	if !strings.HasPrefix(line, "twincrypt v") || !strings.Contains(line, wantRev) ||
		strings.Contains(line, "uncommitted") || !strings.HasSuffix(line, " "+runtime.Version()) {
		t.Errorf("--version of a build from a clean clone: %q; want the module version, %q, no uncommitted changes and %s", line, wantRev, runtime.Version())
	}
	// The same in the root help's -v: cobra's --version and -v agree.
	if short, _ := exec.Command(bin, "-v").Output(); string(short) != string(out) {
		t.Errorf("-v says %q, --version %q", short, out)
	}
}
