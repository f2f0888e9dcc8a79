package kvm

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twincrypt/twincrypt/cipher/luks"
	"github.com/twincrypt/twincrypt/fs/blockdev"
)

// dmPassphrase unlocks every volume of the interop test.
const dmPassphrase = "kvm-dm-crypt-interop"

// dmCase is one dm-crypt volume: how it is made and opened.
type dmCase struct {
	name     string
	kind     string // "luks2", "luks1" or "plain"
	cipher   string
	keyBytes int
	sector   int
	hash     string // plain: the passphrase hash
	ivLarge  bool   // plain: --iv-large-sectors
	small    bool   // luks2: 16 KiB metadata and 512 KiB keyslots instead of cryptsetup's 16 MiB default
	ext4     bool   // an ext4 with a known tree instead of a raw pattern
}

func (c dmCase) imageSize() int64 {
	payload := int64(4 << 20)
	if c.ext4 {
		payload = 8 << 20
	}
	switch {
	case c.kind == "plain":
		return payload
	case c.kind == "luks1":
		return payload + 2<<20
	case c.small:
		return payload + 1<<20
	}
	return payload + 16<<20
}

// Volumes the kernel makes and twincrypt reads: every cipher
// specification and sector size the userspace blockdev supports, in the
// three volume types, with cryptsetup's default LUKS2 layout and a small
// one.
var kernelMade = []dmCase{
	{name: "luks2-xts-plain64-512", kind: "luks2", cipher: "aes-xts-plain64", keyBytes: 64, sector: 512},
	{name: "luks2-xts-plain64-4096-small", kind: "luks2", cipher: "aes-xts-plain64", keyBytes: 64, sector: 4096, small: true},
	{name: "luks2-xts-plain-256-4096-small", kind: "luks2", cipher: "aes-xts-plain", keyBytes: 32, sector: 4096, small: true},
	{name: "luks2-cbc-essiv-512-small", kind: "luks2", cipher: "aes-cbc-essiv:sha256", keyBytes: 32, sector: 512, small: true},
	{name: "luks2-cbc-essiv-4096-small", kind: "luks2", cipher: "aes-cbc-essiv:sha256", keyBytes: 32, sector: 4096, small: true},
	{name: "luks2-cbc-plain64-128-4096-small", kind: "luks2", cipher: "aes-cbc-plain64", keyBytes: 16, sector: 4096, small: true},
	{name: "luks1-xts-plain64-512", kind: "luks1", cipher: "aes-xts-plain64", keyBytes: 64, sector: 512},
	{name: "luks1-cbc-essiv-512", kind: "luks1", cipher: "aes-cbc-essiv:sha256", keyBytes: 32, sector: 512},
	{name: "plain-cbc-essiv-ripemd160", kind: "plain", cipher: "aes-cbc-essiv:sha256", keyBytes: 32, sector: 512, hash: "ripemd160"},
	{name: "plain-xts-sha256-4096-ivlarge", kind: "plain", cipher: "aes-xts-plain64", keyBytes: 64, sector: 4096, hash: "sha256", ivLarge: true},
	{name: "luks2-xts-4096-ext4", kind: "luks2", cipher: "aes-xts-plain64", keyBytes: 64, sector: 4096, small: true, ext4: true},
}

// Volumes twincrypt makes (luks.Format, and the blockdev mount writing
// every sector) and the kernel reads.
var twincryptMade = []dmCase{
	{name: "luks2-xts-plain64-512", kind: "luks2", cipher: "aes-xts-plain64", keyBytes: 64, sector: 512},
	{name: "luks2-xts-plain64-4096", kind: "luks2", cipher: "aes-xts-plain64", keyBytes: 64, sector: 4096},
	{name: "luks2-cbc-essiv-4096", kind: "luks2", cipher: "aes-cbc-essiv:sha256", keyBytes: 32, sector: 4096},
	{name: "luks2-cbc-plain64-512", kind: "luks2", cipher: "aes-cbc-plain64", keyBytes: 32, sector: 512},
	{name: "plain-cbc-essiv-ripemd160", kind: "plain", cipher: "aes-cbc-essiv:sha256", keyBytes: 32, sector: 512, hash: "ripemd160"},
	{name: "plain-xts-sha256-4096-ivlarge", kind: "plain", cipher: "aes-xts-plain64", keyBytes: 64, sector: 4096, hash: "sha256", ivLarge: true},
	{name: "luks2-xts-4096-ext4", kind: "luks2", cipher: "aes-xts-plain64", keyBytes: 64, sector: 4096, ext4: true},
}

// pattern is a case's plaintext: seeded by its name, so two volumes never
// hold the same bytes and a volume read with another's key cannot match.
func pattern(name string, n int64) []byte {
	seed := sha256.Sum256([]byte(name))
	r := rand.NewChaCha8(seed)
	b := make([]byte, n)
	_, _ = r.Read(b)
	return b
}

// knownTree is the ext4 cases' content: sizes around the 4096-byte
// sectors, an empty file, a subdirectory.
var knownTree = map[string]int{"empty": 0, "one": 1, "sector-1": 4095, "sector": 4096, "sector+1": 4097, "sub/big": 1<<20 + 123, "sub/odd": 777}

func writeTree(t *testing.T, dir, seed string) {
	t.Helper()
	for name, n := range knownTree {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, pattern(seed+"/"+name, int64(n)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func checkTree(t *testing.T, dir, seed string) {
	t.Helper()
	for name, n := range knownTree {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if !bytes.Equal(got, pattern(seed+"/"+name, int64(n))) {
			t.Errorf("%s: content differs (%d bytes, want %d)", name, len(got), n)
		}
	}
}

// treeSums is `sha256sum` of the tree as the guest prints it, sorted.
func treeSums(seed string) string {
	var names []string
	for name := range knownTree {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		fmt.Fprintf(&b, "%s  ./%s\n", sha256Hex(pattern(seed+"/"+name, int64(knownTree[name]))), name)
	}
	return b.String()
}

// cryptsetupOpen is the guest command that opens c's volume on dev as name.
func (c dmCase) cryptsetupOpen(dev, name string) string {
	if c.kind == "plain" {
		iv := ""
		if c.ivLarge {
			iv = " --iv-large-sectors"
		}
		// From stdin, as typed: the passphrase is hashed (with
		// --key-file cryptsetup would ignore --hash).
		return fmt.Sprintf("printf %%s %s | cryptsetup open --type plain --cipher %s --key-size %d --hash %s --sector-size %d%s %s %s",
			dmPassphrase, c.cipher, c.keyBytes*8, c.hash, c.sector, iv, dev, name)
	}
	return fmt.Sprintf("cryptsetup open --type %s --key-file $SHARE/pass %s %s", c.kind, dev, name)
}

// cryptsetupFormat is the guest command that makes c's volume on dev.
func (c dmCase) cryptsetupFormat(dev string) string {
	if c.kind == "plain" {
		return "true" // no header
	}
	extra := ""
	if c.kind == "luks2" {
		extra = fmt.Sprintf(" --sector-size %d", c.sector)
		if c.small {
			extra += " --luks2-metadata-size 16k --luks2-keyslots-size 512k"
		}
	}
	// PBKDF2 at cryptsetup's minimum: the KDF is not what is tested here,
	// and Argon2 costs tens of seconds under TCG.
	return fmt.Sprintf("cryptsetup luksFormat --batch-mode --type %s --cipher %s --key-size %d --pbkdf pbkdf2 --pbkdf-force-iterations 1000%s --key-file $SHARE/pass %s",
		c.kind, c.cipher, c.keyBytes*8, extra, dev)
}

// unlock opens c's volume in image as twincrypt does.
func (c dmCase) unlock(t *testing.T, image string) *luks.Volume {
	t.Helper()
	if c.kind == "plain" {
		v, err := luks.OpenPlain([]byte(dmPassphrase), luks.PlainOptions{Cipher: c.cipher, KeyBytes: c.keyBytes,
			Hash: c.hash, SectorSize: c.sector, IVLargeSectors: c.ivLarge})
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	f, err := os.Open(image)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	v, err := luks.Open(f, []byte(dmPassphrase))
	if err != nil {
		t.Fatalf("twincrypt cannot open the kernel's volume: %v", err)
	}
	if v.Cipher != c.cipher || len(v.Key) != c.keyBytes || v.SectorSize != c.sector {
		t.Errorf("volume %s, %d-byte key, %d-byte sectors; want %s, %d, %d", v.Cipher, len(v.Key), v.SectorSize, c.cipher, c.keyBytes, c.sector)
	}
	return v
}

// serve mounts the volume with twincrypt's userspace blockdev and returns
// the path of its plaintext file.
func serve(t *testing.T, image string, v *luks.Volume, readOnly bool) string {
	t.Helper()
	mnt := t.TempDir()
	srv, err := blockdev.Mount(mnt, blockdev.Options{Image: image, Volume: v, ReadOnly: readOnly})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Unmount() })
	return filepath.Join(mnt, blockdev.VolumeName)
}

// unserve unmounts what serve mounted now (its writes are in the image
// once Unmount returns), leaving the cleanup a no-op.
func unserve(t *testing.T, volumeFile string) {
	t.Helper()
	if out, err := exec.Command("umount", filepath.Dir(volumeFile)).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v %s", filepath.Dir(volumeFile), err, out)
	}
}

// withExt4 attaches a loop device to file, mounts the ext4 on it (read
// only or not) and returns the mount point; the cleanup undoes both.
//
// The loop device gets the volume's sector size, as /dev/mapper/NAME has
// it: mkfs.ext4 picks 1 KiB blocks on a small device, and the kernel
// refuses to mount a filesystem whose blocks are smaller than its device's
// sectors.
func withExt4(t *testing.T, file string, sectorSize int, readOnly bool) (string, func()) {
	t.Helper()
	args := []string{"--find", "--show", "--sector-size", fmt.Sprint(sectorSize)}
	if readOnly {
		args = append(args, "--read-only")
	}
	out, err := exec.Command("losetup", append(args, file)...).CombinedOutput()
	if err != nil {
		t.Skipf("no loop device for the ext4 check: %v %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	detach := func() { _ = exec.Command("losetup", "-d", dev).Run() }
	if !readOnly {
		if out, err := exec.Command("mkfs.ext4", "-q", "-F", dev).CombinedOutput(); err != nil {
			detach()
			t.Fatalf("mkfs.ext4: %v %s", err, out)
		}
	}
	mnt := t.TempDir()
	opts := "rw"
	if readOnly {
		opts = "ro,noload"
	}
	if out, err := exec.Command("mount", "-t", "ext4", "-o", opts, dev, mnt).CombinedOutput(); err != nil {
		detach()
		t.Fatalf("mount %s: %v %s", dev, err, out)
	}
	done := false
	undo := func() {
		if done {
			return
		}
		done = true
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
		detach()
	}
	t.Cleanup(undo)
	return mnt, undo
}

func needFUSE(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no FUSE for twincrypt's userspace blockdev: %v", err)
	}
	f.Close()
}

// TestDMCryptKernelInterop checks twincrypt's userspace dm-crypt against
// the kernel's, byte for byte, in both directions, in one VM boot:
// volumes cryptsetup makes and the kernel's dm-crypt fills (through
// /dev/mapper) are read by twincrypt's blockdev on the host; volumes
// twincrypt formats and fills through its blockdev are opened by
// cryptsetup and read through the kernel's dm-crypt in the guest.
func TestDMCryptKernelInterop(t *testing.T) {
	k := testKernel(t)
	needFUSE(t)
	share := t.TempDir()
	if err := os.WriteFile(filepath.Join(share, "pass"), []byte(dmPassphrase), 0o600); err != nil {
		t.Fatal(err)
	}
	writeTree(t, filepath.Join(share, "tree"), "kernel")

	var disks []string
	var script strings.Builder
	script.WriteString("mkdir -p out\n")
	// Every case runs in the background (its own log), the guest's two
	// CPUs sharing the work: under TCG each cryptsetup costs seconds.
	addJob := func(name, body string) {
		fmt.Fprintf(&script, "(\nset -e\nstart=$(date +%%s)\n%s\necho \"took $(($(date +%%s)-start)) s\"\necho ok >out/%s.done\n) >out/%s.log 2>&1 &\n", body, name, name)
	}
	for i, c := range kernelMade {
		img := filepath.Join(share, fmt.Sprintf("k%d.img", i))
		if err := sparse(img, c.imageSize()); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(img+".pattern", pattern("kernel/"+c.name, c.imageSize()), 0o644); err != nil {
			t.Fatal(err)
		}
		dev, dm := fmt.Sprintf("/dev/vd%c", 'a'+len(disks)), "k"+fmt.Sprint(i)
		disks = append(disks, img)
		fill := fmt.Sprintf("head -c $(blockdev --getsize64 /dev/mapper/%s) k%d.img.pattern | dd of=/dev/mapper/%s bs=1M iflag=fullblock conv=fsync status=none", dm, i, dm)
		if c.ext4 {
			fill = fmt.Sprintf("mkfs.ext4 -q /dev/mapper/%[1]s\nmkdir -p /tmp/%[1]s && mount /dev/mapper/%[1]s /tmp/%[1]s\ncp -r tree/. /tmp/%[1]s/\numount /tmp/%[1]s", dm)
		}
		addJob("k-"+c.name, strings.Join([]string{c.cryptsetupFormat(dev), c.cryptsetupOpen(dev, dm), fill, "cryptsetup close " + dm}, "\n"))
	}

	// The reverse direction's volumes are made before the boot.
	for i, c := range twincryptMade {
		img := filepath.Join(share, fmt.Sprintf("t%d.img", i))
		if err := sparse(img, c.imageSize()); err != nil {
			t.Fatal(err)
		}
		var v *luks.Volume
		if c.kind == "plain" {
			v = c.unlock(t, img)
		} else {
			f, err := os.OpenFile(img, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			v, err = luks.Format(f, c.imageSize(), []byte(dmPassphrase), luks.FormatOptions{Cipher: c.cipher, KeyBytes: c.keyBytes,
				SectorSize: c.sector, PBKDF: "pbkdf2", Iterations: 1000})
			f.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
		vol := serve(t, img, v, false)
		if c.ext4 {
			mnt, undo := withExt4(t, vol, c.sector, false)
			writeTree(t, mnt, "twincrypt")
			undo()
		} else {
			st, err := os.Stat(vol)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(img+".sha256", []byte(sha256Hex(pattern("twincrypt/"+c.name, st.Size()))), 0o644); err != nil {
				t.Fatal(err)
			}
			f, err := os.OpenFile(vol, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.Write(pattern("twincrypt/"+c.name, st.Size())); err != nil {
				t.Fatal(err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
		}
		unserve(t, vol)
		dev, dm := fmt.Sprintf("/dev/vd%c", 'a'+len(disks)), "t"+fmt.Sprint(i)
		disks = append(disks, img)
		read := fmt.Sprintf("sha256sum </dev/mapper/%s | cut -d' ' -f1 >out/t-%s.sha256", dm, c.name)
		if c.ext4 {
			read = fmt.Sprintf("mkdir -p /tmp/%[1]s && mount -o ro /dev/mapper/%[1]s /tmp/%[1]s\n(cd /tmp/%[1]s && find . -type f | sort | xargs sha256sum) >out/t-%[2]s.files\numount /tmp/%[1]s", dm, c.name)
		}
		addJob("t-"+c.name, strings.Join([]string{c.cryptsetupOpen(dev, dm), read, "cryptsetup close " + dm}, "\n"))
	}
	script.WriteString("wait\nfor f in out/*.log; do echo \"== $f\"; cat \"$f\"; done\n")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	res, err := Run(ctx, k, script.String(), Options{Share: share, Disks: disks, Console: consoleLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("guest %s under %s: boot %v, whole run %v", res.Release, res.Accel, res.Boot.Round(time.Millisecond), res.Elapsed.Round(time.Millisecond))
	if testing.Verbose() {
		t.Logf("guest output:\n%s", res.Output)
	}
	if res.ExitStatus != 0 {
		t.Fatalf("guest script exit status %d:\n%s", res.ExitStatus, res.Output)
	}
	done := func(t *testing.T, job string) bool {
		if _, err := os.Stat(filepath.Join(share, "out", job+".done")); err != nil {
			log, _ := os.ReadFile(filepath.Join(share, "out", job+".log"))
			t.Errorf("in the guest, %s failed:\n%s", job, log)
			return false
		}
		return true
	}

	for i, c := range kernelMade {
		t.Run("kernel-to-twincrypt/"+c.name, func(t *testing.T) {
			if !done(t, "k-"+c.name) {
				return
			}
			img := filepath.Join(share, fmt.Sprintf("k%d.img", i))
			vol := serve(t, img, c.unlock(t, img), true)
			if c.ext4 {
				mnt, _ := withExt4(t, vol, c.sector, true)
				checkTree(t, mnt, "kernel")
				return
			}
			got, err := os.ReadFile(vol)
			if err != nil {
				t.Fatal(err)
			}
			want := pattern("kernel/"+c.name, c.imageSize())[:len(got)]
			if i := firstDiff(got, want); i >= 0 {
				t.Fatalf("the plaintext twincrypt reads differs from what the kernel wrote at byte %d of %d", i, len(got))
			}
			if len(got) < 1<<20 {
				t.Fatalf("volume of %d bytes: the payload is missing", len(got))
			}
		})
	}
	for i, c := range twincryptMade {
		t.Run("twincrypt-to-kernel/"+c.name, func(t *testing.T) {
			if !done(t, "t-"+c.name) {
				return
			}
			if c.ext4 {
				got, _ := os.ReadFile(filepath.Join(share, "out", "t-"+c.name+".files"))
				if want := treeSums("twincrypt"); string(got) != want {
					t.Errorf("the kernel reads the files as\n%s\nwant\n%s", got, want)
				}
				return
			}
			got, _ := os.ReadFile(filepath.Join(share, "out", "t-"+c.name+".sha256"))
			want, _ := os.ReadFile(filepath.Join(share, fmt.Sprintf("t%d.img.sha256", i)))
			if strings.TrimSpace(string(got)) != string(want) {
				t.Errorf("the kernel's plaintext has sha256 %q, twincrypt wrote %q", strings.TrimSpace(string(got)), want)
			}
		})
	}
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
