package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/measure"
)

// The kernel's eCryptfs, the stacked filesystem twincrypt's aes-cbc
// format follows: a file is encrypted one by one over a lower directory,
// names too. It is mounted as its users do, `mount -t ecryptfs` through
// ecryptfs-utils' mount.ecryptfs helper, with every answer the helper
// would ask for given as an option, so that nothing prompts:
//
//	key=passphrase:passphrase_passwd_file=FILE  the bench passphrase
//	ecryptfs_cipher=aes, ecryptfs_key_bytes=32  (or 16, ecryptfs-aes128)
//	ecryptfs_enable_filename_crypto=y, ecryptfs_fnek_sig=SIG
//	ecryptfs_passthrough=n, no_sig_cache (never ask to cache the sig)
//
// The filename key's signature comes from `ecryptfs-add-passphrase
// --fnek`, which puts both keys into root's user keyring; they are
// unlinked again at Cleanup (with keyutils' keyctl, when installed).

// procFilesystems is where the kernel lists the filesystems it knows
// (a variable for the tests).
var procFilesystems = "/proc/filesystems"

// errNoEcryptfs is the skip reason on a kernel without eCryptfs.
var errNoEcryptfs = errors.New("no ecryptfs in this kernel")

// ecryptfsInKernel reports whether the list of /proc/filesystems names
// ecryptfs ("nodev\tecryptfs").
func ecryptfsInKernel(list string) bool {
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) > 0 && f[len(f)-1] == "ecryptfs" {
			return true
		}
	}
	return false
}

// ecryptfsAvailable returns nil when eCryptfs can be mounted here: root,
// the filesystem in the kernel (loaded with modprobe if it is a module
// not loaded yet), ecryptfs-utils installed.
func ecryptfsAvailable() error {
	if err := needRoot("ecryptfs"); err != nil {
		return err
	}
	list, err := os.ReadFile(procFilesystems)
	if err != nil {
		return fmt.Errorf("cannot tell whether the kernel has ecryptfs: %v", err)
	}
	if !ecryptfsInKernel(string(list)) {
		// A distribution kernel has it as a module, loaded on demand.
		if needProgs("modprobe") != nil {
			return errNoEcryptfs
		}
		if _, err := run(context.Background(), nil, "", "modprobe", "-q", "ecryptfs"); err != nil {
			return errNoEcryptfs
		}
		if list, err = os.ReadFile(procFilesystems); err != nil || !ecryptfsInKernel(string(list)) {
			return errNoEcryptfs
		}
	}
	if err := needProgs("ecryptfs-add-passphrase", "mount.ecryptfs"); err != nil {
		return fmt.Errorf("%w (apt install ecryptfs-utils)", err)
	}
	return nil
}

// sigRE matches the signatures ecryptfs-add-passphrase prints:
// "Inserted auth tok with sig [0123456789abcdef] into the user session keyring".
var sigRE = regexp.MustCompile(`sig \[([0-9a-f]{16})\]`)

// parseAddPassphrase returns the content key's and the filename key's
// signatures from the output of `ecryptfs-add-passphrase --fnek`: the
// first and the second printed.
func parseAddPassphrase(out string) (sig, fnekSig string, err error) {
	m := sigRE.FindAllStringSubmatch(out, -1)
	if len(m) < 2 {
		return "", "", fmt.Errorf("ecryptfs-add-passphrase --fnek printed %d key signature(s), want 2: %q", len(m), oneLine(out))
	}
	return m[0][1], m[1][1], nil
}

// ecryptfsOptions returns the -o of `mount -t ecryptfs` for a volume with
// keyBytes of AES key (16, 24 or 32), filename encryption under the key
// whose signature is fnekSig, the passphrase in passwdFile.
func ecryptfsOptions(keyBytes int, fnekSig, passwdFile string) (string, error) {
	switch keyBytes {
	case 16, 24, 32:
	default:
		return "", fmt.Errorf("ecryptfs: AES key of %d bytes (16, 24 or 32)", keyBytes)
	}
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(fnekSig) {
		return "", fmt.Errorf("ecryptfs: filename key signature %q is not 16 hex digits", fnekSig)
	}
	// Options are comma separated; a comma (or a space mount splits on)
	// in the path would cut it.
	if !filepath.IsAbs(passwdFile) || strings.ContainsAny(passwdFile, ", \t\n=") {
		return "", fmt.Errorf("ecryptfs: passphrase file %q must be an absolute path without ',', '=' or spaces", passwdFile)
	}
	return strings.Join([]string{
		"key=passphrase:passphrase_passwd_file=" + passwdFile,
		"ecryptfs_cipher=aes",
		fmt.Sprintf("ecryptfs_key_bytes=%d", keyBytes),
		"ecryptfs_enable_filename_crypto=y",
		"ecryptfs_fnek_sig=" + fnekSig,
		"ecryptfs_passthrough=n",
		"no_sig_cache",
	}, ","), nil
}

// ecryptfs is the target: the lower directory and the mount point under
// the work directory, the keys in root's user keyring.
type ecryptfs struct {
	keyBytes   int
	lower, mnt string
	options    string
	sigs       []string // to unlink at Cleanup
}

// NewEcryptfs returns the kernel eCryptfs target with an AES key of
// keyBytes (32: "ecryptfs", as crypt-cbc's default; 16, eCryptfs's own
// default: "ecryptfs-aes128").
func NewEcryptfs(keyBytes int) Target { return &ecryptfs{keyBytes: keyBytes} }

func (t *ecryptfs) Name() string {
	if t.keyBytes == 32 {
		return "ecryptfs"
	}
	return fmt.Sprintf("ecryptfs-aes%d", t.keyBytes*8)
}

func (t *ecryptfs) Available() error { return ecryptfsAvailable() }

// Note labels the target with the kernel's driver.
func (t *ecryptfs) Note() string {
	var u unix.Utsname
	rel := "?"
	if unix.Uname(&u) == nil {
		rel = unix.ByteSliceToString(u.Release[:])
	}
	return fmt.Sprintf("the kernel's eCryptfs (Linux %s), AES-%d, filenames encrypted", rel, t.keyBytes*8)
}

func (t *ecryptfs) Setup(ctx context.Context, work string) error {
	t.lower, t.mnt = filepath.Join(work, "lower"), filepath.Join(work, "mnt")
	if err := mkdirs(t.lower, t.mnt); err != nil {
		return err
	}
	passwd := filepath.Join(work, "passwd")
	if err := os.WriteFile(passwd, []byte("passphrase_passwd="+benchPassphrase+"\n"), 0o600); err != nil {
		return err
	}
	if err := t.addKeys(ctx); err != nil {
		return err
	}
	var err error
	t.options, err = ecryptfsOptions(t.keyBytes, t.sigs[1], passwd)
	return err
}

// addKeys puts the content and filename keys into root's keyring, again
// before every Mount: mount.ecryptfs adds ecryptfs_unlink_sigs to the
// options, which lets an unmount take the keys out of the keyring (in the
// kernel VM, Linux 6.1, a script's second mount of a lower directory
// failed with EPERM until the keys were added again).
func (t *ecryptfs) addKeys(ctx context.Context) error {
	// "-": the passphrase from stdin, no prompt.
	out, err := run(ctx, nil, benchPassphrase+"\n", "ecryptfs-add-passphrase", "--fnek", "-")
	if err != nil {
		return err
	}
	sig, fnek, err := parseAddPassphrase(out)
	if err != nil {
		return err
	}
	t.sigs = []string{sig, fnek}
	return nil
}

func (t *ecryptfs) Mount(ctx context.Context) (string, error) {
	if err := t.addKeys(ctx); err != nil {
		return "", err
	}
	if _, err := run(ctx, nil, "", "mount", "-t", "ecryptfs", "-o", t.options, t.lower, t.mnt); err != nil {
		return "", err
	}
	if !isMounted(t.mnt) {
		return "", fmt.Errorf("mount -t ecryptfs returned but %s is not mounted", t.mnt)
	}
	return t.mnt, nil
}

func (t *ecryptfs) Unmount(ctx context.Context) error {
	if t.mnt == "" {
		return nil
	}
	return unmount(t.mnt)
}

func (t *ecryptfs) Cleanup() error {
	err := t.Unmount(context.Background())
	if needProgs("keyctl") == nil {
		for _, s := range t.sigs {
			if out, e := run(context.Background(), nil, "", "keyctl", "search", "@u", "user", s); e == nil {
				_, _ = run(context.Background(), nil, "", "keyctl", "unlink", strings.TrimSpace(out), "@u")
			}
		}
	}
	t.sigs = nil
	return err
}

func (t *ecryptfs) DaemonCPU() time.Duration { return 0 } // kernel threads and the workload's own
func (t *ecryptfs) Stats() *measure.Snapshot { return nil }
