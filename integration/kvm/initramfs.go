package kvm

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// busyboxPath is busybox-static's binary: the initramfs has no libc, so a
// dynamically linked busybox would not start.
var busyboxPath = "/bin/busybox"

// bootModules are loaded by init, in this order, with their dependencies
// (modprobe resolves them from the modules.dep written into the image).
// Crypto algorithms the kernel asks for later (xts(aes), essiv, ...) are
// loaded on demand: the kernel runs the initramfs's /sbin/modprobe, which
// finds them through modules.alias.
var bootModules = []string{
	"virtio_pci", "virtio_blk", "9pnet_virtio", "9p",
	"ext4", "loop", "dm_mod", "dm_crypt", "ecryptfs", "fuse",
	"aesni_intel", "xts", "essiv",
}

// moduleDirs are carried whole (with their dependencies) so that on-demand
// loading finds any cipher, hash or mode a test asks for.
var moduleDirs = []string{"kernel/crypto", "kernel/arch/x86/crypto", "kernel/lib/crypto"}

// Guest paths the init script and Run agree on.
const (
	// GuestShare is where the writable share appears inside the VM, in the
	// host root's /run (a tmpfs in the guest).
	GuestShare = "/run/twincrypt-vm/share"
	// controlDir holds the command, its output and its exit status, in the
	// share.
	controlDir = ".twincrypt-vm"
	// Markers init prints on the serial console.
	markerInit  = "twincrypt-vm: init"
	markerReady = "twincrypt-vm: ready"
)

// initScript is /init: it loads the modules, mounts the host root (read
// only, 9p tag hostroot) at /newroot with tmpfs on /run and /tmp, the
// share (tag share) at GuestShare, and runs the command chrooted into the
// host's tree, so the host's own binaries (cryptsetup, mkfs, a test binary)
// run on the guest kernel. Not switch_root: the kernel's module loader
// keeps using this image's /sbin/modprobe and modules. The host root is
// mounted cache=loose (it does not change under a run, and every exec
// otherwise pages its binary and libraries in over 9p again, seconds per
// cryptsetup under TCG); the share stays uncached, as the host reads it.
const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /bin /sbin /usr/bin /usr/sbin /proc /sys /dev /newroot
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
echo "` + markerInit + ` $(uname -r)" >/dev/console
for m in ` + "$MODULES" + `; do
	modprobe "$m" || echo "twincrypt-vm: modprobe $m failed" >/dev/console
done
fail() { echo "twincrypt-vm: $*" >/dev/console; poweroff -f; }
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,cache=loose,ro hostroot /newroot || fail "cannot mount the host root"
mount -t devtmpfs devtmpfs /newroot/dev || fail "no /dev"
mkdir -p /newroot/dev/pts /newroot/dev/shm
mount -t devpts devpts /newroot/dev/pts
mount -t tmpfs tmpfs /newroot/dev/shm
mount -t proc proc /newroot/proc
mount -t sysfs sysfs /newroot/sys
mount -t tmpfs -o mode=755 tmpfs /newroot/run
mount -t tmpfs -o mode=1777 tmpfs /newroot/tmp
mkdir -p /newroot` + GuestShare + `
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /newroot` + GuestShare + ` || fail "cannot mount the share"
c=/newroot` + GuestShare + `/` + controlDir + `
echo "` + markerReady + `" >/dev/console
chroot /newroot /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME=/tmp TMPDIR=/tmp LANG=C.UTF-8 SHARE=` + GuestShare + ` \
	/bin/sh -c '. ` + GuestShare + `/` + controlDir + `/env; cd ` + GuestShare + ` && exec /bin/sh ` + GuestShare + `/` + controlDir + `/cmd.sh' \
	</dev/null 2>&1 | tee $c/output >/dev/console
# tee has the pipeline's status; the command's is in the file it wrote.
sync
umount /newroot` + GuestShare + `
echo "twincrypt-vm: done" >/dev/console
poweroff -f
`

// The command's own status is caught by a wrapper written next to it.
const cmdWrapper = `#!/bin/sh
/bin/sh "$SHARE/` + controlDir + `/script.sh"
echo $? >"$SHARE/` + controlDir + `/status"
`

// ensureInitramfs returns the image for k, building it if the cache has
// none for this init script, module list and busybox.
func ensureInitramfs(k *Kernel, cacheDir string) (string, error) {
	bb, err := os.ReadFile(busyboxPath)
	if err != nil {
		return "", fmt.Errorf("busybox (apt install busybox-static): %w", err)
	}
	if err := checkStatic(busyboxPath); err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%s\n", initScript, strings.Join(bootModules, ","), strings.Join(moduleDirs, ","), k.Release)
	h.Write(bb)
	name := filepath.Join(cacheDir, fmt.Sprintf("initramfs-%s-%s.cpio", k.Release, hex.EncodeToString(h.Sum(nil))[:12]))
	if _, err := os.Stat(name); err == nil {
		return name, nil
	}
	tmp, err := os.CreateTemp(cacheDir, ".initramfs-")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriter(tmp)
	if err := writeInitramfs(w, k, bb); err != nil {
		tmp.Close()
		return "", fmt.Errorf("initramfs for %s: %w", k.Release, err)
	}
	if err := errors.Join(w.Flush(), tmp.Close()); err != nil {
		return "", err
	}
	return name, os.Rename(tmp.Name(), name)
}

func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked (apt install busybox-static)", path)
		}
	}
	return nil
}

func writeInitramfs(w io.Writer, k *Kernel, busybox []byte) error {
	mods, err := resolveModules(k.modulesDir(), bootModules, moduleDirs)
	if err != nil {
		return err
	}
	c := &cpioWriter{w: w}
	modRoot := "lib/modules/" + k.Release
	for _, d := range []string{"bin", "dev", "proc", "sys", "newroot", "lib", "lib/modules", modRoot} {
		c.dir(d)
	}
	c.node("dev/console", 0o600|cpioCharDev, 5, 1)
	c.file("bin/busybox", 0o755, busybox)
	c.symlink("sbin", "bin")
	script := strings.Replace(initScript, "$MODULES", strings.Join(bootModules, " "), 1)
	c.file("init", 0o755, []byte(script))

	dirs := map[string]bool{}
	for _, m := range mods.order {
		rel := mods.path[m]
		for d := filepath.Dir(rel); d != "."; d = filepath.Dir(d) {
			dirs[d] = true
		}
	}
	var dl []string
	for d := range dirs {
		dl = append(dl, d)
	}
	sort.Strings(dl) // parents before children
	for _, d := range dl {
		c.dir(modRoot + "/" + d)
	}
	for _, m := range mods.order {
		data, err := os.ReadFile(filepath.Join(k.modulesDir(), mods.path[m]))
		if err != nil {
			return err
		}
		c.file(modRoot+"/"+mods.path[m], 0o644, data)
	}
	c.file(modRoot+"/modules.dep", 0o644, mods.depFile())
	c.file(modRoot+"/modules.alias", 0o644, mods.aliasFile())
	c.trailer()
	return c.err
}

// moduleSet is a closed set of modules: every dependency of a member is a
// member.
type moduleSet struct {
	path    map[string]string   // name -> path relative to lib/modules/RELEASE
	deps    map[string][]string // name -> direct dependencies
	aliases map[string][]string
	order   []string // sorted names
}

// modName is the kernel's name for a module file: "dm-crypt.ko" is dm_crypt.
func modName(file string) string {
	return strings.ReplaceAll(strings.TrimSuffix(filepath.Base(file), ".ko"), "-", "_")
}

// resolveModules returns wanted, every module under dirs, and all their
// dependencies, read from each module's .modinfo section (depmod's
// source), so nothing is written into the extracted package.
func resolveModules(modDir string, wanted, dirs []string) (*moduleSet, error) {
	all := map[string]string{}
	err := filepath.WalkDir(filepath.Join(modDir, "kernel"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".ko") {
			rel, _ := filepath.Rel(modDir, p)
			all[modName(p)] = rel
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("modules of the kernel package: %w", err)
	}
	s := &moduleSet{path: map[string]string{}, deps: map[string][]string{}, aliases: map[string][]string{}}
	builtin := builtinModules(modDir)
	var add func(name string) error
	add = func(name string) error {
		name = modName(name)
		if _, done := s.path[name]; done || builtin[name] {
			return nil
		}
		rel, ok := all[name]
		if !ok {
			return fmt.Errorf("module %s is not in the kernel package", name)
		}
		info, err := modinfo(filepath.Join(modDir, rel))
		if err != nil {
			return err
		}
		s.path[name] = rel
		for _, kv := range info {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "depends":
				for _, dep := range strings.Split(v, ",") {
					if dep != "" {
						s.deps[name] = append(s.deps[name], modName(dep))
					}
				}
			case "alias":
				s.aliases[name] = append(s.aliases[name], v)
			}
		}
		for _, dep := range s.deps[name] {
			if err := add(dep); err != nil {
				return fmt.Errorf("%s needs %w", name, err)
			}
		}
		return nil
	}
	for _, w := range wanted {
		if err := add(w); err != nil {
			return nil, err
		}
	}
	for name, rel := range all {
		for _, d := range dirs {
			if strings.HasPrefix(rel, d+"/") {
				if err := add(name); err != nil {
					return nil, err
				}
			}
		}
	}
	for name := range s.path {
		s.order = append(s.order, name)
	}
	sort.Strings(s.order)
	return s, nil
}

// builtinModules lists modules.builtin: names compiled into the kernel,
// which a module may depend on but no file provides.
func builtinModules(modDir string) map[string]bool {
	b := map[string]bool{}
	data, _ := os.ReadFile(filepath.Join(modDir, "modules.builtin"))
	for _, l := range strings.Split(string(data), "\n") {
		if l != "" {
			b[modName(l)] = true
		}
	}
	return b
}

// modinfo returns the key=value strings of a module's .modinfo section.
func modinfo(path string) ([]string, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, fmt.Errorf("%s has no .modinfo section", path)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []string
	for _, s := range bytes.Split(data, []byte{0}) {
		if len(s) > 0 {
			out = append(out, string(s))
		}
	}
	return out, nil
}

// loadOrder returns name's dependencies, every module before the ones it
// needs, as modules.dep lists them (modprobe loads from the end).
func (s *moduleSet) loadOrder(name string) []string {
	var post []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(n string) {
		if seen[n] {
			return
		}
		seen[n] = true
		for _, d := range s.deps[n] {
			visit(d)
		}
		post = append(post, n)
	}
	for _, d := range s.deps[name] {
		visit(d)
	}
	for i, j := 0, len(post)-1; i < j; i, j = i+1, j-1 {
		post[i], post[j] = post[j], post[i]
	}
	return post
}

func (s *moduleSet) depFile() []byte {
	var b bytes.Buffer
	for _, m := range s.order {
		b.WriteString(s.path[m] + ":")
		for _, d := range s.loadOrder(m) {
			if p, ok := s.path[d]; ok { // built-in dependencies have no file
				b.WriteString(" " + p)
			}
		}
		b.WriteByte('\n')
	}
	return b.Bytes()
}

func (s *moduleSet) aliasFile() []byte {
	var b bytes.Buffer
	for _, m := range s.order {
		for _, a := range s.aliases[m] {
			fmt.Fprintf(&b, "alias %s %s\n", a, m)
		}
	}
	return b.Bytes()
}
