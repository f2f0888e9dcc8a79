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
	"golang.org/x/sys/unix"
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

// read returns the 64-byte master key in locked memory; the caller
// destroys it.
//
// The key is never in ordinary Go memory, as hex or as bytes: a key file
// is read into a locked buffer, a terminal or a pipe one byte at a time
// into a locked byte, and every digit is decoded straight into the locked
// key (keyParser) and wiped from where it was read. No string is ever
// made of it: strings cannot be wiped, and the collector copies and frees
// heap memory without clearing it, which is how hex copies of the key
// stayed in the heap and in core dumps before (issue 39, finding 5).
func (m masterKeyFlags) read(stdin *os.File, prompt io.Writer) (*keys.Locked, error) {
	if m.file != "" {
		return readMasterKeyFile(m.file)
	}
	fd := int(stdin.Fd())
	if term.IsTerminal(fd) {
		fmt.Fprintf(prompt, "Master key (%d hex digits; dashes, spaces and line breaks are ignored):\n", masterKeyHexDigits)
		return readMasterKeyTerminal(fd)
	}
	return readMasterKeyLines(stdin)
}

// readMasterKeyFile reads a key file: hex digits, with dashes, spaces and
// line breaks anywhere (init's output can be copied as it is); "#" starts
// a comment to the end of the line.
func readMasterKeyFile(path string) (*keys.Locked, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("master key file: %w", err)
	}
	defer f.Close()
	buf := keys.NewLocked(maxMasterKeyFile + 1)
	defer buf.Destroy()
	n, err := io.ReadFull(f, buf.Bytes())
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("master key file %s: %w", path, err)
	}
	if n > maxMasterKeyFile {
		return nil, usageErrorf("master key file %s: longer than %d bytes, not a key", path, maxMasterKeyFile)
	}
	p := newKeyParser(true)
	p.feed(buf.Bytes()[:n])
	key, err := p.finish()
	if err != nil {
		return nil, usageErrorf("master key file %s: %v", path, err)
	}
	return key, nil
}

// readMasterKeyLines reads lines from r, a byte at a time, until they hold
// a whole key (a key pasted as init printed it spans two lines), an empty
// line or the end of input. Nothing after the key's last line is consumed:
// passwd reads the new passphrase from the same pipe next.
func readMasterKeyLines(r io.Reader) (*keys.Locked, error) {
	one := keys.NewLocked(1)
	defer one.Destroy()
	b := one.Bytes()
	return readKeyLines(func() (byte, bool, error) {
		for {
			n, err := r.Read(b)
			if n == 1 {
				c := b[0]
				b[0] = 0
				return c, true, nil
			}
			if err == io.EOF {
				return 0, false, nil
			}
			if err != nil {
				return 0, false, err
			}
		}
	})
}

// readMasterKeyTerminal is readMasterKeyLines on a terminal, with echo
// off. term.ReadPassword would do, but it collects the line in a growing
// heap slice, leaving partial copies behind.
func readMasterKeyTerminal(fd int) (*keys.Locked, error) {
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("read the master key: %w", err)
	}
	noEcho := *old
	noEcho.Lflag &^= unix.ECHO
	noEcho.Lflag |= unix.ICANON | unix.ISIG
	noEcho.Iflag |= unix.ICRNL
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &noEcho); err != nil {
		return nil, fmt.Errorf("read the master key: %w", err)
	}
	defer func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }()
	one := keys.NewLocked(1)
	defer one.Destroy()
	b := one.Bytes()
	return readKeyLines(func() (byte, bool, error) {
		for {
			n, err := unix.Read(fd, b)
			switch {
			case n == 1:
				c := b[0]
				b[0] = 0
				return c, true, nil
			case err == unix.EINTR:
				continue
			case err != nil:
				return 0, false, err
			}
			return 0, false, nil // end of input (^D)
		}
	})
}

// readKeyLines feeds the bytes next returns to a keyParser, line by line,
// until a line ends with the whole key read, or an empty line or the end
// of input comes.
func readKeyLines(next func() (c byte, ok bool, err error)) (*keys.Locked, error) {
	p := newKeyParser(false)
	lineLen := 0
	for {
		c, ok, err := next()
		if err != nil {
			p.destroy()
			return nil, fmt.Errorf("read the master key: %w", err)
		}
		if !ok {
			break
		}
		if c == '\n' {
			if lineLen == 0 || p.n >= masterKeyHexDigits {
				break
			}
			lineLen = 0
			continue
		}
		if c != '\r' {
			lineLen++
		}
		p.byte(c)
	}
	key, err := p.finish()
	if err != nil {
		return nil, usageErrorf("master key: %v", err)
	}
	return key, nil
}

// keyParser decodes a master key as init prints it (hex digits in either
// case, with dashes, spaces, tabs and line breaks anywhere) straight into
// locked memory, one character at a time: no buffer of digits, no string.
type keyParser struct {
	key      *keys.Locked
	n        int  // characters that are not separators: digits, or not hex
	notHex   bool // one of them was not a hex digit
	comments bool // "#" starts a comment to the end of the line (key files)
	comment  bool // inside one
}

func newKeyParser(comments bool) *keyParser {
	return &keyParser{key: keys.NewLocked(keys.MasterKeySize), comments: comments}
}

// feed parses b and wipes it.
func (p *keyParser) feed(b []byte) {
	for i, c := range b {
		p.byte(c)
		b[i] = 0
	}
}

func (p *keyParser) byte(c byte) {
	switch {
	case p.comment:
		p.comment = c != '\n'
		return
	case c == '#' && p.comments:
		p.comment = true
		return
	case c == '-' || c == ' ' || c == '\t' || c == '\r' || c == '\n':
		return
	}
	v, ok := hexValue(c)
	if !ok {
		p.notHex = true
	} else if p.n < masterKeyHexDigits {
		k := p.key.Bytes()
		if p.n%2 == 0 {
			k[p.n/2] = v << 4
		} else {
			k[p.n/2] |= v
		}
	}
	p.n++
}

// hexValue decodes one hex digit.
func hexValue(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// finish returns the key if exactly masterKeyHexDigits hex digits came;
// otherwise it destroys it and says what was wrong (never with a digit).
func (p *keyParser) finish() (*keys.Locked, error) {
	switch {
	case p.n != masterKeyHexDigits:
		p.destroy()
		return nil, fmt.Errorf("%d hex digits, want %d (as init printed it)", p.n, masterKeyHexDigits)
	case p.notHex:
		p.destroy()
		return nil, errors.New("not a hexadecimal key (digits 0-9 and a-f, dashes and spaces allowed)")
	}
	return p.key, nil
}

func (p *keyParser) destroy() { p.key.Destroy() }

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

// keyDigits drops the separators init prints between groups. It is for
// looksLikeMasterKey, whose argument is in /proc/PID/cmdline anyway: a key
// read from a file, a terminal or a pipe goes through keyParser instead.
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
