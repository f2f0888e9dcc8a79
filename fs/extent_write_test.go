package fs

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/content"
)

// TestWholeExtentWrites drives writes of whole extents from extent
// boundaries, which the daemon encrypts in place in the request's buffer
// (cryptIO.writeOwned), next to the writes that go through the bounce
// buffer: a new file's first write (header with it), appends (the zero
// trailer), overwrites in the middle, a write past the end (a hole), one
// after an unaligned size (the general path), and the same through a
// mirror-mode mount, whose twin needs the plaintext after the main side.
// Every file is checked against what was written after a fresh mount, and
// its lower size against the format's.
func TestWholeExtentWrites(t *testing.T) {
	const ext = content.ExtentSize
	rng := rand.New(rand.NewPCG(1, 2))
	data := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	type step struct {
		off  int64
		size int
	}
	cases := map[string][]step{
		"first":     {{0, 8 * ext}},
		"append":    {{0, ext}, {ext, 3 * ext}, {4 * ext, 256 * ext}},
		"overwrite": {{0, 16 * ext}, {4 * ext, 2 * ext}, {0, ext}},
		"hole":      {{0, ext}, {5 * ext, 2 * ext}},
		"fromhole":  {{3 * ext, 2 * ext}},
		"unaligned": {{0, 100}, {ext, ext}, {100, ext}},
	}
	for _, v := range append(variants, variant{name: "xts-mirror", cipher: "aes-xts", keyBytes: 64}) {
		t.Run(v.name, func(t *testing.T) {
			var tm *testMount
			mirror := ""
			if v.name == "xts-mirror" {
				mirror = t.TempDir()
				tm = newVolume(t, v)
				tm.mount(t, func(o *Options) { o.Mirror = mirror })
			} else {
				tm = mountVariant(t, v)
			}
			want := map[string][]byte{}
			for name, steps := range cases {
				f, err := os.OpenFile(filepath.Join(tm.mnt, name), os.O_RDWR|os.O_CREATE, 0644)
				must(t, err)
				var w []byte
				for _, s := range steps {
					b := data(s.size)
					if _, err := f.WriteAt(b, s.off); err != nil {
						t.Fatalf("%s: write %d at %d: %v", name, s.size, s.off, err)
					}
					if end := int(s.off) + s.size; end > len(w) {
						w = append(w, make([]byte, end-len(w))...)
					}
					copy(w[s.off:], b)
				}
				must(t, f.Close())
				want[name] = w
			}
			for name, w := range want {
				if mirror == "" {
					break
				}
				// The twin got the plaintext, after the main side.
				got, err := os.ReadFile(filepath.Join(mirror, name))
				must(t, err)
				if !bytes.Equal(got, w) {
					t.Errorf("mirror %s: %d bytes differ from the %d written", name, len(got), len(w))
				}
			}
			tm2 := remountFresh(t, tm)
			var wantSizes []int64
			for name, w := range want {
				got, err := os.ReadFile(filepath.Join(tm2.mnt, name))
				must(t, err)
				if !bytes.Equal(got, w) {
					t.Errorf("%s: %d bytes read back differ from the %d written", name, len(got), len(w))
				}
				wantSizes = append(wantSizes, content.LowerSize(int64(len(w))))
			}
			if v.cipher == "" {
				return
			}
			// The lower files' sizes are the format's for their content.
			ents, err := os.ReadDir(tm2.lower)
			must(t, err)
			var sizes []int64
			for _, e := range ents {
				if !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") || e.Name() == "twincrypt.conf" {
					continue
				}
				fi, err := e.Info()
				must(t, err)
				sizes = append(sizes, fi.Size())
			}
			slices.Sort(sizes)
			slices.Sort(wantSizes)
			if !slices.Equal(sizes, wantSizes) {
				t.Errorf("lower sizes %v, want %v", sizes, wantSizes)
			}
		})
	}
}
