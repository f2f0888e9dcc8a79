#!/usr/bin/env bash
# A/B of the kernel cache lifetimes (issue #12): one binary, each of the
# twin and crypt-xts mounted twice, with the default lifetimes (30 s) and
# with --shared-storage (1 s, what every mount had before), the runs
# interleaved. Per repeat and target: untar a tree (Go's src by default),
# ls -lRA twice 1.5 s apart, stat every path twice 1.5 s apart, du, rm -rf.
# Prints one line of seconds per repeat and target; compare medians.
# Needs root (or fusermount3). Usage: scripts/bench-cache-lifetimes.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
REP=${1:-3}
W=$(mktemp -d)
B=$W/twincrypt
go build -o "$B" ./cmd/twincrypt
TREE=${TREE:-$(go env GOROOT)/src}
tar -C "$(dirname "$TREE")" -cf "$W/tree.tar" "$(basename "$TREE")"
echo pass > "$W/pass"
targets="twin-long twin-short xts-long xts-short"
cleanup() {
	for t in $targets; do "$B" umount "$W/$t.mnt" 2>/dev/null || true; done
	rm -rf "$W"
}
trap cleanup EXIT
for t in $targets; do
	mkdir -p "$W/$t.lower" "$W/$t.mnt"
	extra=()
	case $t in *short) extra=(--shared-storage) ;; esac
	case $t in
	twin*) "$B" mount --background --quiet --passthrough "${extra[@]}" "$W/$t.lower" "$W/$t.mnt" ;;
	xts*)
		"$B" init --kdf argon2id --kdf-time 5 --kdf-memory 7168 --kdf-threads 1 --quiet --passfile "$W/pass" "$W/$t.lower" >/dev/null
		"$B" mount --background --quiet --passfile "$W/pass" "${extra[@]}" "$W/$t.lower" "$W/$t.mnt"
		;;
	esac
done
tm() {
	local s e
	s=$(date +%s.%N)
	"$@" >/dev/null 2>&1
	e=$(date +%s.%N)
	echo "$e - $s" | bc
}
statall() { xargs -0 -n 2000 stat -c %s <"$W/list" >/dev/null; }
for r in $(seq "$REP"); do
	for t in $targets; do
		cd "$W/$t.mnt"
		u=$(tm tar -xf "$W/tree.tar")
		find . -print0 >"$W/list"
		l1=$(tm ls -lRA .)
		sleep 1.5
		l2=$(tm ls -lRA .)
		s1=$(tm statall)
		sleep 1.5
		s2=$(tm statall)
		d=$(tm du -s .)
		x=$(tm rm -rf "$(basename "$TREE")")
		cd /
		echo "$r $t untar $u lsR1 $l1 lsR2 $l2 stat1 $s1 stat2 $s2 du $d rm $x"
	done
done
