package kvm

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// TestCpioReadByCpio writes an archive and lists it with GNU cpio, which
// reads the same "newc" format the kernel unpacks.
func TestCpioReadByCpio(t *testing.T) {
	if _, err := exec.LookPath("cpio"); err != nil {
		t.Skip("no cpio to read the archive (apt install cpio)")
	}
	var b bytes.Buffer
	c := &cpioWriter{w: &b}
	c.dir("bin")
	c.file("bin/hello", 0o755, []byte("odd length!"))
	c.symlink("sbin", "bin")
	c.node("console", 0o600|cpioCharDev, 5, 1)
	c.file("empty", 0o644, nil)
	c.trailer()
	if c.err != nil {
		t.Fatal(c.err)
	}
	if b.Len()%4 != 0 {
		t.Errorf("archive of %d bytes, not 4-byte aligned", b.Len())
	}
	cmd := exec.Command("cpio", "-t", "-v", "--quiet")
	cmd.Stdin = &b
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cpio -t: %v\n%s", err, out)
	}
	for _, want := range []string{"drwxr-xr-x", "-rwxr-xr-x", " 11 ", "bin/hello", "sbin -> bin", "crw-------", "5,", "console", "empty"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("cpio -t lacks %q:\n%s", want, out)
		}
	}
}

// TestModuleClosure resolves the boot modules of the cached kernel (it
// skips without one): every dependency is carried and listed on its
// module's modules.dep line, and the aliases the kernel asks modprobe for
// on demand (fs-ecryptfs, crypto-xts, the device-mapper control node) are
// there.
func TestModuleClosure(t *testing.T) {
	k, err := cachedKernel(DefaultCacheDir)
	if err != nil {
		t.Skip("no kernel package in the cache:", err)
	}
	s, err := resolveModules(k.modulesDir(), bootModules, moduleDirs)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"dm_crypt", "dm_mod", "ecryptfs", "9pnet", "virtio_ring", "xts", "essiv", "fuse"} {
		if _, ok := s.path[m]; !ok {
			t.Errorf("%s not in the initramfs", m)
		}
	}
	order := s.loadOrder("dm_crypt")
	if len(order) == 0 || order[len(order)-1] == "dm_crypt" {
		t.Errorf("dm_crypt's dependencies %v", order)
	}
	found := false
	for _, d := range order {
		found = found || d == "dm_mod"
	}
	if !found {
		t.Errorf("dm_crypt's dependencies %v lack dm_mod", order)
	}
	dep := string(s.depFile())
	if !strings.Contains(dep, "kernel/drivers/md/dm-crypt.ko: ") || !strings.Contains(dep, "kernel/drivers/md/dm-mod.ko") {
		t.Errorf("modules.dep lacks dm-crypt and its dependency:\n%.2000s", dep)
	}
	alias := string(s.aliasFile())
	for _, a := range []string{"alias fs-ecryptfs ecryptfs", "alias crypto-xts xts", "alias devname:mapper/control dm_mod"} {
		if !strings.Contains(alias, a+"\n") {
			t.Errorf("modules.alias lacks %q", a)
		}
	}
}
