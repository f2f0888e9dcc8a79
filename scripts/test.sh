#!/usr/bin/env bash
# The test command: every package, with the race detector off (FUSE tests
# run real mounts and are slow under -race; `go test -race ./cipher/...`
# covers the pure code). Mount tests need root or fusermount3 and /dev/fuse;
# they skip with a message where the machine has neither.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
go test -count=1 -timeout 20m "$@" ./...
# The crash-state exploration at its short size (a few minutes; it skips
# without root): its last line is "crash states: N explored, M violations".
go run ./integration/crashsim/cmd/crashstates -size short

# The other transport: the differential tester, posixtest, the fault and
# ring tests and the real-app tests (in-process mounts, /dev/fuse by
# default) again over FUSE over io_uring; the crash tests (twincrypt mount,
# auto by default) again over each transport.
# Where the kernel has no ring (or we are not root) they skip, saying why;
# a mount that falls back to /dev/fuse skips its test rather than pass.
if [ $# -eq 0 ]; then
	TWINCRYPT_TEST_TRANSPORT=uring go test -count=1 -timeout 30m \
		-run 'TestDifferential|TestPosix$|TestFault|TestUring|TestCacheSeesDaemonChanges|TestInodeFlags' ./fs
	# twincrypt mount's own default is auto: the ring only where the
	# administrator switched enable_uring on, /dev/fuse otherwise. Its
	# crash tests again, pinned to each transport in turn (uring switches
	# enable_uring on for each mount's start and back off).
	TWINCRYPT_TEST_TRANSPORT=dev go test -count=1 -timeout 30m \
		-run 'TestCrash|TestMountTransport' ./cmd/twincrypt
	TWINCRYPT_TEST_TRANSPORT=uring go test -count=1 -timeout 30m \
		-run 'TestCrash|TestMountTransport' ./cmd/twincrypt
	# The real programs (tar, git, sqlite, make, cc, cp, rsync, Go's os
	# tests, mmap) on every variant over the ring.
	TWINCRYPT_TEST_TRANSPORT=uring go test -count=1 -timeout 30m ./integration
fi
