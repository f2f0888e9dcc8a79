package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/kdf"
	"github.com/twincrypt/twincrypt/fs/fsck"
)

// runInitRecover is init --masterkey(-file): a new config for the volume
// in LOWER, whose config is lost, around the master key the user kept.
// Nothing is written unless the data confirms the key (or, where nothing
// can, --force says to go ahead).
func runInitRecover(cmd *cobra.Command, f initFlags, keyBytes int, params kdf.Params, lowerArg string) error {
	lower, err := realDir(lowerArg, "LOWER")
	if err != nil {
		return err
	}
	if _, err := os.Lstat(filepath.Join(lower, config.FileName)); err == nil {
		return fmt.Errorf("init %s: %w; to set a new passphrase with the master key use 'twincrypt passwd --masterkey-file FILE'; move a damaged config away first",
			lower, config.ErrExists)
	}
	settings := &config.Config{Version: config.Version, Cipher: f.cipher, KeyBytes: keyBytes, PlaintextNames: f.plaintextNames}
	stderr := cmd.ErrOrStderr()
	lk, err := f.mk.read(os.Stdin, stderr)
	if err != nil {
		return err
	}
	defer lk.Destroy()
	key := lk.Bytes()
	checked, err := verifyMasterKey(lower, settings, key, f.force)
	if errors.Is(err, fsck.ErrSettings) && f.cipher == "aes-cbc" {
		// The file headers may say aes-cbc over whole extents: a volume
		// made before config version 2. Its new config keeps version 1.
		old := *settings
		old.Version = 1
		if c, err1 := verifyMasterKey(lower, &old, key, f.force); err1 == nil {
			settings, checked, err = &old, c+" (a version 1 volume: aes-cbc over whole extents)", nil
		}
	}
	if err != nil {
		if errors.Is(err, errWrongMasterKey) || errors.Is(err, errUsage) {
			return fmt.Errorf("init %s: %w; nothing was written", lower, err)
		}
		return fmt.Errorf("init %s: %w; check that LOWER is the volume, or add --force to write the config anyway", lower, err)
	}

	src := f.source(stderr)
	if !src.given() {
		fmt.Fprintf(stderr, "New passphrase for %s\n", lower)
	}
	pass, err := src.read(true)
	if err != nil {
		return err
	}
	defer wipe(pass)
	// The version a fresh init writes (0), but for a version 1 aes-cbc
	// volume, whose extent-long CBC only version 1 describes.
	version := 0
	if settings.Version == 1 {
		version = 1
	}
	cfg, err := config.Recreate(lower, pass, key, config.Options{
		Version:        version,
		Cipher:         f.cipher,
		KeyBytes:       keyBytes,
		PlaintextNames: f.plaintextNames,
		KDF:            params,
		Creator:        "twincrypt " + buildVersion() + " (recovered)",
	})
	if err != nil {
		if errors.Is(err, kdf.ErrParams) {
			return &classifiedError{class: errUsage, err: fmt.Errorf("init %s: %w", lower, err)}
		}
		return fmt.Errorf("init %s: %w", lower, err)
	}
	if !f.quiet {
		out := cmd.OutOrStdout()
		fmt.Fprintf(out, "%s: %s\n", lower, checked)
		fmt.Fprintf(out, "Wrote a new %s for the %s\n", config.FileName, initSummary(lower, cfg))
	}
	return nil
}
