#!/usr/bin/env bash
# A/B of the metadata path (issue #12) between two twincrypt binaries:
# native, the twin and crypt-xts of each, on tmpfs, interleaved per repeat.
# Per repeat and target: untar a tree, ls -lRA right after and again, find,
# du, md5 of every file, then with the kernel's dentries and inodes dropped
# (drop_caches 2) ls -lRA, find and du again, and rm -rf. Each step prints
# wall ms / FUSE requests the daemon served / daemon CPU ms (from `twincrypt
# stats`), and the medians are tabled at the end: requests and daemon CPU
# stay meaningful on a busy machine, wall time does not.
# Needs root. Usage:
#   scripts/bench-meta-ab.sh OLD_BIN NEW_BIN [TAR (default: Go's src/net)] [REPEATS (default 5)]
set -euo pipefail
OLD=$1 NEW=$2
W=$(mktemp -d)
TAR=${3:-}
REP=${4:-5}
targets="native twin-old twin-new xts-old xts-new"
bin() { case $1 in *old) echo "$OLD" ;; *new) echo "$NEW" ;; esac; }
cleanup() {
	for t in $targets; do [ "$t" = native ] || umount "$W/$t.mnt" 2>/dev/null || true; done
	umount "$W" 2>/dev/null || true
	rm -rf "$W"
}
trap cleanup EXIT
mount -t tmpfs -o size=4g tmpfs "$W"
if [ -z "$TAR" ]; then
	TAR=$W/tree.tar
	tar -C "$(go env GOROOT)" -cf "$TAR" src/net
fi
TOP=$(tar -tf "$TAR" | awk -F/ 'NR == 1 { print $1 }')
echo pass >"$W/pass"
for t in $targets; do
	mkdir -p "$W/$t.lower" "$W/$t.mnt"
	case $t in
	twin*) "$(bin $t)" mount --background --quiet --passthrough "$W/$t.lower" "$W/$t.mnt" ;;
	xts*)
		"$(bin $t)" init --kdf argon2id --kdf-time 5 --kdf-memory 7168 --kdf-threads 1 --quiet --passfile "$W/pass" "$W/$t.lower" >/dev/null
		"$(bin $t)" mount --background --quiet --passfile "$W/pass" "$W/$t.lower" "$W/$t.mnt"
		;;
	esac
done
snap() {
	if [ "$T" = native ]; then echo 0 0; return; fi
	"$(bin $T)" stats --json "$W/$T.mnt" | python3 -c '
import json,sys
a=json.load(sys.stdin)
print(sum(o["count"] for o in a["ops"]), int((a["cpu_user_s"]+a["cpu_sys_s"])*1e6))'
}
tm() {
	local s e o0 c0 o1 c1
	read -r o0 c0 < <(snap)
	s=$(date +%s%N)
	"$@" >/dev/null 2>&1
	e=$(date +%s%N)
	read -r o1 c1 < <(snap)
	echo "$(((e - s) / 1000000))/$((o1 - o0))/$(((c1 - c0) / 1000))"
}
drop() { sync; echo 2 >/proc/sys/vm/drop_caches; }
for r in $(seq "$REP"); do
	for T in $targets; do
		d=$W/$T.mnt
		[ "$T" = native ] && d=$W/$T.lower
		cd "$d"
		line="$r $T untar $(tm tar -xf "$TAR")"
		line+=" lsR $(tm ls -lRA .) lsR2 $(tm ls -lRA .) find $(tm find .) du $(tm du -s .)"
		line+=" md5 $(tm sh -c 'find . -type f -print0 | xargs -0 md5sum')"
		drop
		line+=" lsRcold $(tm ls -lRA .)"
		drop
		line+=" findcold $(tm find .)"
		drop
		line+=" ducold $(tm du -s .)"
		line+=" rm $(tm rm -rf "$TOP")"
		cd /
		echo "$line" | tee -a "$W/results"
	done
done
python3 - "$W/results" <<'PY'
import collections, statistics, sys
d = collections.defaultdict(lambda: collections.defaultdict(list)); order = []
for line in open(sys.argv[1]):
    f = line.split()
    if f[1] not in order: order.append(f[1])
    for k, v in zip(f[2::2], f[3::2]):
        d[f[1]][k].append([float(x) for x in v.split('/')])
keys = list(d[order[0]])
for i, label in enumerate(["wall ms", "FUSE requests", "daemon CPU ms"]):
    print("median", label)
    print("%-10s" % "" + "".join("%9s" % k for k in keys))
    for n in order:
        print("%-10s" % n + "".join("%9.0f" % statistics.median(x[i] for x in d[n][k]) for k in keys))
PY
