package main

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/fs/fsck"
	"github.com/twincrypt/twincrypt/measure/printable"
)

// volumeInfo is what info prints; its JSON form is the --json output.
type volumeInfo struct {
	Lower          string       `json:"lower"`
	Config         string       `json:"config"`
	Creator        string       `json:"creator"`
	Version        int          `json:"version"`
	Cipher         string       `json:"cipher"`
	ContentSpec    string       `json:"content_spec"`
	KeyBytes       int          `json:"key_bytes"`
	KeyBits        int          `json:"key_bits"`
	AES            string       `json:"aes"`
	PlaintextNames bool         `json:"plaintext_names"`
	KDF            kdfInfo      `json:"kdf"`
	MountedAt      string       `json:"mounted_at,omitempty"`
	Contents       *fsck.Census `json:"contents"`
}

// kdfInfo is kdf.Params without the salt's value: its length is enough.
type kdfInfo struct {
	Algorithm  string `json:"algorithm"`
	SaltBytes  int    `json:"salt_bytes"`
	Time       uint32 `json:"time,omitempty"`
	MemoryKiB  uint32 `json:"memory_kib,omitempty"`
	Threads    uint8  `json:"threads,omitempty"`
	LogN       int    `json:"log_n,omitempty"`
	R          int    `json:"r,omitempty"`
	P          int    `json:"p,omitempty"`
	Iterations int    `json:"iterations,omitempty"`
	Hash       string `json:"hash,omitempty"`
}

func newInfoCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info [flags] LOWER",
		Short: "Show a volume's config and what LOWER holds, without unlocking",
		Long: `Show what the config of the volume in LOWER says (creator, format version,
cipher and key size, whether names are encrypted, the key derivation function
and its costs) and count what LOWER holds: directories, files, symlinks,
plaintext and lower bytes, and the metadata the mount hides. No passphrase
is asked: none of this is secret. Files whose lower size is not a valid
encrypted size are counted as torn; 'twincrypt fsck' tells more.`,
		Example: `  twincrypt info ~/vault.enc
  twincrypt info --json ~/vault.enc | jq .kdf`,
		Args: exactArgs(1, "LOWER"),
		RunE: func(cmd *cobra.Command, args []string) error {
			lower, err := realDir(args[0], "LOWER")
			if err != nil {
				return err
			}
			cfg, err := config.Load(lower)
			if err != nil {
				return fmt.Errorf("load config of %s: %w", lower, err)
			}
			census, err := fsck.Count(lower, cfg.PlaintextNames)
			if err != nil {
				return err
			}
			info := newVolumeInfo(lower, cfg, census)
			info.MountedAt = mountedAt(lower)
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(info)
			}
			info.print(out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newVolumeInfo(lower string, c *config.Config, census *fsck.Census) *volumeInfo {
	return &volumeInfo{
		Lower:          lower,
		Config:         filepath.Join(lower, config.FileName),
		Creator:        c.Creator,
		Version:        c.Version,
		Cipher:         c.Cipher,
		ContentSpec:    c.ContentSpec(),
		KeyBytes:       c.KeyBytes,
		KeyBits:        c.KeyBytes * 8,
		AES:            aesName(c.Cipher, c.KeyBytes),
		PlaintextNames: c.PlaintextNames,
		KDF: kdfInfo{
			Algorithm: c.KDF.Algorithm, SaltBytes: len(c.KDF.Salt),
			Time: c.KDF.Time, MemoryKiB: c.KDF.MemoryKiB, Threads: c.KDF.Threads,
			LogN: c.KDF.LogN, R: c.KDF.R, P: c.KDF.P,
			Iterations: c.KDF.Iterations, Hash: c.KDF.Hash,
		},
		Contents: census,
	}
}

// aesName names the block cipher strength: XTS splits its key in two.
func aesName(cipher string, keyBytes int) string {
	switch cipher {
	case "aes-xts":
		return fmt.Sprintf("AES-%d-XTS", keyBytes*4)
	case "aes-cbc":
		return fmt.Sprintf("AES-%d-CBC-ESSIV", keyBytes*8)
	}
	return cipher
}

func (v *volumeInfo) print(w io.Writer) {
	names := "encrypted (EME, AES-256)"
	if v.PlaintextNames {
		names = "plaintext"
	}
	p := kdf.Params{Algorithm: v.KDF.Algorithm, Time: v.KDF.Time, MemoryKiB: v.KDF.MemoryKiB, Threads: v.KDF.Threads,
		LogN: v.KDF.LogN, R: v.KDF.R, P: v.KDF.P, Iterations: v.KDF.Iterations, Hash: v.KDF.Hash}
	row := func(k, format string, a ...any) { fmt.Fprintf(w, "%-10s %s\n", k+":", fmt.Sprintf(format, a...)) }
	row("lower", "%s", v.Lower)
	if v.MountedAt != "" {
		row("mounted", "at %s", v.MountedAt)
	}
	// Not authenticated (anyone who can write LOWER can change it):
	// quoted if it holds control characters.
	row("creator", "%s", printable.String(v.Creator))
	row("version", "%d", v.Version)
	row("cipher", "%s (%s), %d-bit key, %s", v.Cipher, v.ContentSpec, v.KeyBits, v.AES)
	row("names", "%s", names)
	row("kdf", "%s, %d-byte salt", kdfSummary(p), v.KDF.SaltBytes)
	c := v.Contents
	row("contents", "%s, %s, %s, %d other",
		plural(int(c.Dirs), "directory"), plural(int(c.Files), "file"), plural(int(c.Symlinks), "symlink"), c.Other)
	row("size", "%s of plaintext in %s of lower files (%s allocated)",
		humanSize(c.PlainBytes), humanSize(c.LowerBytes), humanSize(c.AllocatedBytes))
	if !v.PlaintextNames {
		row("metadata", "%s, %s", plural(int(c.DirIVs), "directory IV"), plural(int(c.Sidecars), "long-name sidecar"))
	}
	if c.TornFiles > 0 {
		row("warning", "%s with an invalid lower size (run twincrypt fsck)", plural(int(c.TornFiles), "file"))
	}
	if c.ConfigLeftovers > 0 {
		row("warning", "%s of an interrupted config write (run twincrypt fsck)", plural(int(c.ConfigLeftovers), "leftover"))
	}
	if c.Unreadable > 0 {
		row("warning", "%s could not be listed", plural(int(c.Unreadable), "directory"))
	}
}

// humanSize renders a byte count with a binary unit.
func humanSize(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
