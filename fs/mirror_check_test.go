package fs

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMirrorRefusesMismatch: mirror mode over a volume that already has
// files is refused unless the mirror directory holds a copy of its
// plaintext (top level); with such a copy, operations on the old files
// succeed on both sides and the two trees stay equal. A mirror with files
// the volume lacks is refused too.
func TestMirrorRefusesMismatch(t *testing.T) {
	for _, v := range []variant{variants[0], variants[1],
		{name: "plainnames", cipher: "aes-xts", keyBytes: 64, plaintextNames: true}, variants[2]} {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			tm.mount(t)
			must(t, os.WriteFile(filepath.Join(tm.mnt, "old.txt"), []byte("written before mirroring\n"), 0644))
			must(t, os.Mkdir(filepath.Join(tm.mnt, "dir"), 0755))
			must(t, os.WriteFile(filepath.Join(tm.mnt, "dir", "inner"), []byte("inner\n"), 0600))
			copyOf := t.TempDir()
			if out, err := exec.Command("cp", "-a", tm.mnt+"/.", copyOf+"/").CombinedOutput(); err != nil {
				t.Fatalf("cp -a: %v %s", err, out)
			}
			tm.unmountNow(t)

			refused := func(mirror, wantInMsg string) {
				t.Helper()
				o := Options{Lower: tm.lower, Config: tm.cfg, MasterKey: tm.master, Mirror: mirror}
				srv, err := Mount(tm.mnt, o)
				if err == nil {
					srv.Unmount()
					t.Fatalf("mirror %s over a volume with other files was mounted", mirror)
				}
				if !errors.Is(err, ErrMirrorMismatch) || !strings.Contains(err.Error(), wantInMsg) {
					t.Fatalf("Mount: %v; want ErrMirrorMismatch naming %s", err, wantInMsg)
				}
				if ents, _ := os.ReadDir(tm.mnt); len(ents) != 0 {
					t.Fatalf("mount point not empty after the refusal: %v", ents)
				}
			}
			refused(t.TempDir(), `"dir", "old.txt"`)
			wrong := t.TempDir()
			must(t, os.WriteFile(filepath.Join(wrong, "old.txt"), nil, 0644))
			must(t, os.WriteFile(filepath.Join(wrong, "dir"), nil, 0644)) // a file, not a directory
			must(t, os.WriteFile(filepath.Join(wrong, "stray"), nil, 0644))
			refused(wrong, `the mirror has "dir", "stray"`)

			tm.unmounted = false
			tm.mount(t, func(o *Options) { o.Mirror = copyOf })
			f, err := os.OpenFile(filepath.Join(tm.mnt, "old.txt"), os.O_WRONLY|os.O_APPEND, 0)
			must(t, err)
			_, err = f.WriteString("appended while mirrored\n")
			must(t, err)
			must(t, f.Close())
			must(t, os.Rename(filepath.Join(tm.mnt, "dir", "inner"), filepath.Join(tm.mnt, "moved")))
			compareTrees(t, tm.mnt, copyOf)
		})
	}
}

// TestMirrorEmptyVolume: an empty volume with an empty mirror mounts.
func TestMirrorEmptyVolume(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			tm := newVolume(t, v)
			twin := t.TempDir()
			tm.mount(t, func(o *Options) { o.Mirror = twin })
			must(t, os.WriteFile(filepath.Join(tm.mnt, "f"), []byte("x"), 0644))
			compareTrees(t, tm.mnt, twin)
		})
	}
}
