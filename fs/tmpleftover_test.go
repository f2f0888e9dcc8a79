package fs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/names"
)

// TestTmpLeftoverRmdir: a metadata file that a crash left half-written
// (writeSmallFile writes under names.TmpPrefix, then renames) is no entry
// of the view, so it must not keep an otherwise empty directory from being
// removed or replaced by a rename, as an empty native directory would be.
func TestTmpLeftoverRmdir(t *testing.T) {
	requireFUSE(t)
	for _, v := range []variant{variants[0], variants[1]} {
		t.Run(v.name, func(t *testing.T) {
			tm := mountVariant(t, v)
			for _, d := range []string{"gone", "over", "src"} {
				must(t, os.Mkdir(filepath.Join(tm.mnt, d), 0755))
			}
			// The lower directories are the only ones in LOWER's root.
			entries, err := os.ReadDir(tm.lower)
			must(t, err)
			planted := 0
			for _, e := range entries {
				if e.IsDir() {
					p := filepath.Join(tm.lower, e.Name(), names.TmpPrefix+"0123456789abcdef")
					must(t, os.WriteFile(p, []byte("half"), 0400))
					planted++
				}
			}
			if planted != 3 {
				t.Fatalf("found %d lower directories, want 3", planted)
			}
			if err := os.Remove(filepath.Join(tm.mnt, "gone")); err != nil {
				t.Errorf("rmdir of an empty directory with a leftover temporary file: %v (native: success)", err)
			}
			// rename(2) itself: os.Rename refuses any existing directory.
			if err := unix.Rename(filepath.Join(tm.mnt, "src"), filepath.Join(tm.mnt, "over")); err != nil {
				t.Errorf("rename over an empty directory with a leftover temporary file: %v (native: success)", err)
			}
			left, err := os.ReadDir(tm.mnt)
			must(t, err)
			if len(left) != 1 || left[0].Name() != "over" {
				t.Errorf("listing after rmdir and rename: %v, want [over]", left)
			}
		})
	}
}
