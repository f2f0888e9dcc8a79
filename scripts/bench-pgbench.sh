#!/usr/bin/env bash
# PostgreSQL's pgbench on a plain directory, the twin, aes-xts, aes-cbc and
# (if installed) gocryptfs, ROUNDS times in turn, each on a fresh volume:
# initdb with data checksums, pgbench -i at scale 10 (160 MB), then 20 s
# of the TPC-B-like load (4 clients, 2 threads) and 10 s of select-only.
# Prints one line per run: target, TPC-B tps, select tps. securefs is left
# out: it does not keep file owners, and PostgreSQL refuses a data
# directory it does not own.
# Needs root (the server runs as the postgres user, the mounts with
# allow_other) and apt's postgresql. Usage: scripts/bench-pgbench.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
ROUNDS=${1:-3}
BIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
[ -x "$BIN/pgbench" ] || { echo "PostgreSQL is not installed (apt-get install postgresql)" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "needs root" >&2; exit 2; }
W=$(mktemp -d /tmp/twincrypt-pgbench.XXXXXX)
chmod 755 "$W"
MNT=
cleanup() {
	if [ -n "$MNT" ] && mountpoint -q "$MNT"; then
		su postgres -c "$BIN/pg_ctl -D $MNT/pg/data -w -m immediate stop" >/dev/null 2>&1 || true
		umount "$MNT" || umount -l "$MNT"
	fi
	rm -rf "$W"
}
trap cleanup EXIT
go build -o "$W/twincrypt" ./cmd/twincrypt
printf 'pgbench\n' >"$W/pass"

# run TAG DIR: one database in DIR, the tps of both loads.
run() {
	local tag=$1 dir=$2 sock=$W/sock
	rm -rf "$sock"
	mkdir -p "$sock" "$dir"
	chown postgres "$sock" "$dir"
	su postgres -c "$BIN/initdb -k -A trust -D $dir/data" >"$sock/initdb.log" 2>&1 ||
		{ cat "$sock/initdb.log" >&2; return 1; }
	su postgres -c "$BIN/pg_ctl -D $dir/data -o '-p 5497 -k $sock' -l $sock/log -w start" >/dev/null
	su postgres -c "$BIN/pgbench -h $sock -p 5497 -i -s 10 -q postgres" >/dev/null 2>&1
	local tpcb sel
	tpcb=$(su postgres -c "$BIN/pgbench -h $sock -p 5497 -c 4 -j 2 -T 20 postgres" 2>&1 | awk '/^tps/ { print $3 }')
	sel=$(su postgres -c "$BIN/pgbench -h $sock -p 5497 -S -c 4 -j 2 -T 10 postgres" 2>&1 | awk '/^tps/ { print $3 }')
	su postgres -c "$BIN/pg_ctl -D $dir/data -w stop" >/dev/null
	echo "$tag tpcb=$tpcb select=$sel"
}

grep -m1 'model name' /proc/cpuinfo
for r in $(seq 1 "$ROUNDS"); do
	rm -rf "$W/native"
	run native "$W/native"
	for t in twin crypt-xts crypt-cbc gocryptfs; do
		rm -rf "$W/low" "$W/mnt"
		mkdir "$W/low" "$W/mnt"
		case $t in
		twin) "$W/twincrypt" mount -q --passthrough --background -o allow_other "$W/low" "$W/mnt" ;;
		crypt-xts | crypt-cbc)
			"$W/twincrypt" init -q --cipher "aes-${t#crypt-}" --passfile "$W/pass" "$W/low"
			"$W/twincrypt" mount -q --passfile "$W/pass" --background -o allow_other "$W/low" "$W/mnt"
			;;
		gocryptfs)
			command -v gocryptfs >/dev/null || continue
			gocryptfs -q -init -extpass "cat $W/pass" -scryptn 10 "$W/low" >/dev/null 2>&1
			gocryptfs -q -extpass "cat $W/pass" -allow_other "$W/low" "$W/mnt" 2>/dev/null
			;;
		esac
		MNT=$W/mnt
		run "$t" "$W/mnt/pg"
		umount "$W/mnt"
		MNT=
	done
done
