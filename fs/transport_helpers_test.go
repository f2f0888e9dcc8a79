package fs

import (
	"os"
	"testing"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// testTransportEnv selects the transport of the mounts the fs tests make
// (testMount.mount): "uring" runs them over FUSE over io_uring, "dev" or
// unset over /dev/fuse. scripts/test.sh runs a selection with uring.
const testTransportEnv = "TWINCRYPT_TEST_TRANSPORT"

// testTransport is the transport the tests' mounts ask for.
func testTransport(t testing.TB) string {
	t.Helper()
	tr, err := ParseTransport(os.Getenv(testTransportEnv))
	if err != nil {
		t.Fatalf("%s: %v", testTransportEnv, err)
	}
	return tr
}

// requireTransport skips the test, saying why, when a mount that asked
// for the ring got /dev/fuse: a uring run must never pass on /dev/fuse.
func requireTransport(t testing.TB, srv *fuse.Server, asked string) {
	t.Helper()
	if asked != TransportUring {
		return
	}
	if info := TransportOf(srv); info.Name != TransportUring {
		t.Skipf("%s=uring but the mount runs on %s", testTransportEnv, info)
	}
}
