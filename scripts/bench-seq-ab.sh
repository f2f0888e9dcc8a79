#!/usr/bin/env bash
# Sequential A/B of crypt-xts against the twin (issue #12), for one or more
# twincrypt binaries (old and new), interleaved: per repeat, binary and
# target, a fresh LOWER on tmpfs (/dev/shm), `dd bs=1M count=SIZE
# conv=fsync` into the mount, the file's pages dropped, `dd bs=1M` back.
# Per run it prints wall seconds, dd's CPU seconds and the daemon's CPU
# seconds (user+sys) of the write and of the cold read; then, per binary,
# the medians and the crypt/twin throughput ratios (twin time / crypt
# time: 1 means encryption is free). MOUNT_ENV is passed to the daemons:
# MOUNT_ENV=GODEBUG=cpu.avx512f=off runs the AES-NI path on a VAES CPU.
# Needs root (or fusermount3) and python3.
# Usage: [MOUNT_ENV=...] scripts/bench-seq-ab.sh REPEATS SIZE_MiB BINARY...
set -euo pipefail
rounds=$1 size=$2
shift 2
W=$(mktemp -d /dev/shm/seqab.XXXXXX)
trap 'fusermount3 -u "$W/mnt" 2>/dev/null || true; rm -rf "$W"' EXIT
echo pass > "$W/pw"
grep -m1 'model name' /proc/cpuinfo >&2
echo "flags: $(grep -o -w -m1 'vaes\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')MOUNT_ENV=${MOUNT_ENV:-}" >&2
daemoncpu() { awk '{ print ($14 + $15) / 100 }' "/proc/$1/stat"; }
timed() { python3 -c '
import resource, subprocess, sys, time
t = time.time(); subprocess.run(sys.argv[1:], check=True); w = time.time() - t
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print("%.3f %.3f" % (w, r.ru_utime + r.ru_stime))' "$@"; }
for r in $(seq 1 "$rounds"); do
	for bin in "$@"; do
		for tgt in crypt twin; do
			rm -rf "$W/lower" "$W/mnt"
			mkdir -p "$W/lower" "$W/mnt"
			if [ $tgt = crypt ]; then
				"$bin" init --kdf argon2id --kdf-time 5 --kdf-memory 7168 --kdf-threads 1 --passfile "$W/pw" --quiet "$W/lower"
				out=$(env ${MOUNT_ENV:-} "$bin" mount -b --passfile "$W/pw" "$W/lower" "$W/mnt" 2>&1)
			else
				out=$(env ${MOUNT_ENV:-} "$bin" mount -b --passthrough "$W/lower" "$W/mnt" 2>&1)
			fi
			pid=$(echo "$out" | sed -n 's/.*pid \([0-9]*\).*/\1/p')
			c0=$(daemoncpu "$pid")
			w=$(timed dd if=/dev/zero of="$W/mnt/f" bs=1M count="$size" conv=fsync status=none)
			c1=$(daemoncpu "$pid")
			dd if="$W/mnt/f" iflag=nocache count=0 status=none
			c2=$(daemoncpu "$pid")
			rd=$(timed dd if="$W/mnt/f" of=/dev/null bs=1M status=none)
			c3=$(daemoncpu "$pid")
			fusermount3 -u "$W/mnt"
			echo "$r $bin $tgt write $w $(echo "$c1 - $c0" | bc) read $rd $(echo "$c3 - $c2" | bc)"
		done
	done
done | tee "$W/runs"
python3 - "$W/runs" <<'PY'
import collections, statistics as st, sys
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    f = l.split()
    d[(f[1], f[2])].append([float(x) for x in (f[4], f[5], f[6], f[8], f[9], f[10])])
for b in dict.fromkeys(k[0] for k in d):
    m = {t: [st.median(c) for c in zip(*d[(b, t)])] for t in ("crypt", "twin")}
    c, t = m["crypt"], m["twin"]
    print(f"{b}: medians of {len(d[(b, 'crypt')])}; crypt/twin throughput (twin s / crypt s): "
          f"write {t[0] / c[0]:.2f}, read {t[3] / c[3]:.2f}; CPU (dd + daemon) twin/crypt: "
          f"write {(t[1] + t[2]) / (c[1] + c[2]):.2f}, read {(t[4] + t[5]) / (c[4] + c[5]):.2f}; "
          f"daemon CPU s crypt/twin: write {c[2]:.2f}/{t[2]:.2f}, read {c[5]:.2f}/{t[5]:.2f}")
PY
