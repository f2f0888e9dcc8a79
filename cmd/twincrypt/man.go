package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// manCmdName is the hidden command behind 'make man'.
const manCmdName = "gen-man"

// newManCmd writes one man page per command, generated from the same
// help text that --help prints, so the two cannot drift apart. Hidden:
// packagers and 'make man' call it, users read the result.
func newManCmd() *cobra.Command {
	return &cobra.Command{
		Use:    manCmdName + " DIR",
		Short:  "Write the man pages (section 1) of every command into DIR",
		Hidden: true,
		Args:   exactArgs(1, "DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := writeManPages(cmd.Root(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "Wrote %d man pages to %s\n", n, args[0])
			return nil
		},
	}
}

// writeManPages generates twincrypt.1, twincrypt-mount.1, … into dir and
// returns how many. The date comes from SOURCE_DATE_EPOCH when set
// (reproducible builds), and no "auto generated" line is added.
func writeManPages(root *cobra.Command, dir string) (int, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("man pages: %w", err)
	}
	root.DisableAutoGenTag = true
	header := &doc.GenManHeader{
		Title:   "TWINCRYPT",
		Section: "1",
		Source:  "twincrypt " + buildVersion(),
		Manual:  "twincrypt manual",
	}
	if err := doc.GenManTree(root, header, dir); err != nil {
		return 0, fmt.Errorf("man pages: %w", err)
	}
	if err := addExitStatus(filepath.Join(dir, "twincrypt.1")); err != nil {
		return 0, fmt.Errorf("man pages: %w", err)
	}
	n := 0
	var count func(c *cobra.Command)
	count = func(c *cobra.Command) {
		n++
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
				count(sub)
			}
		}
	}
	count(root)
	return n, nil
}

// addExitStatus puts the exit code table, which the root's --help prints
// after its flags, into the root's man page as an EXIT STATUS section
// (before SEE ALSO, where man-pages(7) puts it): cobra/doc knows only the
// help text's Long, not the template that adds the table.
func addExitStatus(page string) error {
	data, err := os.ReadFile(page)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString(".SH EXIT STATUS\n")
	for _, e := range exitCodeDoc {
		fmt.Fprintf(&b, ".TP\n.B %d\n%s\n", e.code, strings.ReplaceAll(oneLine(e.meaning), "-", "\\-"))
	}
	text := string(data)
	at := strings.Index(text, ".SH SEE ALSO")
	if at < 0 {
		at = len(text)
	}
	text = text[:at] + b.String() + "\n" + text[at:]
	return os.WriteFile(page, []byte(text), 0o644)
}
