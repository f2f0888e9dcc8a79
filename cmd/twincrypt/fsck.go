package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/fs/fsck"
)

// The outcomes of fsck that are not success, for exitcodes.go.
var (
	errFsckProblems = errors.New("fsck found problems")
	errFsckRepaired = errors.New("fsck repaired problems")
)

type fsckFlags struct {
	passFlags
	repair bool
	quick  bool
	asJSON bool
}

func newFsckCmd() *cobra.Command {
	var f fsckFlags
	cmd := &cobra.Command{
		Use:   "fsck [flags] LOWER",
		Short: "Check an encrypted volume offline, and repair what can be repaired",
		Long: `Check the encrypted volume in LOWER without mounting it: the config
(it must load and unlock), every directory's IV file, every name (long
names: the sidecar is there and matches), every regular file (its size, its
header, its cipher, and that every stored extent can be read and is not
partly zeros, the mark of a write torn by a crash), every symlink target
(long ones: the sidecar in twincrypt.links is there, and every sidecar
there belongs to a symlink) and every user.* xattr value (both are
authenticated with AES-GCM).

XTS and CBC do not authenticate file content: a modified extent decrypts to
garbage that no check can detect. fsck finds what the format makes
detectable.

The passphrase is read as for mount: --passfile, else the --extpass
program's output, else the terminal, else one line from stdin. fsck never
follows a symlink in LOWER.

--repair moves entries that the mount hides or cannot read into
/lost+found of the mounted view (created on first use), keeping their lower
content; they are named by their plaintext name, or by their lower name
where the plaintext is unknown. Orphaned long-name and long-symlink
sidecars and leftovers of an interrupted config write are deleted; an empty directory with a missing
IV gets a new one. A missing IV of a non-empty directory and an xattr that
does not open cannot be repaired and are only reported. Damaged entries
already in /lost+found are counted, not reported again. Do not run
--repair on a mounted volume (fsck refuses).

Exit status: 0 clean, 16 problems found (with --repair: some remain), 17
problems found and all repaired, 10/11 config missing or invalid, 12 wrong
passphrase.`,
		Example: `  twincrypt fsck ~/vault.enc
  twincrypt fsck --repair --passfile ~/.vault-pass ~/vault.enc
  twincrypt fsck --json ~/vault.enc | jq '.problems[] | select(.kind=="torn-size")'`,
		Args: exactArgs(1, "LOWER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runFsck(cmd, f, args[0])
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	f.register(fl, "read the passphrase from the first line of `FILE`")
	f.registerAllowWeak(fl)
	fl.BoolVar(&f.repair, "repair", false, "move unreadable entries to /lost+found, delete orphaned sidecars")
	fl.BoolVar(&f.quick, "quick", false, "do not read file extents (sizes, headers, names, links and xattrs only)")
	fl.BoolVar(&f.asJSON, "json", false, "print the report as JSON")
	return cmd
}

func runFsck(cmd *cobra.Command, f fsckFlags, lowerArg string) error {
	lower, err := realDir(lowerArg, "LOWER")
	if err != nil {
		return err
	}
	cfg, err := config.Load(lower)
	if err != nil {
		return fmt.Errorf("load config of %s: %w", lower, err)
	}
	if err := f.checkConfigKDF(lower, cfg); err != nil {
		return err
	}
	mnt := mountedAt(lower)
	if f.repair && mnt != "" {
		return fmt.Errorf("fsck --repair: %s is mounted at %s; unmount it first", lower, mnt)
	}
	src := f.source(cmd.ErrOrStderr())
	pass, err := src.read(false)
	if err != nil {
		return err
	}
	defer wipe(pass)
	master, err := cfg.Unlock(pass)
	if err != nil {
		return fmt.Errorf("unlock %s: %w", lower, err)
	}
	defer wipe(master)
	wipe(pass)

	rep, err := fsck.Check(lower, cfg, master, fsck.Options{Repair: f.repair, Quick: f.quick})
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	if f.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		err = enc.Encode(struct {
			*fsck.Report
			MountedAt string `json:"mounted_at,omitempty"`
		}{rep, mnt})
		if err != nil {
			return err
		}
	} else {
		printFsckReport(out, rep, mnt)
	}
	return fsckResult(lower, rep)
}

// fsckResult turns the report into the command's error: nil when clean,
// else a classified error whose exit code says whether anything remains.
func fsckResult(lower string, rep *fsck.Report) error {
	switch {
	case rep.Clean():
		return nil
	case rep.Unrepaired() == 0:
		return &classifiedError{class: errFsckRepaired,
			err: fmt.Errorf("fsck %s: %s found and repaired", lower, plural(rep.Found, "problem"))}
	}
	msg := fmt.Sprintf("fsck %s: %s found", lower, plural(rep.Found, "problem"))
	if rep.Repair {
		msg += fmt.Sprintf(", %d repaired, %d not", rep.Repaired, rep.Unrepaired())
	} else if repairable(rep) > 0 {
		msg += fmt.Sprintf("; --repair would repair %d", repairable(rep))
	}
	return &classifiedError{class: errFsckProblems, err: errors.New(msg)}
}

func repairable(rep *fsck.Report) int {
	n := 0
	for _, p := range rep.Problems {
		if !p.Quarantined && p.Action != "" {
			n++
		}
	}
	return n
}

// plural renders a count with its noun: "1 file", "2 files", "3 entries".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	if base, ok := strings.CutSuffix(what, "y"); ok {
		return fmt.Sprintf("%d %sies", n, base)
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// printFsckReport prints one block per problem and a summary.
func printFsckReport(w io.Writer, rep *fsck.Report, mnt string) {
	names := "encrypted names"
	if rep.PlaintextNames {
		names = "plaintext names"
	}
	fmt.Fprintf(w, "Checking %s: %s, %d-bit key, %s\n", rep.Lower, rep.Cipher, rep.KeyBytes*8, names)
	if mnt != "" {
		fmt.Fprintf(w, "Note: the volume is mounted at %s; writes in progress may show as problems.\n", mnt)
	}
	for _, p := range rep.Problems {
		if p.Quarantined {
			continue
		}
		fmt.Fprintf(w, "\n%s: %s\n", p.Kind, filepath.Join(rep.Lower, p.Lower))
		switch {
		case p.Plain != "":
			fmt.Fprintf(w, "  plaintext: %s\n", p.Plain)
		case p.Kind != fsck.ConfigLeftover && p.Kind != fsck.SidecarOrphaned:
			// Metadata has no plaintext path; an entry below an
			// undecryptable name or a lost IV has an unknown one.
			fmt.Fprintln(w, "  plaintext: (unknown)")
		}
		if p.Xattr != "" {
			fmt.Fprintf(w, "  xattr: %s\n", p.Xattr)
		}
		fmt.Fprintf(w, "  %s\n", p.Detail)
		switch {
		case p.Repaired:
			fmt.Fprintf(w, "  repaired: %s\n", p.Note)
		case p.Note != "":
			fmt.Fprintf(w, "  %s\n", p.Note)
		case p.Action != "" && !rep.Repair:
			fmt.Fprintf(w, "  --repair: %s\n", actionText(p.Action))
		}
	}
	fmt.Fprintf(w, "\nChecked %s, %s (%s of plaintext), %s, %d other",
		plural(int(rep.Dirs), "directory"), plural(int(rep.Files), "file"), humanSize(rep.PlainBytes),
		plural(int(rep.Symlinks), "symlink"), rep.Other)
	if rep.Quick {
		fmt.Fprint(w, " (--quick: extents not read)")
	}
	fmt.Fprintln(w, ".")
	var sum []string
	switch {
	case rep.Clean():
		sum = append(sum, "No problems found.")
	case rep.Repair:
		sum = append(sum, fmt.Sprintf("%s: %d repaired, %d not repaired.", plural(rep.Found, "problem"), rep.Repaired, rep.Unrepaired()))
	default:
		sum = append(sum, fmt.Sprintf("%s, %d of them repairable with --repair.", plural(rep.Found, "problem"), repairable(rep)))
	}
	if rep.Quarantined > 0 {
		sum = append(sum, fmt.Sprintf("%s with damaged content in /%s.", plural(rep.Quarantined, "entry"), fsck.LostFound))
	}
	fmt.Fprintln(w, strings.Join(sum, " "))
}

func actionText(a fsck.Action) string {
	switch a {
	case fsck.MoveAside:
		return "would move it to /" + fsck.LostFound
	case fsck.Delete:
		return "would delete it"
	case fsck.NewDirIV:
		return "would write a new directory IV (the directory is empty)"
	case fsck.ZeroTrailer:
		return "would store the trailer as zeros"
	}
	return string(a)
}

// mountedAt returns where lower is mounted by twincrypt ("" if nowhere):
// the mount's source is its lower directory.
func mountedAt(lower string) string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	mounts, err := readMountInfo(f)
	if err != nil {
		return ""
	}
	for _, m := range mounts {
		if m.source == lower && strings.HasPrefix(m.fsType, "fuse") {
			return m.mountPoint
		}
	}
	return ""
}
