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
	ev, err := fsck.VerifyKey(lower, cfg, key)
	switch {
	case err == nil:
		return "master key confirmed by " + ev.String(), nil
	case errors.Is(err, fsck.ErrUnverifiable) && force:
		return "master key NOT confirmed: nothing in LOWER can confirm it (--force)", nil
	case errors.Is(err, fsck.ErrWrongKey):
		return "", &classifiedError{class: errWrongMasterKey, err: err}
	case errors.Is(err, fsck.ErrSettings):
		return "", &classifiedError{class: errUsage, err: err}
	}
	return "", err
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
