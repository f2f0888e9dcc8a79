package ecryptfs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kernelManifest is what integration/kvm writes next to the lower trees
// the kernel's eCryptfs made in a VM: for each tree, every entry as the
// kernel's own mount showed it.
type kernelManifest struct {
	Passphrase string `json:"passphrase"`
	Salt       string `json:"salt"`
	Trees      []struct {
		Name           string `json:"name"`
		Lower          string `json:"lower"`
		KeyBytes       int    `json:"key_bytes"`
		FilenameCrypto bool   `json:"filename_crypto"`
		XattrMetadata  bool   `json:"xattr_metadata"`
		Sig            string `json:"sig"`
		FnekSig        string `json:"fnek_sig"`
		Kernel         string `json:"kernel"`
		Entries        []struct {
			Path   string `json:"path"`
			Type   string `json:"type"`
			Mode   string `json:"mode"`
			Size   int64  `json:"size"`
			SHA256 string `json:"sha256"`
			Target string `json:"target"`
		} `json:"entries"`
	} `json:"trees"`
}

// kernelManifests are the places reference trees are kept: the small
// example committed to testdata, and the full set the VM test leaves in
// its cache (TWINCRYPT_VM_CACHE, default /var/cache/twincrypt-vm).
func kernelManifests() []string {
	cache := os.Getenv("TWINCRYPT_VM_CACHE")
	if cache == "" {
		cache = "/var/cache/twincrypt-vm"
	}
	return []string{"../../testdata/ecryptfs/manifest.json", filepath.Join(cache, "ecryptfs-reference", "manifest.json")}
}

// TestKernelTrees reads every tree the kernel wrote and compares each
// entry with what the kernel's mount showed: names, types, modes, sizes,
// the SHA-256 of every file, link targets. The passphrase's keys must
// match the signatures the kernel printed.
func TestKernelTrees(t *testing.T) {
	found := 0
	for _, mf := range kernelManifests() {
		b, err := os.ReadFile(mf)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		found++
		// Git keeps neither modes (but the x bit) nor mtimes: the
		// committed trees are checked on everything else.
		inGit := strings.Contains(mf, "testdata/")
		var m kernelManifest
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("%s: %v", mf, err)
		}
		salt, err := hex.DecodeString(m.Salt)
		if err != nil {
			t.Fatal(err)
		}
		kr := NewKeyring()
		if err := kr.AddPassphrase(m.Passphrase, salt, FNEKSalt); err != nil {
			t.Fatal(err)
		}
		for _, tr := range m.Trees {
			t.Run(tr.Name, func(t *testing.T) {
				checkSig(t, kr, tr.Sig)
				if tr.FilenameCrypto {
					checkSig(t, kr, tr.FnekSig)
				}
				root := filepath.Join(filepath.Dir(mf), tr.Lower)
				got := map[string]string{}
				err := Walk(root, kr, func(e Entry) error {
					if e.Err != nil {
						return fmt.Errorf("%s: %w", e.LowerRel, e.Err)
					}
					got[e.Rel] = describe(t, root, e, kr, inGit)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for _, want := range tr.Entries {
					p := filepath.ToSlash(filepath.Clean(want.Path))
					mode := want.Mode
					if inGit {
						mode = "-"
					}
					w := fmt.Sprintf("%s %s %d %s %s", want.Type, mode, want.Size, want.SHA256, want.Target)
					switch want.Type {
					case "d":
						w = fmt.Sprintf("d %s", mode)
					case "l": // the manifest gives a link its target only
						w = "l " + want.Target
					}
					if got[p] != w {
						t.Errorf("%s: read %q, the kernel showed %q", p, got[p], w)
					}
					delete(got, p)
				}
				for p := range got {
					t.Errorf("%s: read, but the kernel showed no such entry", p)
				}
				t.Logf("%d entries of %s (kernel %s) read identically", len(tr.Entries), tr.Name, tr.Kernel)
			})
		}
	}
	if found == 0 {
		t.Skip("no kernel-written eCryptfs tree (testdata/ecryptfs or the VM cache's ecryptfs-reference): run integration/kvm's TestEcryptfsReferenceTrees")
	}
}

func checkSig(t *testing.T, kr *Keyring, sig string) {
	t.Helper()
	var s [SigSize]byte
	if _, err := hex.Decode(s[:], []byte(sig)); err != nil || kr.Lookup(s) == nil {
		t.Errorf("the passphrase gives no key with the kernel's signature %s (have %v)", sig, kr.Sigs())
	}
}

// describe renders an entry the way the manifest does.
func describe(t *testing.T, root string, e Entry, kr *Keyring, noMode bool) string {
	mode := fmt.Sprintf("%o", e.Info.Mode().Perm()|e.Info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	if noMode {
		mode = "-"
	}
	switch {
	case e.Info.IsDir():
		return "d " + mode
	case e.Info.Mode()&fs.ModeSymlink != 0:
		return "l " + e.Target
	case e.Info.Mode().IsRegular():
		f, fd, err := OpenPath(filepath.Join(root, e.LowerRel), kr)
		if err != nil {
			return "error: " + err.Error()
		}
		defer fd.Close()
		h := sha256.New()
		if _, err := io.Copy(h, io.NewSectionReader(f, 0, f.Size())); err != nil {
			return "error: " + err.Error()
		}
		return fmt.Sprintf("f %s %d %x ", mode, f.Size(), h.Sum(nil))
	}
	return "other"
}
