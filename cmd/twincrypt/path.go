package main

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/names"
	"github.com/twincrypt/twincrypt/fs/fsck"
)

type pathFlags struct {
	passFlags
	decrypt bool
}

func newPathCmd() *cobra.Command {
	var f pathFlags
	cmd := &cobra.Command{
		Use:   "path [flags] LOWER PATH...",
		Short: "Map plaintext paths of a volume to the lower files that hold them, and back (asks for the passphrase)",
		Long: `Print, for each plaintext PATH of the volume in LOWER (from the volume's
root: what follows the mount point), the path relative to LOWER of the
encrypted entry that stores it; with --decrypt, for each PATH relative to
LOWER, the plaintext path. Nothing needs to be mounted and nothing is
written: the directory IVs and long-name sidecars on the way are read,
never following a symlink (gocryptfs-xray's -encrypt-paths and
-decrypt-paths).

What it is for: restoring one file or directory from a backup of LOWER
(its lower path is what the backup holds), or naming the plaintext of a
lower path that another tool reported. An entry with a long name (176
bytes or more) is stored under a hashed name with its full encrypted name
in a sidecar beside it, of the same name plus "` + names.LongSuffix + `": restore both; a note on
stderr says so.

Names are encrypted with the volume's key, so path asks for the
passphrase, read as for mount: --passfile, else the --extpass program's
output, else the terminal (after a line that says why), else one line from
stdin.

Exit status: 0 when every PATH was mapped (and, without --decrypt, exists
in LOWER); 1 when one was not (each is reported on stderr, and a PATH that
maps but is not there is still printed); 10/11 config missing or invalid,
12 wrong passphrase.`,
		Example: `  twincrypt path ~/vault.enc /taxes/2025.pdf
  twincrypt path --decrypt ~/vault.enc 3oFd2Rk.../Qx9aa...
  # which file of a backup of LOWER holds taxes/2025.pdf: ask the backup's
  # own copy (its directory IVs name the files in it), e.g. to restore just
  # that file with the backup tool
  twincrypt path /mnt/backup/vault.enc taxes/2025.pdf`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageErrorf("path takes LOWER and at least one PATH")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPath(cmd, f, args[0], args[1:])
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.BoolVarP(&f.decrypt, "decrypt", "d", false, "PATHs are lower paths (relative to LOWER): print their plaintext paths")
	f.register(fl, "read the passphrase from the first line of `FILE`")
	f.registerAllowWeak(fl)
	return cmd
}

func runPath(cmd *cobra.Command, f pathFlags, lowerArg string, paths []string) error {
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
	src := f.source(cmd.ErrOrStderr())
	if !f.given() && term.IsTerminal(int(src.stdin.Fd())) {
		// A prompt out of the blue from a command that only prints
		// paths: say what the passphrase is for.
		fmt.Fprintf(cmd.ErrOrStderr(), "Names in %s are encrypted: the passphrase unlocks the key that maps them (nothing is written).\n", lower)
	}
	pass, err := src.read(false)
	if err != nil {
		return err
	}
	master, err := cfg.Unlock(pass)
	wipe(pass)
	if err != nil {
		return fmt.Errorf("unlock %s: %w", lower, err)
	}
	p, err := fsck.OpenPaths(lower, cfg, master)
	wipe(master)
	if err != nil {
		return err
	}
	defer p.Close()

	out, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	failed := 0
	for _, arg := range paths {
		if f.decrypt {
			rel := arg
			if filepath.IsAbs(rel) {
				// An absolute path must lie in LOWER.
				if r, err := filepath.Rel(lower, rel); err == nil && r != ".." && !strings.HasPrefix(r, "../") {
					rel = r
				} else {
					fmt.Fprintf(stderr, "twincrypt: %s: not inside LOWER %s\n", arg, lower)
					failed++
					continue
				}
			}
			plain, err := p.Decrypt(rel)
			if err != nil {
				fmt.Fprintf(stderr, "twincrypt: %s: %v\n", arg, err)
				failed++
				continue
			}
			fmt.Fprintln(out, plain)
			continue
		}
		rel, exists, long, err := p.Encrypt(arg)
		if err != nil {
			fmt.Fprintf(stderr, "twincrypt: %s: %v\n", arg, err)
			failed++
			continue
		}
		fmt.Fprintln(out, rel)
		if !exists {
			fmt.Fprintf(stderr, "twincrypt: %s: no such entry in the volume (printed: where it would be stored)\n", arg)
			failed++
		} else if long {
			fmt.Fprintf(stderr, "twincrypt: note: %s has a long name: its sidecar %s%s is part of it\n", arg, rel, names.LongSuffix)
		}
	}
	if failed > 0 {
		return fmt.Errorf("path: %s of %d not mapped", plural(failed, "path"), len(paths))
	}
	return nil
}
