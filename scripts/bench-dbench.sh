#!/usr/bin/env bash
# dbench (Samba's file-server load: creates, renames, deletes, locks,
# reads and writes of many small files by N clients, replayed from its
# NetBench trace /usr/share/dbench/client.txt) on a plain directory, the
# twin, aes-xts, aes-cbc and, where installed, gocryptfs and securefs,
# ROUNDS times in turn, each on a fresh volume in the same lower
# directory. Prints one line per run: target, throughput (MB/s as dbench
# counts it), max latency, and the number of operations dbench reported
# as failed (an error status other than the one its trace expects). Any
# failure on a twincrypt target makes the script exit 1.
# Needs root (mounts) and apt's dbench.
# Usage: scripts/bench-dbench.sh [ROUNDS [SECONDS [CLIENTS [LOWERDIR]]]]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
ROUNDS=${1:-3}
SECS=${2:-20}
CLIENTS=${3:-4}
LOAD=/usr/share/dbench/client.txt
command -v dbench >/dev/null && [ -r "$LOAD" ] || { echo "dbench is not installed (apt-get install dbench)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 2; }
W=$(mktemp -d "${4:-/tmp}/twincrypt-dbench.XXXXXX")
MNT=
cleanup() {
	if [ -n "$MNT" ] && mountpoint -q "$MNT"; then
		umount "$MNT" || umount -l "$MNT"
	fi
	rm -rf "$W"
}
trap cleanup EXIT
go build -o "$W/twincrypt" ./cmd/twincrypt
printf 'dbench\n' >"$W/pass"

# run TAG DIR: one dbench run in DIR.
run() {
	local tag=$1 dir=$2 out=$W/out
	mkdir -p "$dir"
	dbench -c "$LOAD" -D "$dir" -t "$SECS" "$CLIENTS" >"$out" 2>&1 || true
	local tput lat errs
	tput=$(awk '/^Throughput/ { print $2 }' "$out")
	lat=$(awk '/^Throughput/ { for (i = 1; i <= NF; i++) if ($i ~ /^max_latency=/) { sub("max_latency=", "", $i); print $i } }' "$out")
	# (dbench's "failed to create barrier semaphore" is about its own
	# start-up, on every target alike.)
	errs=$(grep -v 'barrier semaphore' "$out" | grep -c -i -E 'error|failed|unexpected' || true)
	echo "$tag throughput_MBps=${tput:-none} max_latency_ms=${lat:-none} failures=$errs"
	if [ -z "$tput" ] || [ "$errs" != 0 ]; then
		grep -v 'barrier semaphore' "$out" | grep -i -m 5 -E 'error|failed|unexpected' >&2 || tail -5 "$out" >&2
		case $tag in twin | crypt-*) FAILED=1 ;; esac
	fi
}

FAILED=0
grep -m1 'model name' /proc/cpuinfo
echo "lower: $(df -T "$W" | awk 'NR == 2 { print $2 }'), $CLIENTS clients, $SECS s, $(dbench --version 2>&1 | head -1)"
for r in $(seq 1 "$ROUNDS"); do
	rm -rf "$W/native"
	run native "$W/native"
	for t in twin crypt-xts crypt-cbc gocryptfs securefs; do
		rm -rf "$W/low" "$W/mnt"
		mkdir "$W/low" "$W/mnt"
		case $t in
		twin) "$W/twincrypt" mount -q --passthrough --background "$W/low" "$W/mnt" ;;
		crypt-xts | crypt-cbc)
			"$W/twincrypt" init -q --cipher "aes-${t#crypt-}" --kdf argon2id --kdf-time 5 --kdf-memory 7168 --kdf-threads 1 --passfile "$W/pass" "$W/low"
			"$W/twincrypt" mount -q --passfile "$W/pass" --background "$W/low" "$W/mnt"
			;;
		gocryptfs)
			command -v gocryptfs >/dev/null || continue
			gocryptfs -q -init -passfile "$W/pass" -scryptn 10 "$W/low" >/dev/null 2>&1
			gocryptfs -q -nosyslog -passfile "$W/pass" "$W/low" "$W/mnt"
			;;
		securefs)
			command -v securefs >/dev/null || continue
			securefs create --pass dbench --pbkdf pkcs5-pbkdf2-hmac-sha256 -r 1000 "$W/low" >/dev/null 2>&1
			securefs mount --background --pass dbench "$W/low" "$W/mnt" >/dev/null 2>&1
			for _ in $(seq 50); do mountpoint -q "$W/mnt" && break; sleep 0.1; done
			;;
		esac
		MNT=$W/mnt
		run "$t" "$W/mnt/d"
		umount "$W/mnt"
		MNT=
	done
done
exit "$FAILED"
