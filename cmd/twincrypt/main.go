// Command twincrypt encrypts files one by one over an ordinary directory
// (FUSE, AES-XTS or AES-CBC, in the style of eCryptfs) and mounts a
// passthrough twin of the very same code with the cipher switched off, so
// that the cost of encryption can be told apart from the cost of FUSE.
//
// Every subcommand lives in its own file; exitcodes.go is the one place where
// errors become exit codes.
package main

import (
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

// version is overridden with -ldflags "-X main.version=..." by release builds.
var version = ""

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the process exit code. Errors
// are printed as a single "twincrypt: <message>" line on stderr.
func run(args []string, stdout, stderr io.Writer) int {
	root, reached := newRootCmd()
	if isHelperForm(root, args) {
		// Called by mount.fuse3 for "mount -t fuse.twincrypt" or fstab.
		mountCmd, _, _ := root.Find([]string{"mount"})
		if mnt, flags, ok, err := helperRemount(args); err != nil || ok {
			if err == nil {
				if err = unix.Mount("", mnt, "", flags, ""); err != nil {
					err = fmt.Errorf("remount %s: %w", mnt, err)
				}
			}
			if err != nil {
				printError(stderr, mountCmd, err)
				return exitCode(err)
			}
			return exitOK
		}
		mountArgs, err := helperMountArgs(args)
		if err != nil {
			printError(stderr, mountCmd, err)
			return exitCode(err)
		}
		args = mountArgs
	} else {
		args = gocryptfsArgs(root, args)
	}
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteC()
	if err == nil {
		return exitOK
	}
	// Anything that failed before a command's RunE was reached (unknown
	// command, bad flag, wrong number of arguments) is a usage error.
	if !*reached {
		err = &classifiedError{class: errUsage, err: err}
	}
	printError(stderr, cmd, err)
	return exitCode(err)
}

// printError prints err as one line, with a pointer to the command's help
// for usage errors.
func printError(w io.Writer, cmd *cobra.Command, err error) {
	msg := oneLine(err.Error())
	if isUsage(err) && !strings.Contains(msg, "--help") {
		msg += fmt.Sprintf(" (see '%s --help')", cmd.CommandPath())
	}
	fmt.Fprintf(w, "twincrypt: %s\n", msg)
}

// oneLine folds a possibly multi-line message (fusermount output, for
// instance) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// newRootCmd builds the command tree. reached becomes true once a
// subcommand's RunE starts, i.e. once flags and arguments were accepted.
func newRootCmd() (*cobra.Command, *bool) {
	reached := new(bool)
	root := &cobra.Command{
		Use:   "twincrypt",
		Short: "Per-file encrypted FUSE filesystem that measures its own cost",
		Long: `twincrypt encrypts files one by one over an ordinary directory, in the
style of eCryptfs: file content with AES-XTS (default) or AES-CBC in 4096-byte
extents, file names deterministically per directory. The encrypted files live
in LOWER; you work with the plaintext view mounted at MNT.

Next to the encrypted mount, twincrypt can mount a passthrough "twin": the
very same FUSE code with the cipher switched off. Timing the twin against the
encrypted mount separates the cost of encryption from the cost of FUSE.

Quick start:
  twincrypt init ~/vault.enc            # create a volume, note the master key
  twincrypt mount ~/vault.enc ~/vault   # enter the passphrase, use ~/vault
  twincrypt umount ~/vault`,
		Version:          versionLine(),
		SilenceErrors:    true,
		SilenceUsage:     true,
		PersistentPreRun: func(*cobra.Command, []string) { *reached = true },
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return &classifiedError{class: errUsage, err: singleDashHint(err)}
	})
	// cobra's own 'completion bash|zsh|fish|powershell'; its scripts call
	// the hidden __complete command, which needs no passphrase.
	root.CompletionOptions.HiddenDefaultCmd = false
	root.SetVersionTemplate("twincrypt {{.Version}}\n")
	// cobra's default help template, plus the exit codes after the root's
	// flags, where cryptsetup and gocryptfs put them too.
	root.SetHelpTemplate(`{{with (or .Long .Short)}}{{. | trimTrailingWhitespaces}}

{{end}}{{if or .Runnable .HasSubCommands}}{{.UsageString}}{{end}}{{if not .HasParent}}
` + exitCodeHelp() + `
{{end}}`)

	root.AddCommand(
		newInitCmd(),
		newMountCmd(),
		newUmountCmd(),
		newBenchCmd(),
		newStatsCmd(),
		newReportCmd(),
		newFsckCmd(), newPasswdCmd(), newInfoCmd(), newPathCmd(),
		newSpeedCmd(),
		newTraceCmd(),
		newBlockdevCmd(),
		newManCmd(),
		newEcryptfsCmd(),
	)
	// Added now rather than by Execute, so that the command list (the
	// mount helper form checks it) has it.
	root.InitDefaultCompletionCmd()
	registerFlagValues(root)
	return root, reached
}

// exactArgs is cobra.ExactArgs with a message that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return fmt.Errorf("%s needs %s, got %d argument(s)", c.CommandPath(), names, len(args))
		}
		return nil
	}
}
