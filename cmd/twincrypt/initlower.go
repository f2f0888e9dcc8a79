package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// initLowerPath resolves init's LOWER. A LOWER that does not exist yet is
// fine (missing is true): init creates it, once the passphrase is read,
// in a parent directory that must exist; a dangling symlink is refused
// rather than followed to wherever it points.
func initLowerPath(arg string) (lower string, missing bool, err error) {
	abs, err := filepath.Abs(arg)
	if err != nil {
		return "", false, fmt.Errorf("LOWER %s: %w", arg, err)
	}
	if _, err := os.Lstat(abs); err == nil || !errors.Is(err, os.ErrNotExist) {
		lower, err := realDir(arg, "LOWER")
		return lower, false, err
	}
	parent, err := realDir(filepath.Dir(abs), "parent directory of LOWER")
	if err != nil {
		return "", false, err
	}
	return filepath.Join(parent, filepath.Base(abs)), true, nil
}

// createLower makes init's missing LOWER with mode 0700 (whatever the
// umask): it will hold the config and every encrypted name, which are
// nobody else's business. If it appeared meanwhile, init's emptiness
// check decides.
func createLower(lower string) error {
	if err := os.Mkdir(lower, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil
		}
		return fmt.Errorf("create LOWER: %w", err)
	}
	if err := os.Chmod(lower, 0o700); err != nil {
		return fmt.Errorf("create LOWER: %w", err)
	}
	return nil
}
