package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"

	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
)

// maxPassphraseBytes bounds what is read from a passfile, a pipe or the
// background pipe, so that a wrong --passfile (a disk image, say) fails fast
// instead of being read into memory.
const maxPassphraseBytes = 4096

var (
	errEmptyPassphrase  = errors.New("empty passphrase")
	errPassphraseLength = fmt.Errorf("passphrase longer than %d bytes", maxPassphraseBytes)
)

// passphraseSource says where a passphrase comes from. The zero value with
// stdin set reads the terminal or the pipe on stdin.
type passphraseSource struct {
	passFlags
	stdin  *os.File  // terminal or pipe
	prompt io.Writer // where the terminal prompts go (stderr)
}

// passFlags are --passfile and --extpass, on every command that reads a
// passphrase.
type passFlags struct {
	passfile string   // --passfile
	extpass  []string // --extpass: a program that prints the passphrase
	// allowWeakKDF (--allow-weak-kdf) lets a KDF below kdf.CheckMinimum's
	// minimums be written (init, passwd) or unlocked (mount, passwd, fsck,
	// path). Only the user can say so: a config never can.
	allowWeakKDF bool
}

// register adds --passfile (usage: whose passphrase its first line is)
// and --extpass to fl.
func (p *passFlags) register(fl *pflag.FlagSet, usage string) {
	fl.StringVar(&p.passfile, "passfile", "", usage)
	fl.StringArrayVar(&p.extpass, "extpass", nil, "run `PROGRAM` and take the passphrase from the first line of its output (one value is split at spaces; repeat the flag to give arguments with spaces)")
}

// registerAllowWeak adds --allow-weak-kdf to a command that unlocks or
// writes a config.
func (p *passFlags) registerAllowWeak(fl *pflag.FlagSet) {
	fl.BoolVar(&p.allowWeakKDF, "allow-weak-kdf", false, "accept a passphrase KDF below the minimums ("+kdf.MinimumsSummary()+"): for test and example volumes")
}

// checkConfigKDF refuses, before any passphrase is asked, a config whose
// KDF is below the minimums, unless --allow-weak-kdf. Such a config was
// either made so (a test or example volume, or one from before the
// minimums) or lowered by someone who can write LOWER, so that the next
// passphrase change would wrap the key under it; the message says both.
// The error wraps kdf.ErrWeak: exit code 11.
func (p passFlags) checkConfigKDF(lower string, cfg *config.Config) error {
	if p.allowWeakKDF {
		return nil
	}
	if err := cfg.KDF.CheckMinimum(); err != nil {
		return fmt.Errorf("config of %s: %w; refusing. If the volume was made so (a test or example volume, or one made before twincrypt had minimums), add --allow-weak-kdf, and strengthen it with 'twincrypt passwd --allow-weak-kdf %s'; if not, the config was altered by someone who can write LOWER",
			lower, err, lower)
	}
	return nil
}

// checkNewKDF refuses KDF parameters from the command line that are below
// the minimums, unless --allow-weak-kdf (a usage error, exit code 2).
func (p passFlags) checkNewKDF(params kdf.Params) error {
	if p.allowWeakKDF {
		return nil
	}
	if err := params.CheckMinimum(); err != nil {
		return &classifiedError{class: errUsage, err: fmt.Errorf("KDF cost flags: %w; add --allow-weak-kdf for a throwaway volume", err)}
	}
	return nil
}

// given reports whether the passphrase comes from a file or a program,
// not from the terminal or stdin.
func (p passFlags) given() bool { return p.passfile != "" || len(p.extpass) > 0 }

// source is where the passphrase comes from: these flags, else the
// terminal or stdin, with prompts on prompt.
func (p passFlags) source(prompt io.Writer) passphraseSource {
	return passphraseSource{passFlags: p, stdin: os.Stdin, prompt: prompt}
}

// read returns the passphrase. confirm asks twice on a terminal (init); a
// passfile, a program's output or a pipe is read once. The caller wipes
// the result.
func (s passphraseSource) read(confirm bool) ([]byte, error) {
	if s.passfile != "" && len(s.extpass) > 0 {
		return nil, usageErrorf("--passfile and --extpass: give one of them")
	}
	if s.passfile != "" {
		return readPassfile(s.passfile)
	}
	if len(s.extpass) > 0 {
		return runExtpass(s.extpass, s.stdin, s.prompt)
	}
	fd := int(s.stdin.Fd())
	if term.IsTerminal(fd) {
		return readTerminal(fd, s.prompt, confirm)
	}
	pass, err := readPassLine(s.stdin)
	if err != nil {
		return nil, fmt.Errorf("read passphrase from stdin: %w", err)
	}
	return pass, nil
}

// runExtpass runs the program of --extpass (as gocryptfs -extpass: one
// value is split at spaces into the program and its arguments, several
// values are the program and its arguments as they are) with the
// terminal or pipe on its stdin and prompt as its stderr, so that
// ssh-askpass, systemd-ask-password, pass or a keyring tool can ask or
// fetch, and returns the first line of what it prints, as for a passfile.
// A program that fails gives an error and no passphrase.
func runExtpass(args []string, stdin *os.File, prompt io.Writer) ([]byte, error) {
	argv := args
	if len(args) == 1 {
		argv = strings.Fields(args[0])
	}
	if len(argv) == 0 {
		return nil, usageErrorf("--extpass: no program given")
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin, cmd.Stderr = stdin, prompt
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("extpass: %w", err)
	}
	// The first line only, as from a passfile; the rest is drained (and
	// bounded) so that the program can exit.
	pass, rerr := readPassLine(out)
	_, _ = io.Copy(io.Discard, io.LimitReader(out, 1<<20))
	out.Close()
	werr := cmd.Wait()
	if werr != nil {
		wipe(pass)
		return nil, fmt.Errorf("extpass %s: %w; no passphrase", argv[0], werr)
	}
	if rerr != nil {
		return nil, fmt.Errorf("extpass %s: %w", argv[0], rerr)
	}
	return pass, nil
}

// readPassfile returns the first line of path without its line ending
// ("\n" or "\r\n"). Anything after the first line is ignored, as gocryptfs
// does, so a passfile may carry a comment below the passphrase.
func readPassfile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("passfile: %w", err)
	}
	defer f.Close()
	pass, err := readPassLine(f)
	if err != nil {
		return nil, fmt.Errorf("passfile %s: %w", path, err)
	}
	return pass, nil
}

// readPassLine reads one line from r, a byte at a time so that nothing
// after the line is consumed (and no copy is left in a buffer), and strips
// the trailing "\n" or "\r\n". A missing final newline is fine; an empty
// line is an error.
func readPassLine(r io.Reader) ([]byte, error) {
	buf := make([]byte, 0, 128)
	var one [1]byte
	for {
		n, err := r.Read(one[:])
		if n == 1 {
			if one[0] == '\n' {
				break
			}
			if len(buf) == maxPassphraseBytes {
				wipe(buf)
				return nil, errPassphraseLength
			}
			buf = appendWiping(buf, one[0])
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			wipe(buf)
			return nil, err
		}
	}
	one[0] = 0
	buf = bytes.TrimSuffix(buf, []byte("\r"))
	if len(buf) == 0 {
		return nil, errEmptyPassphrase
	}
	return buf, nil
}

// readPassAll reads everything from r: the background child gets the exact
// passphrase bytes from its parent over a pipe, with no line ending.
func readPassAll(r io.Reader) ([]byte, error) {
	buf := make([]byte, 0, 128)
	chunk := make([]byte, 512)
	defer wipe(chunk)
	for {
		n, err := r.Read(chunk)
		for _, c := range chunk[:n] {
			if len(buf) == maxPassphraseBytes {
				wipe(buf)
				return nil, errPassphraseLength
			}
			buf = appendWiping(buf, c)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			wipe(buf)
			return nil, err
		}
	}
	if len(buf) == 0 {
		return nil, errEmptyPassphrase
	}
	return buf, nil
}

// readTerminal reads a passphrase without echo. With confirm it asks twice
// and compares.
func readTerminal(fd int, prompt io.Writer, confirm bool) ([]byte, error) {
	fmt.Fprint(prompt, "Passphrase: ")
	pass, err := term.ReadPassword(fd)
	fmt.Fprintln(prompt)
	if err != nil {
		return nil, fmt.Errorf("read passphrase from terminal: %w", err)
	}
	if len(pass) == 0 {
		return nil, errEmptyPassphrase
	}
	if !confirm {
		return pass, nil
	}
	fmt.Fprint(prompt, "Repeat passphrase: ")
	again, err := term.ReadPassword(fd)
	fmt.Fprintln(prompt)
	defer wipe(again)
	if err != nil {
		wipe(pass)
		return nil, fmt.Errorf("read passphrase from terminal: %w", err)
	}
	if !bytes.Equal(pass, again) {
		wipe(pass)
		return nil, errors.New("passphrases do not match")
	}
	return pass, nil
}

// appendWiping appends c to buf; when append has to grow the array, the old
// one is wiped so no partial copy of the secret is left behind.
func appendWiping(buf []byte, c byte) []byte {
	if len(buf) < cap(buf) {
		return append(buf, c)
	}
	grown := make([]byte, len(buf), 2*cap(buf)+1)
	copy(grown, buf)
	wipe(buf)
	return append(grown, c)
}

// wipe zeroes secret bytes (passphrases, master keys) once they are used.
// Go may have copied them elsewhere, so this is damage limitation, not a
// guarantee.
func wipe(b []byte) { clear(b) }
