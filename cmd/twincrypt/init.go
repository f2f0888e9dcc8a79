package main

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/fs"
)

type initFlags struct {
	cipher         string
	keyBytes       int
	kdf            string
	kdfTime        uint32
	kdfMemoryKiB   uint32
	kdfThreads     uint8
	scryptLogN     int
	pbkdf2Iter     int
	plaintextNames bool
	formatVersion  int
	passFlags
	quiet bool
	// mk and force are for recovery: a new config for an existing volume.
	mk    masterKeyFlags
	force bool
}

func newInitCmd() *cobra.Command {
	var f initFlags
	cmd := &cobra.Command{
		Use:   "init [flags] LOWER",
		Short: "Create an encrypted volume in an empty directory",
		Long: `Create an encrypted volume in LOWER, which must be empty; a LOWER that
does not exist is created (mode 0700).

init generates a random master key, wraps it with a key derived from your
passphrase and writes it to LOWER/` + config.FileName + ` (mode 0600). The
passphrase is read from --passfile, else from the first line the program of
--extpass prints, else from the terminal without echo
(asked twice), else as one line from stdin when stdin is not a terminal.

The master key is printed once. If the config file is ever damaged or the
passphrase forgotten, it is the only way back to your data: write it down
and keep it somewhere safe. Use --quiet to suppress it (scripts, tests).

Ciphers (eCryptfs calls these ecryptfs_cipher / ecryptfs_key_bytes):
  aes-xts   AES in XTS mode per 4096-byte extent; --key-bytes 64 (AES-256,
            default) or 32 (AES-128)
  aes-cbc   AES-CBC with ESSIV over 512-byte sectors (dm-crypt's
            aes-cbc-essiv:sha256), eight per 4096-byte extent; --key-bytes
            32 (AES-256, default) or 16 (AES-128)

New volumes are format version 3: the settings are also sealed under the
master key, so that recovery with the master key can tell an altered config.
--format-version 1 makes an aes-cbc volume of the first format, with one
CBC chain per 4096-byte extent (as eCryptfs), which twincrypt binaries from
before format version 2 (2026-12-02) can also open; its writes are slower
(CBC encryption is serial within a chain). --format-version 1 or 2 makes a
volume that earlier binaries open, without the sealed settings.

Key derivation (--kdf): argon2id (default), scrypt or pbkdf2. The cost flags
override the defaults of the chosen function only; giving a cost flag of
another function is an error. Costs below the minimums (argon2id 46 MiB x 1
pass, 19 MiB x 2, 12 MiB x 3, 9 MiB x 4 or 7 MiB x 5 and more; scrypt
128*r*N >= 8 MiB and 128*r*N*p >= 80 MiB; PBKDF2 600000 iterations of
SHA-256 or 210000 of SHA-512: OWASP 2023's cheapest settings) are refused
unless --allow-weak-kdf is given, and such a volume then needs
--allow-weak-kdf to be opened too.

Recovery: with --masterkey-file FILE or --masterkey (the key typed or pasted
on the terminal without echo, else read from stdin), init writes a new
config for the existing volume in LOWER whose config is lost, wrapping that
master key under a new passphrase. Give --cipher, --key-bytes and
--plaintext-names as the volume was made. The key is checked against the
data first (the zero trailer of file content, sealed symlink targets and
xattr values, names); a key the data refutes is refused and nothing is
written. When LOWER holds nothing that can confirm a key (no file content,
links, xattrs, too few names), init says so and needs --force. The master
key is never taken from the command line, where other users can read it.`,
		Example: `  # Interactive: asks for the passphrase twice
  twincrypt init ~/vault.enc

  # AES-128-CBC, eCryptfs-like, passphrase from a file
  twincrypt init --cipher aes-cbc --key-bytes 16 --passfile ~/.vault-pass ~/vault.enc

  # The cheapest KDF above the minimums (argon2id 7 MiB x 5 passes)
  echo test | twincrypt init --kdf-time 5 --kdf-memory 7168 --kdf-threads 1 --quiet /tmp/t.enc

  # The config is lost: a new one from the master key saved at init
  twincrypt init --masterkey-file ~/vault.masterkey ~/vault.enc`,
		Args: refuseKeyInArgs(exactArgs(1, "LOWER")),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runInit(cmd, f, args[0])
		},
	}
	fl := cmd.Flags()
	fl.SortFlags = false
	fl.StringVar(&f.cipher, "cipher", "aes-xts", "content cipher: aes-xts or aes-cbc")
	fl.IntVar(&f.keyBytes, "key-bytes", 0, "key size in bytes: aes-xts 32|64 (default 64), aes-cbc 16|32 (default 32); 0 = default")
	fl.StringVar(&f.kdf, "kdf", "argon2id", "passphrase key derivation: argon2id, scrypt or pbkdf2")
	fl.Uint32Var(&f.kdfTime, "kdf-time", 0, "argon2id passes (default: the KDF's default)")
	fl.Uint32Var(&f.kdfMemoryKiB, "kdf-memory", 0, "argon2id memory in KiB (default: the KDF's default)")
	fl.Uint8Var(&f.kdfThreads, "kdf-threads", 0, "argon2id parallelism (default: the KDF's default)")
	fl.IntVar(&f.scryptLogN, "scrypt-logn", 0, "scrypt cost: N = 2^logn (default: the KDF's default)")
	fl.IntVar(&f.pbkdf2Iter, "pbkdf2-iter", 0, "PBKDF2 iterations (default: the KDF's default)")
	fl.BoolVar(&f.plaintextNames, "plaintext-names", false, "do not encrypt file names")
	fl.IntVar(&f.formatVersion, "format-version", 0, "config format version: 1, 2 or 3 (0 = 3; 1 and 2 for earlier binaries, without sealed settings)")
	f.register(fl, "read the passphrase from the first line of `FILE`")
	f.registerAllowWeak(fl)
	fl.BoolVarP(&f.quiet, "quiet", "q", false, "print nothing on success (not even the master key)")
	f.mk.register(fl)
	fl.BoolVar(&f.force, "force", false, "recovery: write the config even if nothing in LOWER can confirm the master key")
	return cmd
}

func runInit(cmd *cobra.Command, f initFlags, lowerArg string) error {
	keyBytes, err := resolveKeyBytes(f.cipher, f.keyBytes)
	if err != nil {
		return err
	}
	params, err := kdfParamsFromFlags(f, cmd.Flags().Changed)
	if err != nil {
		return err
	}
	if err := f.checkNewKDF(params); err != nil {
		return err
	}
	if err := f.mk.check(false); err != nil {
		return err
	}
	if f.formatVersion != 0 && (f.formatVersion < config.MinVersion || f.formatVersion > config.Version) {
		return usageErrorf("--format-version %d: this twincrypt writes versions %d to %d", f.formatVersion, config.MinVersion, config.Version)
	}
	if f.mk.given() {
		if f.formatVersion != 0 {
			return usageErrorf("--format-version is not for recovery: init --masterkey finds the version from the file headers")
		}
		return runInitRecover(cmd, f, keyBytes, params, lowerArg)
	}
	if f.force {
		return usageErrorf("--force is for recovery with --masterkey or --masterkey-file")
	}
	lower, missing, err := initLowerPath(lowerArg)
	if err != nil {
		return err
	}
	// Refuse before asking for the passphrase twice; Create checks again.
	if !missing {
		if err := checkInitTarget(lower); err != nil {
			return err
		}
	}

	src := f.source(cmd.ErrOrStderr())
	pass, err := src.read(true)
	if err != nil {
		return err
	}
	defer wipe(pass)
	if missing {
		if err := createLower(lower); err != nil {
			return err
		}
		if !f.quiet {
			fmt.Fprintf(cmd.OutOrStdout(), "Created directory %s (mode 0700)\n", lower)
		}
	}

	cfg, masterKey, err := config.Create(lower, pass, config.Options{
		Version:        f.formatVersion,
		Cipher:         f.cipher,
		KeyBytes:       keyBytes,
		PlaintextNames: f.plaintextNames,
		KDF:            params,
		Creator:        "twincrypt " + buildVersion(),
	})
	if err != nil {
		if errors.Is(err, kdf.ErrParams) || errors.Is(err, config.ErrKeyBytes) || errors.Is(err, config.ErrUnknownCipher) {
			// These came from our flags, not from a file on disk.
			return &classifiedError{class: errUsage, err: fmt.Errorf("init %s: %w", lower, err)}
		}
		return fmt.Errorf("init %s: %w", lower, err)
	}
	if err := fs.InitLower(lower, cfg); err != nil {
		return fmt.Errorf("init %s: %w", lower, err)
	}
	defer wipe(masterKey)
	if f.quiet {
		return nil
	}
	out := cmd.OutOrStdout()
	printMasterKey(out, masterKey)
	fmt.Fprintf(out, "Created %s\n", initSummary(lower, cfg))
	return nil
}

// resolveKeyBytes checks --cipher and --key-bytes and fills in the default
// key size (0 = default).
func resolveKeyBytes(cipher string, keyBytes int) (int, error) {
	var allowed []int
	switch cipher {
	case "aes-xts":
		allowed = []int{64, 32} // default first
	case "aes-cbc":
		allowed = []int{32, 16}
	default:
		return 0, usageErrorf("unknown --cipher %q (use aes-xts or aes-cbc)", cipher)
	}
	if keyBytes == 0 {
		return allowed[0], nil
	}
	for _, n := range allowed {
		if keyBytes == n {
			return n, nil
		}
	}
	return 0, usageErrorf("--key-bytes %d is not valid for %s (use %d or %d)", keyBytes, cipher, allowed[1], allowed[0])
}

// kdfCostFlags lists, per algorithm, the cost flags that apply to it.
var kdfCostFlags = map[string][]string{
	"argon2id": {"kdf-time", "kdf-memory", "kdf-threads"},
	"scrypt":   {"scrypt-logn"},
	"pbkdf2":   {"pbkdf2-iter"},
}

// checkKDFFlags refuses an unknown --kdf and cost flags of another KDF
// (changed reports whether a flag was given on the command line).
func checkKDFFlags(alg string, changed func(string) bool) error {
	own, ok := kdfCostFlags[alg]
	if !ok {
		return usageErrorf("unknown --kdf %q (use argon2id, scrypt or pbkdf2)", alg)
	}
	for other, flags := range kdfCostFlags {
		if other == alg {
			continue
		}
		for _, fl := range flags {
			if changed(fl) {
				return usageErrorf("--%s applies to --kdf %s, not %s (own cost flags: --%s)",
					fl, other, alg, strings.Join(own, ", --"))
			}
		}
	}
	return nil
}

// kdfParamsFromFlags starts from kdf.Default and overrides the costs that
// were given on the command line.
func kdfParamsFromFlags(f initFlags, changed func(string) bool) (kdf.Params, error) {
	if err := checkKDFFlags(f.kdf, changed); err != nil {
		return kdf.Params{}, err
	}
	p, err := kdf.Default(f.kdf)
	if err != nil {
		return kdf.Params{}, fmt.Errorf("kdf defaults for %s: %w", f.kdf, err)
	}
	if changed("kdf-time") {
		p.Time = f.kdfTime
	}
	if changed("kdf-memory") {
		p.MemoryKiB = f.kdfMemoryKiB
	}
	if changed("kdf-threads") {
		p.Threads = f.kdfThreads
	}
	if changed("scrypt-logn") {
		p.LogN = f.scryptLogN
	}
	if changed("pbkdf2-iter") {
		p.Iterations = f.pbkdf2Iter
	}
	if err := p.Validate(); err != nil {
		return kdf.Params{}, &classifiedError{class: errUsage, err: fmt.Errorf("KDF cost flags: %w", err)}
	}
	return p, nil
}

// checkInitTarget refuses a LOWER that already has a config or any entry.
func checkInitTarget(lower string) error {
	if _, err := os.Lstat(filepath.Join(lower, config.FileName)); err == nil {
		return fmt.Errorf("init %s: %w", lower, config.ErrExists)
	}
	d, err := os.Open(lower)
	if err != nil {
		return fmt.Errorf("init %s: %w", lower, err)
	}
	defer d.Close()
	names, err := d.Readdirnames(1)
	if err != nil && err != io.EOF {
		return fmt.Errorf("init %s: %w", lower, err)
	}
	if len(names) > 0 {
		return fmt.Errorf("init %s: %w", lower, config.ErrNotEmpty)
	}
	return nil
}

// formatMasterKey renders key as hex in groups of 8 digits joined by '-',
// eight groups to a line (gocryptfs style); a line that continues ends in
// '-' so the lines can be joined back verbatim.
func formatMasterKey(key []byte) []string {
	h := hex.EncodeToString(key)
	var groups []string
	for len(h) > 8 {
		groups = append(groups, h[:8])
		h = h[8:]
	}
	if h != "" {
		groups = append(groups, h)
	}
	var lines []string
	for len(groups) > 8 {
		lines = append(lines, strings.Join(groups[:8], "-")+"-")
		groups = groups[8:]
	}
	return append(lines, strings.Join(groups, "-"))
}

func printMasterKey(w io.Writer, key []byte) {
	fmt.Fprintln(w, "Your master key is:")
	fmt.Fprintln(w)
	for _, line := range formatMasterKey(key) {
		fmt.Fprintf(w, "    %s\n", line)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, `If %s is damaged or you forget your passphrase, the master key
is the only way to recover your data. Write it down and keep it somewhere
safe, away from the encrypted directory. This message is printed only once.

`, config.FileName)
}

// initSummary is the one-line description of a new volume.
func initSummary(lower string, c *config.Config) string {
	names := "encrypted names"
	if c.PlaintextNames {
		names = "plaintext names"
	}
	return fmt.Sprintf("%s volume in %s: %d-bit key, kdf %s, %s, format version %d",
		c.Cipher, lower, c.KeyBytes*8, kdfSummary(c.KDF), names, c.Version)
}

func kdfSummary(p kdf.Params) string {
	switch p.Algorithm {
	case "argon2id":
		mem := fmt.Sprintf("%d KiB", p.MemoryKiB)
		if p.MemoryKiB%1024 == 0 {
			mem = fmt.Sprintf("%d MiB", p.MemoryKiB/1024)
		}
		return fmt.Sprintf("argon2id (t=%d, m=%s, p=%d)", p.Time, mem, p.Threads)
	case "scrypt":
		return fmt.Sprintf("scrypt (N=2^%d, r=%d, p=%d)", p.LogN, p.R, p.P)
	case "pbkdf2":
		return fmt.Sprintf("pbkdf2-%s (%d iterations)", p.Hash, p.Iterations)
	}
	return p.Algorithm
}
