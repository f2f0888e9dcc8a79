#!/usr/bin/env bash
# Daemon memory per cached inode (issue #12): for the twin, crypt-xts and
# gocryptfs (if installed), each over its own tmpfs, N empty files are
# created in one directory through the mount. Then, REPEATS times: the
# mount is remounted (a fresh daemon, nothing cached), every file is
# stat'ed by name (a LOOKUP and a cached inode each, no listing) and held
# by an O_PATH descriptor (which sends nothing to the daemon, but pins
# the inode: other programs' drop_caches or memory pressure cannot make
# the kernel forget part of the walk), the descriptors closed, then
# `ls -l` lists the directory, then the kernel drops its dentries and
# inodes (drop_caches=2: a FORGET for each); the daemon's VmRSS is read
# before and after each step. Prints per target and repeat the RSS in MiB
# and (after stat - before) / N, bytes per cached inode; compare medians.
# Both daemons are Go programs, whose RSS is anywhere between their live
# heap and twice it (GOGC=100) depending on when the last collection ran:
# the measuring mounts run with GOGC=1 (MEASURE_GOGC), which collects at
# every 1 % of growth, so that RSS follows the live heap (the files are
# created with the default), and with GODEBUG=gctrace=1: the live heap
# after the last collection before and after the walk, divided by N, is
# the second figure, heap bytes per cached inode.
# OLD=BINARY adds the targets twin-old and crypt-xts-old served by another
# twincrypt binary (a before/after comparison in one run); TARGETS="..."
# picks targets.
# Needs root. Usage: scripts/inode-memory.sh [N [REPEATS]]  (100000, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
N=${1:-100000}
REP=${2:-3}
MEASURE_GOGC=${MEASURE_GOGC:-1}
W=$(mktemp -d)
B=$W/twincrypt
go build -o "$B" ./cmd/twincrypt
echo pass >"$W/pass"
targets="twin crypt-xts"
if [ -n "${OLD:-}" ]; then targets="$targets twin-old crypt-xts-old"; fi
if command -v gocryptfs >/dev/null; then targets="$targets gocryptfs"; fi
targets=${TARGETS:-$targets}
pid=
cleanup() {
	for t in $targets; do
		umount "$W/$t.mnt" 2>/dev/null || true
		umount "$W/$t.lower" 2>/dev/null || true
	done
	rm -rf "$W"
}
trap cleanup EXIT
# hold N: in directory d, lstat and open O_PATH each file-%06d (1..N),
# print "held", keep the descriptors until stdin closes (in processes of
# at most 16,000 descriptors each: the hard limit may be low).
hold() {
	python3 -c '
import os, resource, sys
n, per = int(sys.argv[1]), 16000
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
if hard != resource.RLIM_INFINITY and hard < per + 64:
    per = hard - 64
r, w = os.pipe()
kids = []
for lo in range(1, n + 1, per):
    pid = os.fork()
    if pid == 0:
        resource.setrlimit(resource.RLIMIT_NOFILE, (per + 64, hard))
        fds = []
        for i in range(lo, min(lo + per, n + 1)):
            p = "file-%06d" % i
            os.lstat(p)
            fds.append(os.open(p, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC))
        os.write(w, b"x")
        sys.stdin.read()
        os._exit(0)
    kids.append(pid)
os.close(w)
for _ in kids:
    if os.read(r, 1) != b"x":
        sys.exit("hold: a helper failed")
print("held", flush=True)
sys.stdin.read()
for pid in kids:
    os.waitpid(pid, 0)
' "$1"
}
rss() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; } # KiB
live() { awk '/^gc / {split($11, a, "->"); m = a[3] + 0} END {print m + 0}' "$1"; } # MB live after the last GC
mnt() { # target: mounts in the foreground, in the background of this shell
	local t=$1
	case $t in
	twin) "$B" mount --quiet --passthrough "$W/$t.lower" "$W/$t.mnt" & ;;
	crypt-xts) "$B" mount --quiet --passfile "$W/pass" "$W/$t.lower" "$W/$t.mnt" & ;;
	twin-old) "$OLD" mount --quiet --passthrough "$W/$t.lower" "$W/$t.mnt" & ;;
	crypt-xts-old) "$OLD" mount --quiet --passfile "$W/pass" "$W/$t.lower" "$W/$t.mnt" & ;;
	gocryptfs) gocryptfs -f -q -passfile "$W/pass" "$W/$t.lower" "$W/$t.mnt" & ;;
	esac
	pid=$!
	for _ in $(seq 100); do
		mountpoint -q "$W/$t.mnt" && return
		sleep 0.1
	done
	echo "mount of $t did not come up" >&2
	exit 1
}
unmnt() {
	umount "$W/$1.mnt"
	wait "$pid" || true
}
for t in $targets; do
	mkdir -p "$W/$t.lower" "$W/$t.mnt"
	mount -t tmpfs -o size=2g tmpfs "$W/$t.lower"
	case $t in
	crypt-xts*) "$B" init --kdf argon2id --kdf-time 5 --kdf-memory 7168 --kdf-threads 1 --quiet --passfile "$W/pass" "$W/$t.lower" >/dev/null ;;
	gocryptfs) gocryptfs -init -q -scryptn 10 -passfile "$W/pass" "$W/$t.lower" >/dev/null ;;
	esac
	mnt "$t"
	mkdir "$W/$t.mnt/d"
	(cd "$W/$t.mnt/d" && seq -f 'file-%06g' "$N" | xargs touch)
	unmnt "$t"
	for r in $(seq "$REP"); do
		GOGC=$MEASURE_GOGC GODEBUG=gctrace=1 mnt "$t" 2>"$W/gc"
		sleep 1
		r0=$(rss "$pid")
		h0=$(live "$W/gc")
		coproc HOLD { cd "$W/$t.mnt/d" && hold "$N"; }
		read -r _ <&"${HOLD[0]}"
		sleep 1
		r1=$(rss "$pid")
		h1=$(live "$W/gc")
		exec {HOLD[1]}>&-
		wait "$HOLD_PID"
		ls -l "$W/$t.mnt/d" >/dev/null
		sleep 1
		r2=$(rss "$pid")
		sync
		echo 2 >/proc/sys/vm/drop_caches
		sleep 2
		r3=$(rss "$pid")
		unmnt "$t"
		echo "$t #$r: $N files; daemon RSS before $((r0 / 1024)) MiB, after stat of each $((r1 / 1024)) MiB, after ls -l $((r2 / 1024)) MiB, after drop_caches $((r3 / 1024)) MiB; $(((r1 - r0) * 1024 / N)) bytes of RSS, $(((h1 - h0) * 1048576 / N)) of live heap per cached inode"
	done
	umount "$W/$t.lower"
done
