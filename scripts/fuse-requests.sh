#!/usr/bin/env bash
# The FUSE requests the kernel sends to the filesystem mounted at MNT while
# a command runs, by opcode, counted from the kernel's fuse:fuse_request_send
# tracepoint (Linux 6.16+, perf from linux-perf): for our mounts and for any
# peer alike (gocryptfs, securefs, ...), whatever their own statistics. A
# FUSE filesystem's cost on metadata work is mostly round trips; this shows
# how many each workload makes on each filesystem (issue #12).
# Needs root. Usage: scripts/fuse-requests.sh MNT CMD [ARG...]
# Prints one line: total=N OPCODE=N ... (FORGETs, which get no reply, apart).
set -euo pipefail
MNT=$1
shift
dev=$(mountpoint -d "$MNT")
conn=$(( ${dev%%:*} << 20 | ${dev##*:} ))
data=$(mktemp)
trap 'rm -f "$data"' EXIT
perf record -q -a -e fuse:fuse_request_send -o "$data" -- "$@" >/dev/null 2>&1
perf script -i "$data" -F trace 2>/dev/null | awk -v c="$conn" '
	$1 == "connection" && $2 == c {
		op = $7; gsub(/[()]/, "", op); sub(/^FUSE_/, "", op); n[op]++
		if (op != "FORGET" && op != "BATCH_FORGET") total++
	}
	END {
		printf "total=%d", total
		for (o in n) printf " %s=%d", o, n[o]
		printf "\n"
	}'
