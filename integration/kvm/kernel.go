package kvm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// DefaultCacheDir holds the extracted kernel packages and the initramfs
// images built from them. The host's /boot and /lib/modules are never
// touched: the guest kernel is not the host's.
const DefaultCacheDir = "/var/cache/twincrypt-vm"

// metaPackage is Debian's "current kernel" package; it depends on the
// versioned image package (linux-image-6.1.0-NN-amd64 on bookworm).
const metaPackage = "linux-image-amd64"

// ErrNoKernel means no kernel package is in the cache and apt cannot
// fetch one: the reason tests skip.
var ErrNoKernel = errors.New("kvm: no Debian kernel package")

// Kernel is an extracted kernel package and the initramfs built for it.
type Kernel struct {
	Release   string // "6.1.0-57-amd64"
	Root      string // the package extracted (boot/, lib/modules/)
	Vmlinuz   string
	Initramfs string
}

// modulesDir is lib/modules/RELEASE inside the extracted package
// (/lib/modules is a symlink on merged-/usr systems, but the package ships
// the real path).
func (k *Kernel) modulesDir() string {
	for _, d := range []string{"lib/modules", "usr/lib/modules"} {
		p := filepath.Join(k.Root, d, k.Release)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			return p
		}
	}
	return filepath.Join(k.Root, "lib/modules", k.Release)
}

// PrepareKernel returns the kernel in cacheDir (DefaultCacheDir when
// empty), fetching it with `apt-get download` and extracting it with
// `dpkg-deb -x` the first time, and builds its initramfs if needed. Several
// processes may call it at once: an flock on the cache serializes them.
func PrepareKernel(ctx context.Context, cacheDir string) (*Kernel, error) {
	if cacheDir == "" {
		cacheDir = DefaultCacheDir
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, err
	}
	unlock, err := lockDir(cacheDir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	k, err := cachedKernel(cacheDir)
	if err != nil {
		if k, err = fetchKernel(ctx, cacheDir); err != nil {
			return nil, err
		}
	}
	if k.Initramfs, err = ensureInitramfs(k, cacheDir); err != nil {
		return nil, err
	}
	return k, nil
}

func lockDir(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", dir, err)
	}
	return func() { f.Close() }, nil
}

// cachedKernel returns the newest kernel already extracted in cacheDir.
func cachedKernel(cacheDir string) (*Kernel, error) {
	images, _ := filepath.Glob(filepath.Join(cacheDir, "linux-image-*", "boot", "vmlinuz-*"))
	if len(images) == 0 {
		return nil, ErrNoKernel
	}
	sort.Strings(images)
	vmlinuz := images[len(images)-1]
	root := filepath.Dir(filepath.Dir(vmlinuz))
	return &Kernel{
		Release: strings.TrimPrefix(filepath.Base(vmlinuz), "vmlinuz-"),
		Root:    root,
		Vmlinuz: vmlinuz,
	}, nil
}

var dependsRE = regexp.MustCompile(`(?m)^\s*Depends:\s*(linux-image-[0-9][^\s]*)`)

// fetchKernel downloads the package linux-image-amd64 points to and
// extracts it into cacheDir/PACKAGE.
func fetchKernel(ctx context.Context, cacheDir string) (*Kernel, error) {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return nil, fmt.Errorf("%w in %s and no apt-get to fetch one", ErrNoKernel, cacheDir)
	}
	out, err := exec.CommandContext(ctx, "apt-cache", "depends", metaPackage).CombinedOutput()
	m := dependsRE.FindSubmatch(out)
	if err != nil || m == nil {
		return nil, fmt.Errorf("%w: apt-cache depends %s: %v %s", ErrNoKernel, metaPackage, err, bytes.TrimSpace(out))
	}
	pkg := string(m[1])
	dl, err := os.MkdirTemp(cacheDir, ".download-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dl)
	cmd := exec.CommandContext(ctx, "apt-get", "download", "-q", pkg)
	cmd.Dir = dl
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("%w: apt-get download %s: %v\n%s", ErrNoKernel, pkg, err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dl, pkg+"_*.deb"))
	if len(debs) != 1 {
		return nil, fmt.Errorf("%w: apt-get download %s left %d .deb files", ErrNoKernel, pkg, len(debs))
	}
	tmp := filepath.Join(dl, "root")
	if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", debs[0], tmp).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb -x %s: %v\n%s", debs[0], err, out)
	}
	// Renamed into place whole, so that a crash mid-extraction leaves no
	// half kernel for cachedKernel to pick.
	if err := os.Rename(tmp, filepath.Join(cacheDir, pkg)); err != nil {
		return nil, err
	}
	return cachedKernel(cacheDir)
}
