#!/usr/bin/env bash
# Our AES-CBC decryption against `openssl speed` (issue #42), interleaved:
# per repeat and key size, BenchmarkCBCDecrypt (aes-cbc-plain64, one
# 4096-byte unit per call, in place) on the chosen path, and `openssl speed
# -evp aes-N-cbc -decrypt -bytes 4096`, back to back. Both per CPU second
# (openssl divides by user time; the Go benchmark reports cpu-MB/s), decimal
# MB/s; the ratio is ours / openssl's (>1: we are faster). The path is
# picked by the benchmark's name: IMPL=aesni (default; also run under
# GODEBUG=cpu.avx512f=off, as a CPU without AVX-512 runs it), vaes512 or
# generic. OpenSSL 3.0's CBC decryption is AES-NI only (8 blocks
# interleaved), VAES or not. The last lines give per key size the median
# and range of the per-repeat ratios.
# Usage: [IMPL=aesni|vaes512|generic] scripts/bench-cbc-openssl.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
REP=${1:-7}
IMPL=${IMPL:-aesni}
GD=
case $IMPL in aesni) GD=cpu.avx512f=off ;; esac
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
go test -c -o "$W/sector.test" ./cipher/sector
grep -m1 'model name' /proc/cpuinfo
echo "cpu family $(awk '/^cpu family/ {print $4; exit}' /proc/cpuinfo) model $(awk '/^model\t/ {print $3; exit}' /proc/cpuinfo);" \
	"flags: $(grep -o -w -m1 'vaes\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')path: $IMPL; $(openssl version)"
cpumbs() { GODEBUG=$GD "$W/sector.test" -test.run XXX -test.bench "$1" -test.benchtime 1s |
	awk '/cpu-MB/ { for (i = 1; i <= NF; i++) if ($i == "cpu-MB/s") print $(i-1) }'; }
for r in $(seq 1 "$REP"); do
	for k in 128 256; do
		ours=$(cpumbs "^BenchmarkCBCDecrypt\$/$IMPL/aes$k/4096\$")
		ossl=$(openssl speed -evp aes-$k-cbc -decrypt -bytes 4096 -seconds 1 2>/dev/null |
			awk '/^AES/ { sub("k", "", $2); print $2 / 1000 }')
		echo "$r aes-$k-cbc decrypt ours $ours openssl $ossl ratio $(awk -v a="$ours" -v b="$ossl" 'BEGIN { printf "%.3f", a / b }')"
	done
done | tee "$W/runs"
for k in 128 256; do
	awk -v k="aes-$k-cbc" '$2 == k { print $NF }' "$W/runs" | sort -n |
		awk -v k="aes-$k-cbc" '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2;
			printf "%s decrypt ours/openssl: median %.2f, range %.2f-%.2f (%d repeats)\n", k, m, v[1], v[NR], NR }'
done
