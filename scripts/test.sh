#!/usr/bin/env bash
# The test command: every package, with the race detector off (FUSE tests
# run real mounts and are slow under -race; `go test -race ./cipher/...`
# covers the pure code). Mount tests need root or fusermount3 and /dev/fuse;
# they skip with a message where the machine has neither.
#
# Every pass runs even when an earlier one fails: a failure in the first
# would otherwise hide whether the crash states and the ring still hold.
# The script ends with one summary of the passes that failed and the tests
# that failed in each (go test's "--- FAIL" lines), and exits 1 if any did.
# Each pass's own output (go test's closing "ok"/"FAIL" lines included) is
# printed as it runs.
set -uo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH

logdir=$(mktemp -d "${TMPDIR:-/tmp}/twincrypt-test.XXXXXX")
trap 'rm -rf "$logdir"' EXIT
failed=()   # "name<TAB>log" of every pass that failed
started=$SECONDS

# pass NAME CMD...: runs one pass, its output to the terminal and to a log.
pass() {
	local name=$1 log
	shift
	npass=$((npass + 1))
	log="$logdir/$npass.log"
	echo "== $name"
	local t0=$SECONDS
	"$@" 2>&1 | tee "$log"
	local rc=${PIPESTATUS[0]}
	echo "== $name: exit $rc after $((SECONDS - t0)) s"
	if [ "$rc" -ne 0 ]; then
		failed+=("$name"$'\t'"$log")
	fi
}
npass=0

# Every package but the kernel VM's, whose boots under TCG (no working
# KVM on these machines) take minutes each: it is a pass of its own with a
# longer bound.
pkgs=$(go list ./... | grep -v '/integration/kvm$')
pass "go test (every package but the kernel VM)" go test -count=1 -timeout 20m "$@" $pkgs
pass "kernel VM: dm-crypt and eCryptfs (integration/kvm)" go test -count=1 -timeout 45m "$@" ./integration/kvm

# The crash-state exploration at its short size (a few minutes; it skips
# without root): its last line is "crash states: N explored, M violations".
pass "crash states" go run ./integration/crashsim/cmd/crashstates -size short

# The other transport: the differential tester, posixtest, the fault and
# ring tests and the real-app tests (in-process mounts, /dev/fuse by
# default) again over FUSE over io_uring; the crash tests (twincrypt mount,
# auto by default) again over each transport.
# Where the kernel has no ring (or we are not root) they skip, saying why;
# a mount that falls back to /dev/fuse skips its test rather than pass.
if [ $# -eq 0 ]; then
	pass "fs over io_uring" env TWINCRYPT_TEST_TRANSPORT=uring go test -count=1 -timeout 30m \
		-run 'TestDifferential|TestPosix$|TestFault|TestUring|TestCacheSeesDaemonChanges|TestInodeFlags' ./fs
	# twincrypt mount's own default is auto: the ring only where the
	# administrator switched enable_uring on, /dev/fuse otherwise. Its
	# crash tests again, pinned to each transport in turn (uring switches
	# enable_uring on for each mount's start and back off).
	pass "cmd/twincrypt over /dev/fuse" env TWINCRYPT_TEST_TRANSPORT=dev go test -count=1 -timeout 30m \
		-run 'TestCrash|TestMountTransport' ./cmd/twincrypt
	pass "cmd/twincrypt over io_uring" env TWINCRYPT_TEST_TRANSPORT=uring go test -count=1 -timeout 30m \
		-run 'TestCrash|TestMountTransport' ./cmd/twincrypt
	# The real programs (tar, git, sqlite, make, cc, cp, rsync, Go's os
	# tests, mmap) on every variant over the ring.
	pass "integration over io_uring" env TWINCRYPT_TEST_TRANSPORT=uring go test -count=1 -timeout 30m ./integration
fi

echo
echo "== summary: $npass passes in $((SECONDS - started)) s, ${#failed[@]} failed"
for f in "${failed[@]}"; do
	name=${f%%$'\t'*}
	log=${f#*$'\t'}
	echo "FAILED pass: $name"
	# The failing tests (subtests indented under their parent), then
	# the packages that failed and anything that kept go test from
	# running them (build errors, panics, timeouts).
	grep -E -e '^\s*--- FAIL' -e '^FAIL\s' -e '^panic: ' -e '^# ' -e 'test timed out' \
		-e '^crash states: ' "$log" | sed 's/^/    /'
done
if [ ${#failed[@]} -ne 0 ]; then
	exit 1
fi
echo "all passes ok"
