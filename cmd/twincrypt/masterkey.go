package main

// Recovery with the master key that init prints: mount, passwd and init
// take it from a file (--masterkey-file) or from the terminal without echo
// (--masterkey), never from the command line, where every user of the
// machine can read it in /proc/PID/cmdline and ps.

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/fs/fsck"
)

// masterKeyHexDigits is the length of the master key in hex.
const masterKeyHexDigits = 2 * keys.MasterKeySize

// maxMasterKeyFile bounds what is read of a --masterkey-file: the key as
// init prints it is 2 lines of 71 characters, with room for comments.
const maxMasterKeyFile = 4096

// errWrongMasterKey is the CLI's class for a master key that the data
// refutes: the same exit code as a wrong passphrase.
var errWrongMasterKey = errors.New("wrong master key")

// masterKeyFlags are --masterkey and --masterkey-file.
type masterKeyFlags struct {
	file   string
	prompt bool
}

func (m *masterKeyFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&m.file, "masterkey-file", "", "recovery: read the master key (hex, as init printed it) from `FILE` instead of using the passphrase")
	fl.BoolVar(&m.prompt, "masterkey", false, "recovery: read the master key from the terminal (no echo), else from stdin")
}

func (m masterKeyFlags) given() bool { return m.file != "" || m.prompt }

// check refuses both flags at once, and, where the master key replaces
// the passphrase (mount, passwd), a passfile or --extpass next to them
// (passGiven).
func (m masterKeyFlags) check(passGiven bool) error {
	if m.file != "" && m.prompt {
		return usageErrorf("--masterkey-file and --masterkey: give one")
	}
	if m.given() && passGiven {
		return usageErrorf("--passfile or --extpass and a master key: the master key replaces the current passphrase")
	}
	return nil
}

// read returns the 64-byte master key; the caller wipes it.
func (m masterKeyFlags) read(stdin *os.File, prompt io.Writer) ([]byte, error) {
	if m.file != "" {
		return readMasterKeyFile(m.file)
	}
	fd := int(stdin.Fd())
	if term.IsTerminal(fd) {
		fmt.Fprintf(prompt, "Master key (%d hex digits; dashes, spaces and line breaks are ignored):\n", masterKeyHexDigits)
		return readMasterKeyLines(func() ([]byte, error) { return term.ReadPassword(fd) })
	}
	return readMasterKeyLines(func() ([]byte, error) {
		line, err := readPassLine(stdin)
		if errors.Is(err, errEmptyPassphrase) {
			return nil, nil
		}
		return line, err
	})
}

// readMasterKeyFile reads a key file: hex digits, with dashes, spaces and
// line breaks anywhere (init's output can be copied as it is); "#" starts
// a comment to the end of the line.
func readMasterKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("master key file: %w", err)
	}
	defer f.Close()
	buf := make([]byte, maxMasterKeyFile+1)
	defer wipe(buf)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("master key file %s: %w", path, err)
	}
	if n > maxMasterKeyFile {
		return nil, usageErrorf("master key file %s: longer than %d bytes, not a key", path, maxMasterKeyFile)
	}
	var digits []byte
	defer func() { wipe(digits) }()
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		line, _, _ = strings.Cut(line, "#")
		digits = append(digits, keyDigits(line)...)
	}
	key, err := parseMasterKey(digits)
	if err != nil {
		return nil, usageErrorf("master key file %s: %v", path, err)
	}
	return key, nil
}

// readMasterKeyLines reads lines until they hold a whole key: a key pasted
// as init printed it spans two lines.
func readMasterKeyLines(next func() ([]byte, error)) ([]byte, error) {
	var digits []byte
	defer func() { wipe(digits) }()
	for len(digits) < masterKeyHexDigits {
		line, err := next()
		if err != nil && !errors.Is(err, io.EOF) {
			wipe(line)
			return nil, fmt.Errorf("read the master key: %w", err)
		}
		if len(line) == 0 {
			break // an empty line, or the end of input
		}
		digits = append(digits, keyDigits(string(line))...)
		wipe(line)
	}
	key, err := parseMasterKey(digits)
	if err != nil {
		return nil, usageErrorf("master key: %v", err)
	}
	return key, nil
}

// keyDigits drops the separators init prints between groups.
func keyDigits(s string) []byte {
	var out []byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '-', ' ', '\t', '\r', '\n':
		default:
			out = append(out, c)
		}
	}
	return out
}

// parseMasterKey decodes exactly masterKeyHexDigits hex digits.
func parseMasterKey(digits []byte) ([]byte, error) {
	if len(digits) != masterKeyHexDigits {
		return nil, fmt.Errorf("%d hex digits, want %d (as init printed it)", len(digits), masterKeyHexDigits)
	}
	key := make([]byte, keys.MasterKeySize)
	if _, err := hex.Decode(key, digits); err != nil {
		wipe(key)
		return nil, errors.New("not a hexadecimal key (digits 0-9 and a-f, dashes and spaces allowed)")
	}
	return key, nil
}

// verifyMasterKey checks key against the data in lower under cfg's
// settings and says what confirmed it. force accepts a key that nothing in
// lower can confirm (never one that the data refutes); the message then
// says so.
func verifyMasterKey(lower string, cfg *config.Config, key []byte, force bool) (string, error) {
	checked, _, err := verifyMasterKeyEvidence(lower, cfg, key, force)
	return checked, err
}

// notConfirmed starts the message of a key accepted unconfirmed.
const notConfirmed = "master key NOT confirmed"

// verifyMasterKeyEvidence is verifyMasterKey with what the data showed.
func verifyMasterKeyEvidence(lower string, cfg *config.Config, key []byte, force bool) (string, *fsck.KeyEvidence, error) {
	ev, err := fsck.VerifyKey(lower, cfg, key)
	switch {
	case err == nil:
		return "master key confirmed by " + ev.String(), ev, nil
	case errors.Is(err, fsck.ErrUnverifiable) && force:
		return notConfirmed + ": nothing in LOWER can confirm it", ev, nil
	case errors.Is(err, fsck.ErrWrongKey):
		return "", ev, &classifiedError{class: errWrongMasterKey, err: err}
	case errors.Is(err, fsck.ErrSettings):
		return "", ev, &classifiedError{class: errUsage, err: err}
	}
	return "", ev, err
}

// checkRecoveryConfig checks key and the settings of the existing config
// cfg for recovery (mount and passwd with the master key), which cannot
// open the wrapped key and so cannot trust a field of the config on its
// own: the settings must agree with the config's seal (version 3), or,
// without a seal, be confirmed by the data where they differ from init's
// defaults. allowUnverifiable accepts a key that nothing can confirm (an
// empty volume under an unsealed config: mount warns, passwd refuses);
// the message then says so. It returns what confirmed the key.
func checkRecoveryConfig(lower string, cfg *config.Config, key []byte, allowUnverifiable bool) (string, error) {
	sealErr := cfg.CheckSealed(key)
	switch {
	case sealErr == nil:
		// The seal opened: the key is the one that sealed this config
		// (a 2^-128 chance otherwise) and the settings are its owner's.
		// The data is still checked: a volume whose files another key
		// or other settings wrote is not this config's.
		checked, _, err := verifyMasterKeyEvidence(lower, cfg, key, true)
		if err != nil {
			return "", err
		}
		if strings.HasPrefix(checked, notConfirmed) {
			return "master key and settings confirmed by the config's sealed settings", nil
		}
		return checked + ", settings confirmed by the config's sealed settings", nil
	case errors.Is(sealErr, config.ErrSealKey):
		checked, _, err := verifyMasterKeyEvidence(lower, cfg, key, false)
		switch {
		case err == nil:
			return "", fmt.Errorf("%w: the sealed settings do not open under the master key, which the data confirms (%s): the seal was replaced; refusing", config.ErrAltered, checked)
		case errors.Is(err, fsck.ErrUnverifiable):
			return "", &classifiedError{class: errWrongMasterKey, err: fmt.Errorf("the config's sealed settings do not open under this master key, and nothing else in LOWER can confirm it: a wrong master key (or an altered config)")}
		}
		return "", err
	case !errors.Is(sealErr, config.ErrUnsealed):
		return "", sealErr
	}
	// No seal (version 1 or 2): the data must vouch for what is not the
	// default.
	checked, ev, err := verifyMasterKeyEvidence(lower, cfg, key, allowUnverifiable)
	if err != nil {
		return "", err
	}
	if cfg.PlaintextNames {
		// Nothing in LOWER ties a name to the key: a LOWER writer can
		// delete the root IV and rename files, so no evidence would do.
		return "", fmt.Errorf("%w: the config (version %d) says plaintext_names=true, which recovery does not take from a config without sealed settings, and LOWER cannot prove; refusing. If the volume was made with --plaintext-names, mount it with the passphrase, or move %s away and run 'twincrypt init --masterkey-file FILE --plaintext-names %s' (the new config seals it)",
			config.ErrUnsealed, cfg.Version, config.FileName, lower)
	}
	if (cfg.Cipher != "aes-xts" || cfg.KeyBytes != 64) && ev.Trailers == 0 {
		// Headers can be planted; only content that decrypts under the
		// master key with these settings shows that its owner chose them.
		return "", fmt.Errorf("%w: the config (version %d) says %s with %d-byte keys, and no file content in LOWER confirms it (checked %s); refusing. If the volume was made so, mount it with the passphrase, or move %s away and run 'twincrypt init --masterkey-file FILE --cipher %s --key-bytes %d %s'",
			config.ErrUnsealed, cfg.Version, cfg.Cipher, cfg.KeyBytes, ev, config.FileName, cfg.Cipher, cfg.KeyBytes, lower)
	}
	return checked, nil
}

// refuseKeyInArgs wraps a command's argument check: an argument that looks
// like a master key (a user who typed "--masterkey HEX") is refused with a
// message that says why and what to do instead, before anything runs.
// The key is already in the process list by then; saying so is the most
// that can be done.
func refuseKeyInArgs(next cobra.PositionalArgs) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		for _, a := range args {
			if looksLikeMasterKey(a) {
				return usageErrorf("an argument looks like a master key: a key on the command line is visible to every user (ps, /proc/PID/cmdline); put it in a file for --masterkey-file FILE, or give --masterkey and paste it when asked")
			}
		}
		return next(c, args)
	}
}

// looksLikeMasterKey reports whether s is half a master key or more in hex.
func looksLikeMasterKey(s string) bool {
	d := keyDigits(s)
	if len(d) < masterKeyHexDigits/2 {
		return false
	}
	_, err := hex.DecodeString(string(d[:len(d)&^1]))
	return err == nil
}
