package main

import (
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/fs"
	"github.com/twincrypt/twincrypt/integration/bench"
)

// flagValues are the flags that take one of a fixed set of values, with
// those values, for the shell's completion: without them the shell offers
// file names. list says the flag takes a comma-separated list.
var flagValues = []struct {
	cmd, flag string
	list      bool
	values    func() []string
}{
	{"init", "cipher", false, config.Ciphers},
	{"init", "key-bytes", false, fixed("16", "32", "64")},
	{"init", "kdf", false, fixed(kdf.Argon2id, kdf.Scrypt, kdf.PBKDF2)},
	{"init", "format-version", false, fixed("1", "2")},
	{"passwd", "kdf", false, fixed(kdf.Argon2id, kdf.Scrypt, kdf.PBKDF2)},
	{"mount", "transport", false, fixed(fs.TransportAuto, fs.TransportDev, fs.TransportUring)},
	{"mount", "readdir", false, fixed(fs.ReaddirPlus, fs.ReaddirAuto, fs.ReaddirPlain)},
	{"mount", "options", true, fixed("allow_other", "ro", "debug", "nonempty", "noexec", "noatime", "relatime", "strictatime", "nodiratime", "lazytime", "suid", "dev")},
	{"bench", "size", false, fixed(string(bench.SizeTiny), string(bench.SizeSmall), string(bench.SizeDefault), string(bench.SizeLarge))},
	{"bench", "targets", true, benchTargetNames},
	{"bench", "workloads", true, benchWorkloadNames},
	{"bench", "scale-shapes", true, fixed("flat", "tree")},
	{"bench", "scale-ops", true, fixed("ls-f", "ls-l", "ls-l-warm", "find", "du")},
	{"speed", "cores", false, fixed("1", "all", "both")},
	{"speed", "clock", false, fixed("wall", "cpu")},
	{"speed", "sector-size", false, sectorSizes},
	{"blockdev format", "kdf", false, fixed("argon2id", "argon2i", "pbkdf2")},
	{"blockdev format", "sector-size", false, sectorSizes},
	{"blockdev format", "key-bytes", false, fixed("32", "64")},
	{"blockdev open", "sector-size", false, sectorSizes},
}

func fixed(values ...string) func() []string {
	return func() []string { return values }
}

func sectorSizes() []string {
	var out []string
	for s := 512; s <= 4096; s *= 2 {
		out = append(out, strconv.Itoa(s))
	}
	return out
}

func benchTargetNames() []string {
	names := []string{"dmcrypt", "peers"}
	for _, t := range bench.SelectableTargets(bench.TargetOptions{}) {
		names = append(names, t.Name())
	}
	return names
}

func benchWorkloadNames() []string {
	var names []string
	for _, w := range bench.Workloads() {
		names = append(names, w.Name())
	}
	return names
}

// registerFlagValues gives every flag of flagValues that root has its
// completion. A flag another change renamed or removed is skipped here;
// TestFlagValueCompletion notices.
func registerFlagValues(root *cobra.Command) {
	for _, fv := range flagValues {
		cmd, _, err := root.Find(strings.Fields(fv.cmd))
		if err != nil || cmd.Flags().Lookup(fv.flag) == nil {
			continue
		}
		values, list := fv.values, fv.list
		_ = cmd.RegisterFlagCompletionFunc(fv.flag, func(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if !list {
				return values(), cobra.ShellCompDirectiveNoFileComp
			}
			// A comma list: complete its last item, keeping the
			// ones before.
			done := ""
			if i := strings.LastIndex(toComplete, ","); i >= 0 {
				done = toComplete[:i+1]
			}
			var out []string
			for _, v := range values() {
				out = append(out, done+v)
			}
			return out, cobra.ShellCompDirectiveNoFileComp | cobra.ShellCompDirectiveNoSpace
		})
	}
}
