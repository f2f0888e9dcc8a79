package fsck

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/content"
)

// TestVerifyKey: what each kind of evidence decides, on volumes built
// through a mount. A key with one bit flipped stands for a wrong key.
func TestVerifyKey(t *testing.T) {
	wrongKey := func(v *volume) []byte {
		k := bytes.Clone(v.master)
		k[63] ^= 1
		return k
	}
	cases := []struct {
		name     string
		opts     config.Options
		build    func(t *testing.T, m *mounted)
		damage   func(t *testing.T, v *volume) // in LOWER, after the unmount (optional)
		right    error                         // VerifyKey with the volume's key
		wrong    error                         // with the wrong key
		evidence string
	}{
		{"file content", config.Options{Cipher: "aes-cbc", KeyBytes: 16}, func(t *testing.T, m *mounted) {
			writeFile(t, m.path("a"), []byte("five\n"))
		}, nil, nil, ErrWrongKey, "1 file trailers, 1 names"},
		{"plaintext names, content", config.Options{PlaintextNames: true}, func(t *testing.T, m *mounted) {
			writeFile(t, m.path("a"), pattern(5000, 1))
		}, nil, nil, ErrWrongKey, "1 file trailers"},
		{"symlink only", config.Options{PlaintextNames: true}, func(t *testing.T, m *mounted) {
			must(t, os.Symlink("/somewhere", m.path("l")))
		}, nil, nil, ErrWrongKey, "1 sealed symlink targets or xattr values"},
		{"eight empty files", config.Options{}, func(t *testing.T, m *mounted) {
			for i := range 8 {
				writeFile(t, m.path(fmt.Sprintf("empty%d", i)), nil)
			}
		}, nil, nil, ErrWrongKey, "8 names"},
		{"two empty files", config.Options{}, func(t *testing.T, m *mounted) {
			writeFile(t, m.path("x"), nil)
			writeFile(t, m.path("y"), nil)
		}, nil, ErrUnverifiable, ErrWrongKey, "2 names"},
		{"a file of whole extents only", config.Options{PlaintextNames: true}, func(t *testing.T, m *mounted) {
			writeFile(t, m.path("a"), pattern(8192, 2))
		}, nil, ErrUnverifiable, ErrUnverifiable, "nothing checkable"},
		{"empty volume", config.Options{}, func(t *testing.T, m *mounted) {}, nil, ErrUnverifiable, ErrUnverifiable, "nothing checkable"},
		// The trailer alone (a file ending on an extent boundary) is
		// stored as zeros, not encrypted: one that is not (fsck's
		// stale-trailer) is no evidence against any key.
		{"a stale trailer", config.Options{PlaintextNames: true}, func(t *testing.T, m *mounted) {
			writeFile(t, m.path("a"), pattern(8192, 2))
		}, func(t *testing.T, v *volume) {
			patchLower(t, v.abs("a"), content.UnitOffset(2), pattern(content.TrailerSize, 3))
		}, ErrUnverifiable, ErrUnverifiable, "nothing checkable"},
		{"a stale trailer beside a file's tail", config.Options{PlaintextNames: true}, func(t *testing.T, m *mounted) {
			writeFile(t, m.path("a"), pattern(8192, 2))
			writeFile(t, m.path("b"), pattern(100, 4))
		}, func(t *testing.T, v *volume) {
			patchLower(t, v.abs("a"), content.UnitOffset(2), pattern(content.TrailerSize, 3))
		}, nil, ErrWrongKey, "1 file trailers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := newVolume(t, c.opts)
			m := v.mount(t)
			c.build(t, m)
			m.unmount(t)
			if c.damage != nil {
				c.damage(t, v)
			}
			ev, err := VerifyKey(v.lower, v.cfg, v.master)
			if !errors.Is(err, c.right) || (c.right == nil && err != nil) {
				t.Errorf("right key: %v, want %v", err, c.right)
			}
			if ev == nil || ev.String() != c.evidence {
				t.Errorf("right key: evidence %v, want %q", ev, c.evidence)
			}
			if _, err := VerifyKey(v.lower, v.cfg, wrongKey(v)); !errors.Is(err, c.wrong) {
				t.Errorf("wrong key: %v, want %v", err, c.wrong)
			}
		})
	}
}

// TestVerifyKeySettings: settings that the data contradicts are named as
// such, whatever the key.
func TestVerifyKeySettings(t *testing.T) {
	v := newVolume(t, config.Options{Cipher: "aes-xts", KeyBytes: 32})
	m := v.mount(t)
	writeFile(t, m.path("a"), []byte("data"))
	m.unmount(t)
	for _, s := range []config.Config{
		{Cipher: "aes-xts", KeyBytes: 64},
		{Cipher: "aes-cbc", KeyBytes: 32},
		{Cipher: "aes-xts", KeyBytes: 32, PlaintextNames: true},
	} {
		if _, err := VerifyKey(v.lower, &s, v.master); !errors.Is(err, ErrSettings) {
			t.Errorf("%+v: %v, want ErrSettings", s, err)
		}
	}
	p := newVolume(t, config.Options{PlaintextNames: true})
	m = p.mount(t)
	writeFile(t, m.path("a"), []byte("data"))
	m.unmount(t)
	s := *p.cfg
	s.PlaintextNames = false
	if _, err := VerifyKey(p.lower, &s, p.master); !errors.Is(err, ErrSettings) {
		t.Errorf("encrypted names over a plaintext-names volume: %v, want ErrSettings", err)
	}
}
