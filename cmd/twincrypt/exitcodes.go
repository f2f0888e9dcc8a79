package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/cipher/luks"
	"github.com/twincrypt/twincrypt/fs"
)

// Exit codes of the twincrypt binary. They are part of its interface:
// scripts and the integration harness branch on them, so a code, once
// published, keeps its meaning.
const (
	exitOK              = 0  // success
	exitError           = 1  // any other error
	exitUsage           = 2  // bad command line: unknown flag or command, bad argument, bad -o option
	exitConfigMissing   = 10 // LOWER is missing, no directory, or holds no twincrypt.conf
	exitConfigInvalid   = 11 // config corrupt, altered (its sealed settings differ), of an unsupported version, naming an unknown cipher or KDF, or a KDF below the minimums
	exitWrongPassphrase = 12 // the passphrase does not unlock the master key, or the data refutes a given master key
	exitMountpoint      = 13 // MNT missing, not a directory, not empty, overlapping LOWER, or not a mount (umount)
	exitMountFailed     = 14 // the FUSE mount itself failed (no /dev/fuse, no permission, fusermount error)
	exitInitRefused     = 15 // init: LOWER already holds a config or is not empty
	exitFsckProblems    = 16 // fsck: problems found (with --repair: not all of them repaired)
	exitFsckRepaired    = 17 // fsck --repair: problems found, all of them repaired
	// Interrupted by SIGINT, SIGTERM, SIGHUP or SIGPIPE, after cleaning
	// up: 128+SIGINT, what a shell reports for Ctrl-C, for all four, so
	// that a script tests one code for "interrupted".
	exitInterrupted = 130
)

// CLI-level sentinel errors, next to the ones exported by cipher/config.
var (
	errUsage       = errors.New("usage error")
	errMountpoint  = errors.New("mountpoint problem")
	errMountFailed = errors.New("mount failed")
	errInterrupted = errors.New("interrupted")
)

// exitTable maps sentinel errors to exit codes. The first entry that
// errors.Is matches wins, so the CLI's own classification (errUsage, wrapped
// around a kdf.ErrParams that came from a command-line flag, say) comes
// before the sentinels of the packages below.
var exitTable = []struct {
	err  error
	code int
}{
	{errUsage, exitUsage},
	{config.ErrMissing, exitConfigMissing},
	{config.ErrCorrupt, exitConfigInvalid},
	{config.ErrUnsupportedVersion, exitConfigInvalid},
	{config.ErrUnknownCipher, exitConfigInvalid},
	{config.ErrKeyBytes, exitConfigInvalid},
	{config.ErrAltered, exitConfigInvalid},
	{config.ErrUnsealed, exitConfigInvalid},
	{kdf.ErrParams, exitConfigInvalid},
	{config.ErrWrongPassphrase, exitWrongPassphrase},
	{errWrongMasterKey, exitWrongPassphrase},
	{luks.ErrWrongPassphrase, exitWrongPassphrase},
	{ecryptfs.ErrWrongPassphrase, exitWrongPassphrase},
	{luks.ErrCorruptHeader, exitConfigInvalid},
	{errMountpoint, exitMountpoint},
	// Refused before mounting: --mirror names the wrong directory.
	{fs.ErrMirrorMismatch, exitUsage},
	{errMountFailed, exitMountFailed},
	{config.ErrExists, exitInitRefused},
	{config.ErrNotEmpty, exitInitRefused},
	{errFsckProblems, exitFsckProblems},
	{errFsckRepaired, exitFsckRepaired},
	{errInterrupted, exitInterrupted},
}

// exitCodeDoc is the table printed in the root help, in code order.
var exitCodeDoc = []struct {
	code    int
	meaning string
}{
	{exitOK, "success"},
	{exitError, "other error"},
	{exitUsage, "usage error (bad flag, argument or -o option)"},
	{exitConfigMissing, "LOWER missing, or no twincrypt.conf in it"},
	{exitConfigInvalid, "corrupt or altered config, unsupported config version, unknown cipher or KDF,\n       KDF below the minimums (--allow-weak-kdf)"},
	{exitWrongPassphrase, "wrong passphrase (or master key)"},
	{exitMountpoint, "mountpoint problem (missing, not a directory, not empty, overlaps LOWER;\n       for umount: not a mount point)"},
	{exitMountFailed, "FUSE mount failed"},
	{exitInitRefused, "init refused: LOWER already initialised or not empty"},
	{exitFsckProblems, "fsck: problems found (with --repair: not all repaired)"},
	{exitFsckRepaired, "fsck --repair: problems found and all repaired"},
	{exitInterrupted, "interrupted (SIGINT, SIGTERM, SIGHUP, SIGPIPE), after cleaning up"},
}

func exitCodeHelp() string {
	var b strings.Builder
	b.WriteString("Exit codes:\n")
	for _, e := range exitCodeDoc {
		fmt.Fprintf(&b, "  %3d  %s\n", e.code, e.meaning)
	}
	return strings.TrimRight(b.String(), "\n")
}

// codedError carries an exit code decided elsewhere: by the background mount
// process, which reports "err <code> <message>" over the readiness pipe.
type codedError struct {
	code int
	msg  string
}

func (e *codedError) Error() string { return e.msg }

// classifiedError puts err into one of the CLI's classes (errUsage,
// errMountpoint, errMountFailed) without adding the class's text to the
// message, and keeps err's own chain visible to errors.Is.
type classifiedError struct {
	class error
	err   error
}

func (e *classifiedError) Error() string   { return e.err.Error() }
func (e *classifiedError) Unwrap() []error { return []error{e.class, e.err} }

func usageErrorf(format string, a ...any) error {
	return &classifiedError{class: errUsage, err: fmt.Errorf(format, a...)}
}

func mountpointErrorf(format string, a ...any) error {
	return &classifiedError{class: errMountpoint, err: fmt.Errorf(format, a...)}
}

func mountFailedErrorf(format string, a ...any) error {
	return &classifiedError{class: errMountFailed, err: fmt.Errorf(format, a...)}
}

func isUsage(err error) bool { return errors.Is(err, errUsage) }

// exitCode returns the documented exit code for err.
func exitCode(err error) int {
	if err == nil {
		return exitOK
	}
	var coded *codedError
	if errors.As(err, &coded) {
		return coded.code
	}
	for _, e := range exitTable {
		if errors.Is(err, e.err) {
			return e.code
		}
	}
	return exitError
}
