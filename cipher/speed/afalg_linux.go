package speed

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// ProbeAFALG checks whether the kernel crypto API is reachable from
// userspace the way cryptsetup benchmark reaches it: an AF_ALG socket bound
// to the skcipher "xts(aes)". It returns nil when it is.
func ProbeAFALG() error {
	fd, err := unix.Socket(unix.AF_ALG, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("kernel crypto API not reachable: socket(AF_ALG): %w (the kernel lacks CONFIG_CRYPTO_USER_API_SKCIPHER, or a sandbox forbids it)", err)
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrALG{Type: "skcipher", Name: "xts(aes)"}); err != nil {
		return fmt.Errorf("kernel crypto API: bind(AF_ALG, skcipher xts(aes)): %w (algif_skcipher not loaded?)", err)
	}
	return nil
}
