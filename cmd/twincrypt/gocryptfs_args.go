package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// gocryptfs (Go's flag package) spells long options with one dash:
// "-passfile FILE", "-init DIR". pflag reads "-passfile" as the shorthands
// p, a, s, ... and fails on the first, so a gocryptfs user's habit gets
// "unknown shorthand flag: 'p'". These tables take the habits we can
// honour: the flags we share, under gocryptfs's names, and the action
// flags that are subcommands here.

// gocryptfsFlags maps a gocryptfs option to the long flag of ours that
// does the same (the names that differ; a single-dash spelling of any of
// our own long flags is taken as well).
var gocryptfsFlags = map[string]string{
	"sharedstorage":  "shared-storage",
	"plaintextnames": "plaintext-names",
	"scryptn":        "scrypt-logn",
}

// gocryptfsActions maps gocryptfs's action flags to our subcommands.
var gocryptfsActions = map[string]string{
	"init":   "init",
	"passwd": "passwd",
	"fsck":   "fsck",
	"info":   "info",
	"speed":  "speed",
}

// singleDashLong is "-name" or "-name=value" with a name of two or more
// characters: either a cluster of shorthands or a long option with one
// dash.
var singleDashLong = regexp.MustCompile(`^-([a-z][a-z0-9_-]+)(=.*)?$`)

// gocryptfsArgs rewrites the single-dash long options of args that name a
// flag of the command they are given to (ours or gocryptfs's name of it)
// into our "--name" spelling, and a gocryptfs action flag given where the
// subcommand belongs ("-init DIR") into the subcommand. Anything else is
// left for cobra: an argument after "--", the value of a flag, and a
// cluster of shorthands that names no long flag ("-bq").
func gocryptfsArgs(root *cobra.Command, args []string) []string {
	out := append([]string(nil), args...)
	if len(out) > 0 {
		if c, _, err := root.Find(out[:1]); err != nil || c == root {
			// No subcommand first: a gocryptfs action flag anywhere
			// before "--" names it.
			for i, a := range out {
				if a == "--" {
					break
				}
				if m := singleDashLong.FindStringSubmatch(a); m != nil && m[2] == "" && gocryptfsActions[m[1]] != "" {
					out = append([]string{gocryptfsActions[m[1]]}, append(out[:i:i], out[i+1:]...)...)
					break
				}
			}
		}
	}
	cmd, _, err := root.Find(out)
	if err != nil {
		return out
	}
	// cobra adds these at Execute; a lookup now must see them.
	root.InitDefaultVersionFlag()
	cmd.InitDefaultHelpFlag()
	fl := cmd.Flags()
	takesValue := false
	for i, a := range out {
		if a == "--" {
			break
		}
		if takesValue {
			takesValue = false
			continue
		}
		if strings.HasPrefix(a, "--") {
			name, _, hasValue := strings.Cut(a[2:], "=")
			if f := fl.Lookup(name); f != nil && !hasValue && f.NoOptDefVal == "" {
				takesValue = true
			}
			continue
		}
		m := singleDashLong.FindStringSubmatch(a)
		if m == nil {
			if len(a) == 2 && a[0] == '-' {
				if f := fl.ShorthandLookup(a[1:]); f != nil && f.NoOptDefVal == "" {
					takesValue = true
				}
			}
			continue
		}
		name := longFlagName(fl, m[1])
		if name == "" {
			continue
		}
		out[i] = "--" + name + m[2]
		if f := fl.Lookup(name); m[2] == "" && f.NoOptDefVal == "" {
			takesValue = true
		}
	}
	return out
}

// longFlagName is our long flag that a single-dash name means on fl, or "".
func longFlagName(fl *pflag.FlagSet, name string) string {
	if ours, ok := gocryptfsFlags[name]; ok {
		name = ours
	}
	if fl.Lookup(name) != nil {
		return name
	}
	return ""
}

// singleDashHint adds, to pflag's error for an unknown shorthand inside a
// single-dash word ("unknown shorthand flag: 'f' in -fg"), what a
// gocryptfs user needs to know: long flags take two dashes here.
func singleDashHint(err error) error {
	msg := err.Error()
	_, word, ok := strings.Cut(msg, "' in -")
	if !ok || !strings.HasPrefix(msg, "unknown shorthand flag: ") || len(word) < 2 {
		return err
	}
	return fmt.Errorf("unknown flag -%s (long flags take two dashes, as --passfile; -%s is no flag of this command)", word, word)
}
