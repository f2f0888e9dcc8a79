#!/usr/bin/env bash
# pjdfstest, the POSIX conformance suite FUSE filesystems are judged by,
# on a native ext4 directory and on the twin, aes-xts and aes-cbc mounts
# over the same ext4, all four at once; then every assertion's result on
# each mount is compared with native's. The reference is the native
# filesystem: a mount passes when its results are native's, whatever
# pjdfstest's own expectations.
#
# pjdfstest is not packaged by Debian: build it from its source
# (https://github.com/pjd/pjdfstest: autoreconf -ifs && ./configure &&
# make) and point PJDFSTEST at that directory (it holds the pjdfstest
# binary and tests/). Needs root (the suite switches uids and makes device
# nodes), perl's prove, mkfs.ext4 and a loop device. About 25 minutes on
# two cores.
#
# Usage: PJDFSTEST=DIR [MOUNTFLAGS='--transport dev ...'] scripts/pjdfstest.sh [OUTDIR]
# MOUNTFLAGS are added to every twincrypt mount (e.g. --transport dev,
# --shared-storage, --readdir auto).
# Prints per target the files and assertions that failed, and every
# assertion whose result differs from native's; exits 1 if any does.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
PJD=${PJDFSTEST:?set PJDFSTEST to a built pjdfstest source directory}
[ -x "$PJD/pjdfstest" ] && [ -d "$PJD/tests" ] || { echo "no built pjdfstest in $PJD" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "pjdfstest needs root" >&2; exit 2; }
command -v prove >/dev/null || { echo "prove (perl) is missing" >&2; exit 2; }

OUT=${1:-$(mktemp -d /tmp/twincrypt-pjdfstest.XXXXXX)}
mkdir -p "$OUT"
W=$(mktemp -d /tmp/twincrypt-pjd-work.XXXXXX)
BIN=$W/twincrypt
MOUNTS=()
cleanup() {
	for m in "${MOUNTS[@]}"; do
		"$BIN" umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	# A daemon may still hold LOWER for a moment after its unmount.
	for i in 1 2 3 4 5; do
		mountpoint -q "$W/ext4" || break
		umount "$W/ext4" 2>/dev/null || sleep 1
	done
	if mountpoint -q "$W/ext4"; then umount -l "$W/ext4"; fi
	rm -rf "$W"
}
trap cleanup EXIT

go build -o "$BIN" ./cmd/twincrypt
truncate -s 2G "$W/ext4.img"
mkfs.ext4 -q -F "$W/ext4.img"
mkdir "$W/ext4"
mount -o loop "$W/ext4.img" "$W/ext4" # the loop device goes with the unmount
printf 'pjdfstest\n' >"$W/pass"
mkdir "$W/ext4/native" "$W/ext4/twin" "$W/ext4/xts" "$W/ext4/cbc"
"$BIN" init -q --passfile "$W/pass" "$W/ext4/xts"
"$BIN" init -q --cipher aes-cbc --passfile "$W/pass" "$W/ext4/cbc"
for t in twin xts cbc; do
	mkdir "$W/$t"
	if [ $t = twin ]; then
		"$BIN" mount -q --passthrough --background -o allow_other ${MOUNTFLAGS:-} "$W/ext4/$t" "$W/$t"
	else
		"$BIN" mount -q --passfile "$W/pass" --background -o allow_other ${MOUNTFLAGS:-} "$W/ext4/$t" "$W/$t"
	fi
	MOUNTS+=("$W/$t")
done

declare -A dir=([native]="$W/ext4/native" [twin]="$W/twin" [xts]="$W/xts" [cbc]="$W/cbc")
pids=()
for t in native twin xts cbc; do
	(cd "${dir[$t]}" && prove -r -v --nocolor "$PJD/tests" >"$OUT/$t.log" 2>&1) &
	pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done

# One line per assertion: test file, number, ok or not ok (TODO marks
# kept); prove's timings and paths dropped.
results() {
	awk -v pjd="$PJD/tests/" '
		index($0, pjd) == 1 { f = substr($1, length(pjd) + 1); next }
		/^(not )?ok [0-9]+/ { s = $1 == "not" ? "not ok" : "ok"; n = $1 == "not" ? $3 : $2
			todo = index($0, "# TODO") ? " TODO" : ""; print f, n, s todo }' "$1"
}
status=0
results "$OUT/native.log" >"$OUT/native.res"
for t in native twin xts cbc; do
	results "$OUT/$t.log" >"$OUT/$t.res"
	summary=$(grep -E '^(Files=|Result:)' "$OUT/$t.log" | tr '\n' ' ')
	failed=$(grep -c ' not ok$' "$OUT/$t.res" || true)
	echo "$t: $(wc -l <"$OUT/$t.res") assertions, $failed failed; $summary"
	if [ $t != native ]; then
		if ! diff "$OUT/native.res" "$OUT/$t.res" >"$OUT/$t.diff"; then
			status=1
			echo "  differs from native (< native, > $t):"
			sed 's/^/    /' "$OUT/$t.diff" | head -50
		fi
	fi
done
echo "logs: $OUT"
exit $status
