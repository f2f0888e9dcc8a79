package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twincrypt/twincrypt/measure"
)

// peer is another encrypting FUSE filesystem, driven by its own command
// line. A peer is a name, a program and two commands: create (optional;
// some create on first mount) and mount, which must return once mounted
// or soon before (the mount point is then polled).
type peer struct {
	name string
	prog string
	// env returns extra environment for every command (state kept out of
	// $HOME, update checks off).
	env func(p *peer) []string
	// stdin is fed to every command (a passphrase for noninteractive modes).
	stdin  string
	create func(p *peer) []string // nil: mount creates the filesystem
	mount  func(p *peer) []string
	// persistent peers are mounted once, at Setup, and stay mounted
	// until Cleanup: their Mount and Unmount do nothing (see note).
	persistent bool
	note       string

	work, lower, mnt, passfile string
	d                          daemon
}

// NewGocryptfs returns gocryptfs (AES-GCM per 4 KiB block, EME names).
func NewGocryptfs() Target {
	return &peer{
		name: "gocryptfs", prog: "gocryptfs",
		// scrypt at a low cost: unlocking is part of every Mount.
		create: func(p *peer) []string {
			return []string{"-init", "-q", "-passfile", p.passfile, "-scryptn", "10", p.lower}
		},
		mount: func(p *peer) []string { return []string{"-q", "-passfile", p.passfile, p.lower, p.mnt} },
	}
}

// NewEncfs returns EncFS in its standard configuration (AES-256,
// block-encrypted names).
func NewEncfs() Target {
	return &peer{
		name: "encfs", prog: "encfs",
		mount: func(p *peer) []string {
			return []string{"--standard", "--extpass", "cat " + p.passfile, p.lower, p.mnt}
		},
	}
}

// NewCryfs returns CryFS with AES-256-GCM.
func NewCryfs() Target {
	return &peer{
		name: "cryfs", prog: "cryfs",
		env: func(p *peer) []string {
			return []string{"CRYFS_FRONTEND=noninteractive", "CRYFS_NO_UPDATE_CHECK=true",
				"CRYFS_LOCAL_STATE_DIR=" + filepath.Join(p.work, "state")}
		},
		stdin: benchPassphrase + "\n",
		mount: func(p *peer) []string { return []string{"--cipher", "aes-256-gcm", p.lower, p.mnt} },
		// CryFS derives its key with scrypt at fixed, paranoid costs
		// (N=2^20, r=4, p=8) that no option lowers: about two minutes a
		// mount on our machines.
		persistent: true,
		note:       "mounted once for the whole bench (a CryFS mount takes minutes of scrypt); runs start warm-mounted, with caches dropped where workloads drop them",
	}
}

// NewSecurefs returns securefs (format 4 by default, AES-GCM).
func NewSecurefs() Target {
	return &peer{
		name: "securefs", prog: "securefs",
		create: func(p *peer) []string {
			return []string{"create", "--pass", benchPassphrase, "--pbkdf", "pkcs5-pbkdf2-hmac-sha256", "-r", "1000", p.lower}
		},
		mount: func(p *peer) []string {
			return []string{"mount", "--background", "--pass", benchPassphrase, p.lower, p.mnt}
		},
	}
}

func (p *peer) Name() string { return p.name }

func (p *peer) Available() error {
	if err := needProgs(p.prog); err != nil {
		return err
	}
	return needFUSE()
}

func (p *peer) run(ctx context.Context, args []string) error {
	var env []string
	if p.env != nil {
		env = p.env(p)
	}
	_, err := run(ctx, env, p.stdin, p.prog, args...)
	return err
}

func (p *peer) Setup(ctx context.Context, work string) error {
	work, err := realPath(work)
	if err != nil {
		return err
	}
	p.work, p.lower, p.mnt = work, filepath.Join(work, "lower"), filepath.Join(work, "mnt")
	if err := mkdirs(p.lower, p.mnt); err != nil {
		return err
	}
	if p.passfile, err = writePassfile(work); err != nil {
		return err
	}
	if p.create != nil {
		if err := p.run(ctx, p.create(p)); err != nil {
			return err
		}
	}
	if p.persistent {
		return p.mountNow(ctx)
	}
	if p.create != nil {
		return nil
	}
	// The first mount creates the filesystem.
	if err := p.mountNow(ctx); err != nil {
		return err
	}
	return p.d.detach(p.mnt)
}

// Note says how the target departs from the runner's plan, or "".
func (p *peer) Note() string { return p.note }

func (p *peer) Mount(ctx context.Context) (string, error) {
	if p.persistent {
		return p.mnt, nil
	}
	return p.mnt, p.mountNow(ctx)
}

func (p *peer) mountNow(ctx context.Context) error {
	if err := p.run(ctx, p.mount(p)); err != nil {
		_ = unmount(p.mnt)
		return err
	}
	if err := waitMounted(ctx, p.mnt, 20*time.Second); err != nil {
		return err
	}
	p.d.attach(p.mnt, 0)
	return nil
}

// waitMounted polls until dir is a mount point.
func waitMounted(ctx context.Context, dir string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for !isMounted(dir) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is not mounted %v after the mount command returned", dir, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

func (p *peer) Unmount(ctx context.Context) error {
	if p.persistent {
		return nil
	}
	return p.d.detach(p.mnt)
}

func (p *peer) Cleanup() error {
	if p.mnt == "" {
		return nil
	}
	return p.d.detach(p.mnt)
}

func (p *peer) DaemonCPU() time.Duration { return p.d.cpu() }
func (p *peer) Stats() *measure.Snapshot { return nil }

// fscryptTarget is the kernel's per-file encryption (ext4 -O encrypt,
// AES-256-XTS contents, v2 policy) managed by the fscrypt tool, its state
// kept in the work directory instead of /etc and /.fscrypt.
type fscryptTarget struct {
	size    int64
	v       ext4Image
	keyfile string
	conf    string
}

// NewFscrypt returns the fscrypt target.
func NewFscrypt(o TargetOptions) Target { return &fscryptTarget{size: imageSize(o.Size)} }

func (t *fscryptTarget) Name() string { return "fscrypt" }

func (t *fscryptTarget) Available() error {
	if err := needProgs("fscrypt"); err != nil {
		return err
	}
	if err := needLoop("fscrypt on an ext4 image"); err != nil {
		return err
	}
	if _, err := os.Stat("/sys/fs/ext4/features/encryption"); err != nil {
		return errors.New("this kernel's ext4 has no encryption support")
	}
	return nil
}

// env points fscrypt at our config and makes our mount its "root"
// filesystem, so that nothing is written to /etc/fscrypt.conf or /.fscrypt.
func (t *fscryptTarget) env() []string {
	return []string{"FSCRYPT_CONF=" + t.conf, "FSCRYPT_ROOT_MNT=" + t.v.mnt}
}

func (t *fscryptTarget) dataDir() string { return filepath.Join(t.v.mnt, "data") }

func (t *fscryptTarget) Setup(ctx context.Context, work string) error {
	work, err := realPath(work)
	if err != nil {
		return err
	}
	t.conf, t.keyfile = filepath.Join(work, "fscrypt.conf"), filepath.Join(work, "key")
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.WriteFile(t.keyfile, key, 0o600); err != nil {
		return err
	}
	if err := t.v.create(ctx, work, t.size, "-O", "encrypt"); err != nil {
		return err
	}
	if err := t.v.mount(ctx); err != nil {
		return err
	}
	err = t.setupMounted(ctx)
	return errors.Join(err, t.v.unmount())
}

// fscryptConf is what `fscrypt setup` would write to /etc/fscrypt.conf,
// minus its calibration of the passphrase hash (half a minute here; a raw
// key is never hashed) and with the defaults of fscrypt 0.3.
const fscryptConf = `{
	"source": "raw_key",
	"hash_costs": {"time": "1", "memory": "8192", "parallelism": "1"},
	"options": {"padding": "32", "contents": "AES_256_XTS", "filenames": "AES_256_CTS", "policy_version": "2"},
	"use_fs_keyring_for_v1_policies": false,
	"allow_cross_user_metadata": false
}
`

func (t *fscryptTarget) setupMounted(ctx context.Context) error {
	if err := os.WriteFile(t.conf, []byte(fscryptConf), 0o600); err != nil {
		return err
	}
	if _, err := run(ctx, t.env(), "", "fscrypt", "setup", t.v.mnt, "--quiet"); err != nil {
		return err
	}
	if err := mkdirs(t.dataDir()); err != nil {
		return err
	}
	_, err := run(ctx, t.env(), "", "fscrypt", "encrypt", t.dataDir(), "--source=raw_key",
		"--name=twincrypt-bench", "--key="+t.keyfile, "--no-recovery", "--quiet")
	return err
}

func (t *fscryptTarget) Mount(ctx context.Context) (string, error) {
	if err := t.v.mount(ctx); err != nil {
		return "", err
	}
	if _, err := run(ctx, t.env(), "", "fscrypt", "unlock", t.dataDir(), "--key="+t.keyfile, "--quiet"); err != nil {
		return "", errors.Join(err, t.v.unmount())
	}
	return t.dataDir(), nil
}

// Unmount unmounts the filesystem, which also removes the key from it.
func (t *fscryptTarget) Unmount(ctx context.Context) error { return t.v.unmount() }
func (t *fscryptTarget) Cleanup() error                    { return t.v.unmount() }
func (t *fscryptTarget) DaemonCPU() time.Duration          { return 0 }
func (t *fscryptTarget) Stats() *measure.Snapshot          { return nil }
