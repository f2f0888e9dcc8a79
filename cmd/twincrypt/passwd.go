package main

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
)

type passwdFlags struct {
	passFlags
	newPassfile string
	quiet       bool
	// mk replaces the current passphrase with the master key (forgotten
	// passphrase).
	mk masterKeyFlags
	// kdf holds the KDF flags, named and checked as init's are.
	kdf initFlags
}

// passwdKDFFlags are the flags that choose new KDF parameters.
var passwdKDFFlags = []string{"kdf", "kdf-time", "kdf-memory", "kdf-threads", "scrypt-logn", "pbkdf2-iter"}

func newPasswdCmd() *cobra.Command {
	var f passwdFlags
	cmd := &cobra.Command{
		Use:   "passwd [flags] LOWER",
		Short: "Change the passphrase of an encrypted volume",
		Long: `Change the passphrase that unlocks the volume in LOWER.

The current passphrase is read from --passfile, else from the --extpass
program's output, else from the terminal without echo, else as one line from stdin. The new one is read from
--new-passfile, else from the terminal (asked twice), else as the next line
of stdin. A wrong current passphrase exits with code 12 and changes nothing.

The master key stays the same: only its wrapping in ` + config.FileName + `
changes, with a fresh salt. The file is replaced atomically; the old one is
kept as ` + config.BackupName + ` until the new one is safely in place. Anyone
who kept a copy of the old config and knows the old passphrase can still
unlock the volume.

Forgotten passphrase: --masterkey-file FILE or --masterkey (typed or pasted
on the terminal without echo, else read from stdin) takes the master key
that init printed instead of the current passphrase. The key is checked
against the data (file content, sealed symlink targets and xattr values,
names) before anything is written; a key the data refutes exits with code
12 and changes nothing.

By default the key derivation function and its costs stay as they are
(costs below the minimums, which only --allow-weak-kdf opens, are raised to
the defaults). --kdf chooses another function with its default costs; the
cost flags (as for init) change the costs of the chosen or the current
function. With the master key, nothing is taken from the config's KDF, which
nothing authenticates then: the new wrapping uses the defaults (argon2id)
changed by the flags, as init does.

The config is written as format version 3, whose settings are sealed under
the master key (a version 1 aes-cbc volume stays version 1). With the master
key, the config's settings (cipher, key size, plaintext names, KDF) are
checked against that seal, and a difference is refused with what was
changed; a version 1 or 2 config, which has no seal, must show its
settings in the data: a cipher other than aes-xts with 64-byte keys by
file content, and plaintext names cannot be shown at all (recover such a
volume with 'init --masterkey-file --plaintext-names').`,
		Example: `  twincrypt passwd ~/vault.enc
  twincrypt passwd --passfile old.txt --new-passfile new.txt ~/vault.enc
  twincrypt passwd --kdf argon2id --kdf-memory 262144 ~/vault.enc

  # Passphrase forgotten: the master key saved at init sets a new one
  twincrypt passwd --masterkey-file ~/vault.masterkey ~/vault.enc`,
		Args: refuseKeyInArgs(exactArgs(1, "LOWER")),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runPasswd(cmd, f, args[0])
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	f.register(fl, "read the current passphrase from the first line of `FILE`")
	fl.StringVar(&f.newPassfile, "new-passfile", "", "read the new passphrase from the first line of `FILE`")
	fl.StringVar(&f.kdf.kdf, "kdf", "", "new key derivation: argon2id, scrypt or pbkdf2 (default: keep the current one)")
	fl.Uint32Var(&f.kdf.kdfTime, "kdf-time", 0, "argon2id passes")
	fl.Uint32Var(&f.kdf.kdfMemoryKiB, "kdf-memory", 0, "argon2id memory in KiB")
	fl.Uint8Var(&f.kdf.kdfThreads, "kdf-threads", 0, "argon2id parallelism")
	fl.IntVar(&f.kdf.scryptLogN, "scrypt-logn", 0, "scrypt cost: N = 2^logn")
	fl.IntVar(&f.kdf.pbkdf2Iter, "pbkdf2-iter", 0, "PBKDF2 iterations")
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing on success")
	f.registerAllowWeak(fl)
	f.mk.register(fl)
	return cmd
}

func runPasswd(cmd *cobra.Command, f passwdFlags, lowerArg string) error {
	if err := f.mk.check(f.given()); err != nil {
		return err
	}
	lower, err := realDir(lowerArg, "LOWER")
	if err != nil {
		return err
	}
	cfg, err := config.Load(lower)
	if err != nil {
		switch {
		case f.mk.given() && errors.Is(err, config.ErrMissing):
			return fmt.Errorf("load config of %s: %w; with the master key, 'twincrypt init --masterkey-file FILE' writes a new one", lower, err)
		case f.mk.given() && (errors.Is(err, config.ErrCorrupt) || errors.Is(err, config.ErrUnsupportedVersion)):
			return fmt.Errorf("load config of %s: %w; move it away, then 'twincrypt init --masterkey-file FILE' writes a new one", lower, err)
		}
		return fmt.Errorf("load config of %s: %w", lower, err)
	}
	// The current KDF is the config's only where the passphrase will
	// authenticate it; with the master key it is the default, as for init.
	cur := cfg.KDF
	if f.mk.given() {
		if cur, err = kdf.Default(kdf.Argon2id); err != nil {
			return err
		}
	}
	// Bad flags are refused before anything is asked.
	params, raised, err := passwdKDF(cur, f.kdf, cmd.Flags().Changed, f.allowWeakKDF)
	if err != nil {
		return err
	}
	if !f.mk.given() {
		if err := f.checkConfigKDF(lower, cfg); err != nil {
			return err
		}
	}
	oldVersion := cfg.Version

	stderr := cmd.ErrOrStderr()
	onTerminal := term.IsTerminal(int(os.Stdin.Fd()))
	var master []byte
	if f.mk.given() {
		// The wrapped key cannot be opened: the config's seal (version 3)
		// or the data vouches for the key and the settings before the
		// key is wrapped under the new passphrase.
		lk, err := f.mk.read(os.Stdin, stderr)
		if err != nil {
			return err
		}
		defer lk.Destroy()
		master = lk.Bytes()
		checked, err := checkRecoveryConfig(lower, cfg, master, false)
		if err != nil {
			return fmt.Errorf("passwd %s: %w; nothing was changed", lower, err)
		}
		if !f.quiet {
			fmt.Fprintf(stderr, "%s: %s\n", lower, checked)
		}
	} else {
		src := f.source(stderr)
		if !src.given() && onTerminal {
			fmt.Fprintf(stderr, "Current passphrase of %s\n", lower)
		}
		oldPass, err := src.read(false)
		if err != nil {
			return err
		}
		// Unlock before asking for the new passphrase: a typo in the old one
		// should not cost typing the new one twice. This is the check
		// ChangePassphrase does; Rewrap below is its second half.
		master, err = cfg.Unlock(oldPass)
		wipe(oldPass)
		if err != nil {
			return fmt.Errorf("unlock %s: %w", lower, err)
		}
		defer wipe(master)
	}

	var newPass []byte
	switch {
	case f.newPassfile != "":
		newPass, err = readPassfile(f.newPassfile)
	case onTerminal:
		fmt.Fprintln(stderr, "New passphrase")
		newPass, err = readTerminal(int(os.Stdin.Fd()), stderr, true)
	default:
		newPass, err = readPassLine(os.Stdin)
		if err != nil {
			err = fmt.Errorf("read the new passphrase from stdin: %w", err)
		}
	}
	if err != nil {
		return err
	}
	defer wipe(newPass)

	if err := cfg.Rewrap(newPass, master, params); err != nil {
		if errors.Is(err, kdf.ErrParams) {
			return &classifiedError{class: errUsage, err: fmt.Errorf("passwd %s: %w", lower, err)}
		}
		return fmt.Errorf("passwd %s: %w", lower, err)
	}
	if err := cfg.Save(lower); err != nil {
		return fmt.Errorf("passwd %s: %w", lower, err)
	}
	if !f.quiet {
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "Changed the passphrase of %s (kdf %s)\n", lower, kdfSummary(cfg.KDF))
		if raised {
			fmt.Fprintln(out, "The KDF was below the minimums: it now has the default costs.")
		}
		if cfg.Version != oldVersion {
			fmt.Fprintf(out, "Config format version %d -> %d: the settings are now sealed under the master key (twincrypt binaries from before 2026-12-06 no longer open this volume)\n", oldVersion, cfg.Version)
		}
	}
	return nil
}

// passwdKDF returns the KDF parameters for the new wrapping (the salt is
// left empty: Rewrap draws a fresh one). Without KDF flags they are the
// current ones, or, when those are below the minimums, the defaults of the
// same function (raised says so). --kdf naming another function starts
// from its defaults, as init does; cost flags change the costs of the
// chosen or current function and leave its other costs as they are; the
// result must meet the minimums unless allowWeak.
func passwdKDF(cur kdf.Params, f initFlags, changed func(string) bool, allowWeak bool) (p kdf.Params, raised bool, err error) {
	if !slices.ContainsFunc(passwdKDFFlags, changed) {
		p = cur
		if p.CheckMinimum() != nil {
			if p, err = kdf.Default(cur.Algorithm); err != nil {
				return kdf.Params{}, false, err
			}
			raised = true
		}
		p.Salt = nil
		return p, raised, nil
	}
	p, err = passwdKDFFlagged(cur, f, changed)
	if err != nil {
		return kdf.Params{}, false, err
	}
	if err := (passFlags{allowWeakKDF: allowWeak}).checkNewKDF(withSalt(p)); err != nil {
		return kdf.Params{}, false, err
	}
	return p, false, nil
}

// withSalt gives p a placeholder salt, so that CheckMinimum, which
// validates first, can judge parameters whose salt Rewrap draws later.
func withSalt(p kdf.Params) kdf.Params {
	p.Salt = make([]byte, kdf.SaltSize)
	return p
}

// passwdKDFFlagged is passwdKDF when KDF flags were given.
func passwdKDFFlagged(cur kdf.Params, f initFlags, changed func(string) bool) (kdf.Params, error) {
	if !changed("kdf") {
		f.kdf = cur.Algorithm
	}
	if f.kdf != cur.Algorithm {
		return kdfParamsFromFlags(f, changed)
	}
	// Same function: the costs not given on the command line stay.
	if !changed("kdf-time") {
		f.kdfTime = cur.Time
	}
	if !changed("kdf-memory") {
		f.kdfMemoryKiB = cur.MemoryKiB
	}
	if !changed("kdf-threads") {
		f.kdfThreads = cur.Threads
	}
	if !changed("scrypt-logn") {
		f.scryptLogN = cur.LogN
	}
	if !changed("pbkdf2-iter") {
		f.pbkdf2Iter = cur.Iterations
	}
	own := kdfCostFlags[f.kdf]
	p, err := kdfParamsFromFlags(f, func(name string) bool { return changed(name) || slices.Contains(own, name) })
	if err != nil {
		return kdf.Params{}, err
	}
	// Costs no flag sets (scrypt r and p, the PBKDF2 hash) stay too.
	p.R, p.P, p.Hash = cur.R, cur.P, cur.Hash
	if err := p.Validate(); err != nil {
		return kdf.Params{}, &classifiedError{class: errUsage, err: fmt.Errorf("KDF cost flags: %w", err)}
	}
	p.Salt = nil
	return p, nil
}
