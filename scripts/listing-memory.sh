#!/usr/bin/env bash
# The daemon's memory for one big listing (issue #12), between two
# twincrypt binaries: N empty files in one directory, made once per
# variant (through a mount of NEW_BIN: the twin's LOWER holds plain names,
# crypt-xts's encrypted ones), then REPEATS times, for OLD_BIN and NEW_BIN
# alternately, a fresh mount (nothing cached) of the same LOWER and one
# listing: first a process opens the directory, reads its first 100
# entries and holds it open while the daemon's VmRSS is read ("held": the
# memory of an open listing, little else cached yet), then `ls -f` lists
# it whole (a READDIRPLUS per page, every entry looked up). Prints those
# in MiB, the daemon's VmHWM (peak) and VmRSS after `ls -f`, and its
# wall time.
# Needs root. Usage: scripts/listing-memory.sh OLD_BIN NEW_BIN [N (1000000) [REPEATS (3)]]
set -euo pipefail
OLD=$1 NEW=$2
N=${3:-1000000}
REP=${4:-3}
W=$(mktemp -d)
cleanup() {
	for m in "$W"/*.mnt; do umount "$m" 2>/dev/null || true; done
	umount "$W" 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
mount -t tmpfs -o size=8g tmpfs "$W"
echo pass >"$W/pass"
mountit() { # BIN VARIANT
	case $2 in
	twin) "$1" mount --background --quiet --passthrough "$W/$2.lower" "$W/$2.mnt" ;;
	xts) "$1" mount --background --quiet --passfile "$W/pass" "$W/$2.lower" "$W/$2.mnt" ;;
	esac
}
daemon() { # MNT: the PID of the daemon serving it
	pgrep -f -- " $1\$" | head -1
}
for v in twin xts; do
	mkdir -p "$W/$v.lower" "$W/$v.mnt"
	if [ $v = xts ]; then
		"$NEW" init --kdf argon2id --kdf-time 5 --kdf-memory 7168 --kdf-threads 1 --quiet --passfile "$W/pass" "$W/$v.lower" >/dev/null
	fi
	mountit "$NEW" $v
	mkdir "$W/$v.mnt/d"
	python3 -c '
import os, sys
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.close(os.open(os.path.join(d, "file-%07d" % i), os.O_CREAT | os.O_WRONLY, 0o644))
' "$W/$v.mnt/d" "$N"
	umount "$W/$v.mnt"
done
printf '%-5s %-4s %3s %10s %10s %10s %8s\n' variant bin rep 'held MiB' 'VmHWM MiB' 'VmRSS MiB' 'ls -f s'
for r in $(seq "$REP"); do
	for v in twin xts; do
		for b in old new; do
			bin=$OLD
			[ $b = new ] && bin=$NEW
			sync
			echo 3 >/proc/sys/vm/drop_caches
			mountit "$bin" $v
			pid=$(daemon "$W/$v.mnt")
			# An open listing: 100 entries read, the directory held open.
			held=$(python3 -c '
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
it = os.scandir(fd)
for _ in range(100):
    next(it)
time.sleep(1)
for l in open("/proc/%s/status" % sys.argv[2]):
    if l.startswith("VmRSS"):
        print(int(l.split()[1]) / 1024)
' "$W/$v.mnt/d" "$pid")
			t0=$(date +%s.%N)
			ls -f "$W/$v.mnt/d" >/dev/null
			t1=$(date +%s.%N)
			hwm=$(awk '/VmHWM/ { print $2 / 1024 }' /proc/$pid/status)
			rss=$(awk '/VmRSS/ { print $2 / 1024 }' /proc/$pid/status)
			printf '%-5s %-4s %3d %10.1f %10.1f %10.1f %8.2f\n' $v $b "$r" "$held" "$hwm" "$rss" "$(python3 -c "print($t1 - $t0)")"
			umount "$W/$v.mnt"
		done
	done
done
