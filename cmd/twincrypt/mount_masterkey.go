package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/twincrypt/twincrypt/cipher/config"
	"github.com/twincrypt/twincrypt/cipher/keys"
)

// checkMountMasterKey refuses master-key flags that mean nothing here, before
// anything is validated or asked.
func checkMountMasterKey(f mountFlags) error {
	if err := f.mk.check(f.passfile != "" || len(f.extpass) > 0); err != nil {
		return err
	}
	if f.mk.given() && f.passthrough {
		return usageErrorf("--passthrough mounts a plain directory: no master key")
	}
	return nil
}

// masterKeyHint adds the way forward to a planMount error when the config
// that a master-key mount would have read its settings from is missing.
func masterKeyHint(f mountFlags, err error) error {
	if f.mk.given() && errors.Is(err, config.ErrMissing) {
		return fmt.Errorf("%w; with the master key, 'twincrypt init --masterkey-file FILE LOWER' writes a new config (the settings come from it)", err)
	}
	return err
}

// masterKey reads the master key given by --masterkey(-file) instead of a
// passphrase and checks it against the data: a key the data refutes is
// refused before anything is mounted, so that nothing is written under it.
// A key that nothing in LOWER can confirm (a volume without content,
// links, xattrs or enough names) is used with a warning: there is nothing
// it could garble. The key comes back in locked memory, as unlock's.
func (p *mountPlan) masterKey(mk masterKeyFlags, stdin *os.File, stderr io.Writer) (*keys.Locked, error) {
	key, err := mk.read(stdin, stderr)
	if err != nil {
		return nil, err
	}
	checked, err := checkRecoveryConfig(p.lower, p.cfg, key.Bytes(), true)
	if err != nil {
		key.Destroy()
		return nil, fmt.Errorf("mount %s: %w; nothing was mounted", p.lower, err)
	}
	if strings.HasPrefix(checked, notConfirmed) {
		fmt.Fprintf(stderr, "twincrypt: warning: %s: %s\n", p.lower, checked)
	}
	return key, nil
}

// masterKeyText is the key as the background child reads it on stdin
// (--masterkey from a pipe), in locked memory; the caller destroys it.
func masterKeyText(key []byte) *keys.Locked {
	text := keys.NewLocked(masterKeyHexDigits + 1)
	out := text.Bytes()
	const digits = "0123456789abcdef"
	for i, b := range key {
		out[2*i], out[2*i+1] = digits[b>>4], digits[b&15]
	}
	out[masterKeyHexDigits] = '\n'
	return text
}
