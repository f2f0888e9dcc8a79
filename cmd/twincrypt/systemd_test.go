package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// systemdDocs is where the documented units live.
var systemdDocs = filepath.Join("..", "..", "docs", "systemd")

// TestSystemdUnitsVerify: systemd-analyze finds nothing to complain about
// in the documented units (unknown keys, bad values, a mount unit named
// after another path).
func TestSystemdUnitsVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("skipping: systemd-analyze missing (Debian package systemd)")
	}
	// An instance of the template, as systemd would load it.
	inst := filepath.Join(tempDir(t), "twincrypt@vault.service")
	tmpl, err := os.ReadFile(filepath.Join(systemdDocs, "twincrypt@.service"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inst, tmpl, 0o644); err != nil {
		t.Fatal(err)
	}
	units := []string{filepath.Join(systemdDocs, "srv-vault.mount"), filepath.Join(systemdDocs, "srv-vault.automount"), inst}
	out, err := exec.Command(sa, append([]string{"verify", "--man=no"}, units...)...).CombinedOutput()
	if err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// TestSystemdServiceCommands runs the ExecStart and ExecStop lines of
// twincrypt@.service as systemd would (instance "vault", the variables of
// the EnvironmentFile in the environment), once with PASSFILE and once
// without, where the passphrase comes from systemd-ask-password (a stub
// here that prints it: without a running systemd the real one cannot ask):
// the volume is mounted and readable after ExecStart, gone after ExecStop.
func TestSystemdServiceCommands(t *testing.T) {
	requireFUSE(t)
	unit, err := os.ReadFile(filepath.Join(systemdDocs, "twincrypt@.service"))
	if err != nil {
		t.Fatal(err)
	}
	shellOf := func(key string) string {
		for _, l := range strings.Split(string(unit), "\n") {
			if v, ok := strings.CutPrefix(l, key+"=/bin/sh -c '"); ok {
				return strings.ReplaceAll(strings.TrimSuffix(v, "'"), "%i", "vault")
			}
		}
		t.Fatalf("no %s=/bin/sh -c '...' line in twincrypt@.service", key)
		return ""
	}
	start, stop := shellOf("ExecStart"), shellOf("ExecStop")
	const pass = "service pass"
	pf := writePassfile(t, pass)
	lower := initVolume(t, pf)
	stub := tempDir(t)
	script := "#!/bin/sh\necho \"$*\" > \"$ASKED\"\necho '" + pass + "'\n"
	if err := os.WriteFile(filepath.Join(stub, "systemd-ask-password"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binPath, filepath.Join(stub, "twincrypt")); err != nil {
		t.Fatal(err)
	}
	for _, passfile := range []string{pf, ""} {
		mnt := newMountpoint(t)
		unmountOnCleanup(t, mnt)
		asked := filepath.Join(tempDir(t), "asked")
		env := append(os.Environ(), "PATH="+stub+":/usr/sbin:/usr/bin:/sbin:/bin", "LOWER="+lower, "MNT="+mnt,
			"PASSFILE="+passfile, "OPTIONS=-o ro", "ASKED="+asked)
		run := func(what, s string) {
			t.Helper()
			cmd := exec.Command("/bin/sh", "-c", s)
			cmd.Env, cmd.Dir = env, "/"
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s (PASSFILE=%q): %v\n%s", what, passfile, err, out)
			}
		}
		run("ExecStart", start)
		if !isMounted(t, mnt) {
			t.Fatalf("PASSFILE=%q: %s not mounted after ExecStart", passfile, mnt)
		}
		if err := os.WriteFile(filepath.Join(mnt, "f"), nil, 0o600); err == nil {
			t.Errorf("OPTIONS=-o ro not applied: a write succeeded")
		}
		promptedFor, _ := os.ReadFile(asked)
		if passfile == "" && !strings.Contains(string(promptedFor), "twincrypt volume vault") {
			t.Errorf("systemd-ask-password was called with %q", promptedFor)
		}
		if passfile != "" && len(promptedFor) > 0 {
			t.Errorf("asked for a passphrase although PASSFILE is set: %q", promptedFor)
		}
		run("ExecStop", stop)
		if isMounted(t, mnt) {
			t.Errorf("%s still mounted after ExecStop", mnt)
		}
		waitDaemonGone(t, mnt)
	}
}
