package integration

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
)

// ExamplePassphrase unlocks every frozen example volume in testdata/.
const ExamplePassphrase = "twincrypt-example"

// ManifestFile is the name of the manifest next to the example volumes.
const ManifestFile = "example-manifest.json"

// Manifest describes the plaintext view of every frozen example volume,
// as the mount showed it when the volumes were made (see cmd/mkexample).
type Manifest struct {
	Comment    []string         `json:"comment"`
	Passphrase string           `json:"passphrase"`
	Volumes    []ManifestVolume `json:"volumes"`
}

// ManifestVolume is one example volume: its config choices and its tree.
type ManifestVolume struct {
	Name           string `json:"name"` // directory under testdata/
	Cipher         string `json:"cipher"`
	KeyBytes       int    `json:"key_bytes"`
	PlaintextNames bool   `json:"plaintext_names"`
	// Version is the config format version; absent (0) means 1, which
	// the volumes frozen before version 2 existed do not state.
	Version int     `json:"version,omitempty"`
	Entries []Entry `json:"entries"`
}

// Entry is one path of a mounted tree (the mount root itself excluded).
type Entry struct {
	// Path is slash-separated and relative to the mount root.
	Path string `json:"path"`
	// Type is "dir", "file" or "symlink".
	Type string `json:"type"`
	// Mode is the permission bits, in octal, as made. Git keeps only the
	// owner-execute bit of files, so that is all the test compares.
	Mode string `json:"mode"`
	// Size is the content size of a file, the target length of a symlink,
	// 0 for a directory.
	Size int64 `json:"size"`
	// SHA256 is the hex SHA-256 of a file's content or a symlink's target.
	SHA256 string `json:"sha256,omitempty"`
	// Target is a symlink's target.
	Target string `json:"target,omitempty"`
	// HardLinkOf names the path this file was a hard link of when made.
	// Git stores the two names as two files, so the test checks only that
	// both read the same content.
	HardLinkOf string `json:"hardlink_of,omitempty"`
}

// Hex returns the hex SHA-256 of b.
func Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// WalkTree lists every path under root (root excluded) in lexical order,
// reading each file whole. Files that share an inode are reported as
// hard links of the first path met.
func WalkTree(root string) ([]Entry, error) {
	var out []Entry
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		e := Entry{Path: filepath.ToSlash(rel), Mode: fmt.Sprintf("%04o", st.Mode&0o7777)}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFDIR:
			e.Type = "dir"
		case syscall.S_IFREG:
			e.Type = "file"
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if int64(len(b)) != st.Size {
				return fmt.Errorf("%s: stat says %d bytes, reading gives %d", p, st.Size, len(b))
			}
			e.Size, e.SHA256 = st.Size, Hex(b)
			if st.Nlink > 1 {
				k := inode{uint64(st.Dev), uint64(st.Ino)}
				if first, ok := seen[k]; ok {
					e.HardLinkOf = first
				} else {
					seen[k] = e.Path
				}
			}
		case syscall.S_IFLNK:
			e.Type = "symlink"
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.Size, e.Target, e.SHA256 = st.Size, target, Hex([]byte(target))
		default:
			return fmt.Errorf("%s: unexpected file type %#o", p, st.Mode&syscall.S_IFMT)
		}
		out = append(out, e)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, err
}

// ReadManifest loads a manifest file.
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &m, nil
}
