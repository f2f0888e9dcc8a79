package ecryptfs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/ecryptfs"
	"github.com/twincrypt/twincrypt/fs"
)

// kernelManifest is the manifest integration/kvm writes beside the lower
// trees the kernel's eCryptfs made (see cipher/ecryptfs/kernel_test.go).
type kernelManifest struct {
	Passphrase string `json:"passphrase"`
	Salt       string `json:"salt"`
	Trees      []struct {
		Name    string          `json:"name"`
		Lower   string          `json:"lower"`
		Entries []manifestEntry `json:"entries"`
	} `json:"trees"`
}

type manifestEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   string `json:"mode"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	Target string `json:"target"`
	Mtime  int64  `json:"mtime"`
}

// checkManifest compares the plaintext tree at dst with the kernel's view.
// inGit: the tree came from git, which keeps neither modes (but the x
// bit) nor mtimes, so those are not compared.
func checkManifest(t *testing.T, dst string, entries []manifestEntry, inGit bool) {
	t.Helper()
	for _, e := range entries {
		p := filepath.Join(dst, e.Path)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", e.Path, err)
			continue
		}
		mode := fmt.Sprintf("%o", fi.Mode().Perm())
		if inGit {
			mode = e.Mode
		} else if fi.ModTime().Unix() != e.Mtime {
			t.Errorf("%s: mtime %d, the kernel showed %d", e.Path, fi.ModTime().Unix(), e.Mtime)
		}
		switch e.Type {
		case "f":
			f, err := os.Open(p)
			must(t, err)
			h := sha256.New()
			n, _ := io.Copy(h, f)
			f.Close()
			if got := fmt.Sprintf("%x", h.Sum(nil)); got != e.SHA256 || n != e.Size || mode != e.Mode {
				t.Errorf("%s: %d bytes %s mode %s, the kernel showed %d bytes %s mode %s", e.Path, n, got, mode, e.Size, e.SHA256, e.Mode)
			}
		case "l":
			if got, _ := os.Readlink(p); got != e.Target {
				t.Errorf("%s: target %q, the kernel showed %q", e.Path, got, e.Target)
			}
		case "d":
			if !fi.IsDir() || mode != e.Mode {
				t.Errorf("%s: %v, the kernel showed a directory of mode %s", e.Path, fi.Mode(), e.Mode)
			}
		}
	}
}

func kernelManifests() []string {
	cache := os.Getenv("TWINCRYPT_VM_CACHE")
	if cache == "" {
		cache = "/var/cache/twincrypt-vm"
	}
	return []string{"../../testdata/ecryptfs/manifest.json", filepath.Join(cache, "ecryptfs-reference", "manifest.json")}
}

// TestImportKernelTrees imports every kernel-written reference tree into
// a plain directory and checks the copy against what the kernel's own
// mount showed; the hard link of the full trees stays one.
func TestImportKernelTrees(t *testing.T) {
	found := 0
	for _, mf := range kernelManifests() {
		b, err := os.ReadFile(mf)
		if os.IsNotExist(err) {
			continue
		}
		must(t, err)
		found++
		var m kernelManifest
		must(t, json.Unmarshal(b, &m))
		salt, err := hex.DecodeString(m.Salt)
		must(t, err)
		kr := ecryptfs.NewKeyring()
		must(t, kr.AddPassphrase(m.Passphrase, salt, ecryptfs.FNEKSalt))
		for _, tr := range m.Trees {
			t.Run(tr.Name, func(t *testing.T) {
				src := filepath.Join(filepath.Dir(mf), tr.Lower)
				before := snapshot(t, src)
				dst := t.TempDir()
				rep, err := Import(src, kr, dst, ImportOptions{Journal: filepath.Join(t.TempDir(), "journal")})
				if err != nil {
					t.Fatalf("%v %+v", err, rep.Failures)
				}
				checkManifest(t, dst, tr.Entries, strings.Contains(mf, "testdata/"))
				a, err1 := os.Stat(filepath.Join(dst, "size-1"))
				h, err2 := os.Stat(filepath.Join(dst, "hardlink-to-size-1"))
				if err1 == nil && err2 == nil && !os.SameFile(a, h) {
					t.Errorf("hardlink-to-size-1 was imported as a copy, not a link")
				}
				if after := snapshot(t, src); after != before {
					t.Errorf("the import changed the source tree")
				}
				t.Logf("%s: %d entries imported and checked", tr.Name, rep.Entries)
			})
		}
	}
	if found == 0 {
		t.Skip("no kernel-written eCryptfs tree (testdata/ecryptfs or the VM cache's ecryptfs-reference): run integration/kvm's TestEcryptfsReferenceTrees")
	}
}

// TestMountKernelTrees mounts every kernel-written reference tree
// read-only and checks what it shows against the kernel's view.
func TestMountKernelTrees(t *testing.T) {
	requireFUSE(t)
	found := 0
	for _, mf := range kernelManifests() {
		b, err := os.ReadFile(mf)
		if os.IsNotExist(err) {
			continue
		}
		must(t, err)
		found++
		var m kernelManifest
		must(t, json.Unmarshal(b, &m))
		salt, err := hex.DecodeString(m.Salt)
		must(t, err)
		kr := ecryptfs.NewKeyring()
		must(t, kr.AddPassphrase(m.Passphrase, salt, ecryptfs.FNEKSalt))
		for _, tr := range m.Trees {
			t.Run(tr.Name, func(t *testing.T) {
				mnt := t.TempDir()
				srv, err := Mount(filepath.Join(filepath.Dir(mf), tr.Lower), mnt, kr, MountOptions{Log: zerolog.Nop()})
				must(t, err)
				t.Cleanup(func() { unmount(srv) })
				must(t, srv.WaitMount())
				checkManifest(t, mnt, tr.Entries, strings.Contains(mf, "testdata/"))
			})
		}
	}
	if found == 0 {
		t.Skip("no kernel-written eCryptfs tree (testdata/ecryptfs or the VM cache's ecryptfs-reference): run integration/kvm's TestEcryptfsReferenceTrees")
	}
}

// TestImportVolumeKernelTrees imports every kernel-written tree into a new
// twincrypt volume and checks the volume, mounted afresh, against the
// kernel's view: from eCryptfs on disk to twincrypt on disk.
func TestImportVolumeKernelTrees(t *testing.T) {
	requireFUSE(t)
	found := 0
	for _, mf := range kernelManifests() {
		b, err := os.ReadFile(mf)
		if os.IsNotExist(err) {
			continue
		}
		must(t, err)
		found++
		var m kernelManifest
		must(t, json.Unmarshal(b, &m))
		salt, err := hex.DecodeString(m.Salt)
		must(t, err)
		kr := ecryptfs.NewKeyring()
		must(t, kr.AddPassphrase(m.Passphrase, salt, ecryptfs.FNEKSalt))
		for _, tr := range m.Trees {
			t.Run(tr.Name, func(t *testing.T) {
				vol := filepath.Join(t.TempDir(), "vol")
				pass := []byte("volume passphrase")
				rep, err := ImportVolume(filepath.Join(filepath.Dir(mf), tr.Lower), kr, vol,
					VolumeOptions{Passphrase: pass, Config: cheapConfig(), Log: zerolog.Nop()})
				if err != nil {
					t.Fatalf("%v %+v", err, rep.Failures)
				}
				cfg, err := config.Load(vol)
				must(t, err)
				master, err := cfg.Unlock(pass)
				must(t, err)
				mnt := t.TempDir()
				srv, err := fs.Mount(mnt, fs.Options{Lower: vol, Config: cfg, MasterKey: master, ReadOnly: true, Log: zerolog.Nop()})
				must(t, err)
				t.Cleanup(func() { unmount(srv) })
				must(t, srv.WaitMount())
				checkManifest(t, mnt, tr.Entries, strings.Contains(mf, "testdata/"))
			})
		}
	}
	if found == 0 {
		t.Skip("no kernel-written eCryptfs tree (testdata/ecryptfs or the VM cache's ecryptfs-reference): run integration/kvm's TestEcryptfsReferenceTrees")
	}
}
