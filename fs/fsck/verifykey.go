package fsck

// Checking a master key against the data, for recovery without the config
// (init --masterkey) or without the passphrase (passwd and mount
// --masterkey). The config cannot vouch for a key it does not wrap, so the
// volume itself has to: a wrong key must be refused before it is wrapped
// into a new config, or every file would read as garbage and every new one
// be written under the wrong key.
//
// What the format makes checkable, strongest first:
//
//   - the tail unit of a file whose size is not a multiple of 4096: its
//     plaintext ends in the 16-byte zero trailer (FORMAT.md 3.2), which a
//     wrong key turns into 16 random bytes: a 2^-128 chance of passing;
//   - a symlink target sealed in its link, a user.* xattr value: AES-GCM,
//     a 2^-128 chance too;
//   - an encrypted name: its PKCS#7 padding comes out valid under a wrong
//     key with a chance of about 1/255, so names are weak evidence one by
//     one; eight of them that all decrypt are 2^-64.
//
// Headers say which cipher and key size wrote a file, and the root's IV
// file says whether names are encrypted: settings that disagree with them
// are reported as such, before any key is tried.

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/content"
	"github.com/twincrypt/twincrypt/cipher/keys"
	"github.com/twincrypt/twincrypt/cipher/links"
	"github.com/twincrypt/twincrypt/cipher/names"
)

// Errors of VerifyKey the CLI branches on.
var (
	// ErrWrongKey: the key fails every check the data offers.
	ErrWrongKey = errors.New("the master key does not decrypt this volume")
	// ErrUnverifiable: LOWER holds nothing a key can be checked against
	// (no file content, no sealed value, too few names).
	ErrUnverifiable = errors.New("nothing in LOWER can confirm the master key")
	// ErrSettings: the settings (cipher, key size, plaintext names)
	// disagree with what the data says about itself.
	ErrSettings = errors.New("the settings do not match the volume")
)

// Verification bounds: enough evidence to stop early, and how much of a
// large volume is looked at before giving up.
const (
	verifyEnough       = 3     // strong checks passed
	verifyFailedEnough = 16    // strong checks failed with none passed
	verifyMaxEntries   = 50000 // entries visited
	verifyNamesEnough  = 8     // names that decrypt, with no strong check available
	verifyMaxDepth     = 64    // directory levels descended (one open descriptor each)
)

// KeyEvidence counts what VerifyKey checked.
type KeyEvidence struct {
	Trailers, TrailersFailed int // tail units whose trailer decrypts to zeros, or not
	Sealed, SealedFailed     int // symlink targets and user.* xattr values that open, or not
	Names, NamesFailed       int // encrypted names that decrypt, or not
	Headers                  int // file headers with the expected cipher and key size
	Entries                  int // entries visited
}

func (e *KeyEvidence) strong() (ok, failed int) {
	return e.Trailers + e.Sealed, e.TrailersFailed + e.SealedFailed
}

func (e *KeyEvidence) enough() bool {
	ok, failed := e.strong()
	return ok >= verifyEnough || (ok == 0 && failed >= verifyFailedEnough) || e.Entries >= verifyMaxEntries
}

// String says what was checked, for messages.
func (e *KeyEvidence) String() string {
	var parts []string
	add := func(ok, failed int, what string) {
		switch {
		case ok+failed == 0:
		case failed == 0:
			parts = append(parts, fmt.Sprintf("%d %s", ok, what))
		default:
			parts = append(parts, fmt.Sprintf("%d of %d %s", ok, ok+failed, what))
		}
	}
	add(e.Trailers, e.TrailersFailed, "file trailers")
	add(e.Sealed, e.SealedFailed, "sealed symlink targets or xattr values")
	add(e.Names, e.NamesFailed, "names")
	if len(parts) == 0 {
		return "nothing checkable"
	}
	return strings.Join(parts, ", ")
}

// verdict decides from the evidence.
func (e *KeyEvidence) verdict() error {
	ok, failed := e.strong()
	switch {
	case ok > 0:
		// A wrong key passes a strong check with probability 2^-128;
		// failures next to a pass are damaged files.
		return nil
	case failed > 0:
		return fmt.Errorf("%w: %s decrypt correctly", ErrWrongKey, e.failedString())
	case e.NamesFailed > e.Names:
		return fmt.Errorf("%w: %s decrypt correctly", ErrWrongKey, e.failedString())
	case e.NamesFailed == 0 && e.Names >= verifyNamesEnough:
		return nil
	}
	return fmt.Errorf("%w: checked %s (a key is confirmed by the content of a file whose size is not a multiple of 4096, a symlink, a user.* xattr, or %d names)",
		ErrUnverifiable, e, verifyNamesEnough)
}

func (e *KeyEvidence) failedString() string {
	var parts []string
	if n := e.Trailers + e.TrailersFailed; n > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d file trailers", e.Trailers, n))
	}
	if n := e.Sealed + e.SealedFailed; n > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d sealed values", e.Sealed, n))
	}
	if n := e.Names + e.NamesFailed; n > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d names", e.Names, n))
	}
	return strings.Join(parts, ", ")
}

// verifier walks LOWER for VerifyKey.
type verifier struct {
	names  *names.Cipher
	seal   *keys.Sealer
	engine *content.Engine
	ev     KeyEvidence
	// Header settings seen that differ from the volume's (first one).
	otherHeader string
	otherCount  int
	buf         []byte
}

// VerifyKey checks master against the data in lower under the settings of
// cfg (Cipher, KeyBytes, PlaintextNames; nothing else is used). It returns
// what it checked and nil when the key is confirmed, ErrWrongKey when the
// data refutes it, ErrSettings when the data was written with other
// settings, ErrUnverifiable when the data cannot tell. It reads at most a
// few kilobytes per file and stops once the answer is clear, so it is
// quick on a large volume. Like Check, it never follows a symlink.
func VerifyKey(lower string, cfg *config.Config, master []byte) (*KeyEvidence, error) {
	if len(master) != keys.MasterKeySize {
		return nil, fmt.Errorf("master key is %d bytes, want %d", len(master), keys.MasterKeySize)
	}
	engine, err := content.NewEngine(cfg.ContentSpec(), cfg.KeyBytes, master)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrSettings, err)
	}
	v := &verifier{engine: engine, seal: keys.NewSealer(master), buf: make([]byte, content.ExtentSize+content.TrailerSize)}
	root, err := openRoot(lower)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", lower, err)
	}
	defer root.Close()
	list, err := root.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", lower, err)
	}
	hasIV, hasEntries := false, false
	for _, n := range list {
		switch {
		case n == names.DirIVFile:
			hasIV = true
		case config.IsReserved(n) || n == links.StoreDir || names.IsTmp(n):
		default:
			hasEntries = true
		}
	}
	switch {
	case cfg.PlaintextNames && hasIV:
		return &v.ev, fmt.Errorf("%w: %s/%s exists, so the volume has encrypted names (drop --plaintext-names)", ErrSettings, lower, names.DirIVFile)
	case !cfg.PlaintextNames && !hasIV && hasEntries:
		return &v.ev, fmt.Errorf("%w: %s has entries but no %s: it has plaintext names (use --plaintext-names), or its root IV is lost and with it every name in the root",
			ErrSettings, lower, names.DirIVFile)
	}
	if !cfg.PlaintextNames {
		nameKey := keys.Derive(master, "names", nil, names.KeySize)
		v.names, err = names.New(nameKey)
		keys.Wipe(nameKey)
		if err != nil {
			return nil, err
		}
	}
	v.walk(root, list, 0)
	if v.otherCount > 0 && v.ev.Headers == 0 {
		return &v.ev, fmt.Errorf("%w: %d file header(s) say %s, not %s with %d-byte keys (give --cipher and --key-bytes as the volume was made)",
			ErrSettings, v.otherCount, v.otherHeader, cfg.Cipher, cfg.KeyBytes)
	}
	return &v.ev, v.ev.verdict()
}

// walk checks the entries of the open directory d, depth levels below
// LOWER, then descends.
func (v *verifier) walk(d *os.File, list []string, depth int) {
	isRoot := depth == 0
	dfd := int(d.Fd())
	sort.Strings(list)
	var iv []byte
	if v.names != nil {
		b, err := readSmall(dfd, names.DirIVFile, names.DirIVSize+1)
		if err == nil && len(b) == names.DirIVSize {
			iv = b
		}
	}
	var subdirs []string
	for _, name := range list {
		if v.ev.enough() {
			return
		}
		if isRoot && (config.IsReserved(name) || name == links.StoreDir) {
			continue
		}
		if names.IsTmp(name) || (v.names != nil && (name == names.DirIVFile || names.IsSidecar(name))) {
			continue
		}
		v.ev.Entries++
		if v.names != nil && iv != nil && !names.IsLong(name) {
			if _, err := v.names.Decrypt(name, iv); err == nil {
				v.ev.Names++
			} else {
				v.ev.NamesFailed++
			}
		}
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			v.file(dfd, name, &st)
		case unix.S_IFLNK:
			v.link(dfd, name)
		case unix.S_IFDIR:
			subdirs = append(subdirs, name)
		}
	}
	for _, name := range subdirs {
		if v.ev.enough() || depth >= verifyMaxDepth {
			return
		}
		sub, err := openAt(dfd, name, unix.O_DIRECTORY, nil)
		if err != nil {
			continue
		}
		v.xattrs(int(sub.Fd()))
		if l, err := sub.Readdirnames(-1); err == nil {
			v.walk(sub, l, depth+1)
		}
		sub.Close()
	}
}

// file checks a regular file's header, tail unit and xattrs.
func (v *verifier) file(dfd int, name string, st *unix.Stat_t) {
	f, err := openAt(dfd, name, unix.O_NOATIME, st)
	if errors.Is(err, unix.EPERM) {
		f, err = openAt(dfd, name, 0, st)
	}
	if err != nil {
		return
	}
	defer f.Close()
	fd := int(f.Fd())
	v.xattrs(fd)
	plainSize, err := content.PlainSize(st.Size)
	if err != nil || plainSize == 0 {
		return
	}
	var hb [content.HeaderSize]byte
	if n, err := preadFull(fd, hb[:], 0); err != nil || n != len(hb) {
		return
	}
	hdr, err := content.ParseHeader(hb[:])
	if err != nil {
		return
	}
	fc, err := v.engine.FileCipher(&hdr)
	if err != nil {
		if v.otherCount == 0 {
			v.otherHeader = headerSettings(hdr)
		}
		v.otherCount++
		return
	}
	v.ev.Headers++
	last := plainSize / content.ExtentSize
	size := content.UnitSize(last, plainSize)
	unit := v.buf[:size]
	if n, err := preadFull(fd, unit, content.UnitOffset(last)); err != nil || n != size {
		return
	}
	if size == content.TrailerSize || content.IsZero(unit) {
		// The trailer alone is stored as zeros, not encrypted (FORMAT.md
		// 3.2): whatever it holds says nothing about the key (fsck reports
		// one that is not zeros). An all-zero unit is a hole.
		return
	}
	plain := make([]byte, size)
	fc.DecryptUnit(plain, unit, last)
	if content.IsZero(plain[size-content.TrailerSize:]) {
		v.ev.Trailers++
	} else {
		v.ev.TrailersFailed++
	}
	clear(plain)
}

// headerSettings names a header's cipher and key size.
func headerSettings(h content.Header) string {
	name := fmt.Sprintf("cipher id %d", h.CipherID)
	switch h.CipherID {
	case content.CipherXTS:
		name = "aes-xts"
	case content.CipherCBC:
		name = "aes-cbc (whole extents, config version 1)"
	case content.CipherCBC512:
		name = "aes-cbc (512-byte sectors)"
	}
	return fmt.Sprintf("%s with %d-byte keys", name, h.KeyBytes)
}

// link checks a symlink target sealed in the link (long links, whose
// target is in twincrypt.links, are skipped).
func (v *verifier) link(dfd int, name string) {
	buf := make([]byte, maxLink+1)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil || n > maxLink {
		return
	}
	if _, _, long := links.ParseMarker(string(buf[:n])); long {
		return
	}
	if _, err := links.Open(v.seal, buf[:n]); err == nil {
		v.ev.Sealed++
	} else if !errors.Is(err, links.ErrEncoding) {
		v.ev.SealedFailed++
	}
}

// xattrs checks the user.* values of the open file fd.
func (v *verifier) xattrs(fd int) {
	list, err := xattrList(fd)
	if err != nil {
		return
	}
	for _, attr := range list {
		if !strings.HasPrefix(attr, "user.") {
			continue
		}
		val, err := xattrGet(fd, attr)
		if err != nil {
			continue
		}
		if _, err := v.seal.Open(val, []byte("xattr "+attr)); err == nil {
			v.ev.Sealed++
		} else {
			v.ev.SealedFailed++
		}
	}
}
