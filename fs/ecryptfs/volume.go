package ecryptfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
	"github.com/twincrypt/twincrypt/fs"
)

// VolumeOptions configure ImportVolume.
type VolumeOptions struct {
	ImportOptions
	// Passphrase of the new volume (of the existing one when resuming).
	Passphrase []byte
	// Config chooses the new volume's cipher and KDF (as twincrypt init).
	Config config.Options
	// Log receives the mount's warnings.
	Log zerolog.Logger
}

// JournalPath is where ImportVolume keeps its journal by default: next to
// the new volume, not in it, so that the volume holds only the imported
// tree.
func JournalPath(newVol string) string {
	return filepath.Clean(newVol) + ".ecryptfs-import"
}

// ImportVolume imports the eCryptfs lower tree src into the twincrypt
// volume newVol: it creates the volume (newVol missing or empty), or
// opens it to resume an import its journal records, mounts it in-process
// through the fs engine, so that what lands on disk is written by
// twincrypt's own filesystem, and runs Import into the mount.
func ImportVolume(src string, kr *ecryptfs.Keyring, newVol string, o VolumeOptions) (*Report, error) {
	if o.Journal == "" {
		o.Journal = JournalPath(newVol)
	}
	cfg, master, err := openOrCreate(newVol, o)
	if err != nil {
		return nil, err
	}
	defer clear(master)
	mnt, err := os.MkdirTemp("", "twincrypt-ecryptfs-import-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(mnt)
	srv, err := fs.Mount(mnt, fs.Options{Lower: newVol, Config: cfg, MasterKey: master, Log: o.Log,
		FSName: newVol})
	if err != nil {
		return nil, fmt.Errorf("mount the new volume %s: %w", newVol, err)
	}
	if err := srv.WaitMount(); err != nil {
		return nil, err
	}
	rep, ierr := Import(src, kr, mnt, o.ImportOptions)
	if err := unmount(srv); err != nil && ierr == nil {
		ierr = fmt.Errorf("unmount the new volume: %w", err)
	}
	return rep, ierr
}

func openOrCreate(dir string, o VolumeOptions) (*config.Config, []byte, error) {
	if _, err := os.Stat(filepath.Join(dir, config.FileName)); err == nil {
		if _, err := os.Stat(o.Journal); err != nil {
			return nil, nil, fmt.Errorf("%s is already a twincrypt volume and no import journal (%s) says this import began it: import into a new volume", dir, o.Journal)
		}
		cfg, err := config.Load(dir)
		if err != nil {
			return nil, nil, err
		}
		master, err := cfg.Unlock(o.Passphrase)
		if err != nil {
			return nil, nil, err
		}
		return cfg, master, nil
	}
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, nil, err
	}
	if o.Config.Creator == "" {
		o.Config.Creator = "twincrypt ecryptfs import"
	}
	cfg, master, err := config.Create(dir, o.Passphrase, o.Config)
	if err != nil {
		return nil, nil, fmt.Errorf("create the new volume %s: %w", dir, err)
	}
	if err := fs.InitLower(dir, cfg); err != nil {
		clear(master)
		return nil, nil, err
	}
	return cfg, master, nil
}

func unmount(srv *fuse.Server) error {
	var err error
	for i := 0; i < 100; i++ {
		if err = srv.Unmount(); err == nil {
			fs.WaitEnd(srv)
			return nil
		}
		// Busy: the kernel may still hold a file the verification closed.
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
