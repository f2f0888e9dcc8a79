//go:build !linux

package speed

import "errors"

// ProbeAFALG reports that AF_ALG exists only on Linux.
func ProbeAFALG() error {
	return errors.New("AF_ALG (the kernel crypto API socket) exists only on Linux")
}
