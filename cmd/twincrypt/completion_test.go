package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// TestFlagValueCompletion asks the completion command, as the shells'
// scripts do, for the values of every flag that takes one of a fixed set:
// the values come back and no file names are offered; a flag that takes a
// path still gets file names.
func TestFlagValueCompletion(t *testing.T) {
	complete := func(args ...string) (values []string, directive string) {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{cobra.ShellCompRequestCmd}, args...), &stdout, &stderr); code != 0 {
			t.Fatalf("__complete %v: exit %d: %s", args, code, stderr.String())
		}
		lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
		return lines[:len(lines)-1], lines[len(lines)-1]
	}
	for _, fv := range flagValues {
		args := append(strings.Fields(fv.cmd), "--"+fv.flag, "")
		got, directive := complete(args...)
		want := fv.values()
		if len(want) == 0 {
			t.Errorf("%s --%s: no values to offer", fv.cmd, fv.flag)
		}
		for _, v := range want {
			if !contains(got, v) {
				t.Errorf("%s --%s: completion %q lacks %q", fv.cmd, fv.flag, got, v)
			}
		}
		d := fmt.Sprintf(":%d", cobra.ShellCompDirectiveNoFileComp)
		if fv.list {
			d = fmt.Sprintf(":%d", cobra.ShellCompDirectiveNoFileComp|cobra.ShellCompDirectiveNoSpace)
		}
		if directive != d {
			t.Errorf("%s --%s: directive %s, want %s (no file names)", fv.cmd, fv.flag, directive, d)
		}
		if fv.list {
			got, _ := complete(append(strings.Fields(fv.cmd), "--"+fv.flag, want[0]+",")...)
			if !contains(got, want[0]+","+want[len(want)-1]) {
				t.Errorf("%s --%s %s,: completion %q does not continue the list", fv.cmd, fv.flag, want[0], got)
			}
		}
	}
	if _, directive := complete("mount", "--passfile", ""); directive != fmt.Sprintf(":%d", cobra.ShellCompDirectiveDefault) {
		t.Errorf("mount --passfile: directive %s, want file names", directive)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
