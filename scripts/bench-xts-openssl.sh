#!/usr/bin/env bash
# Our XTS against `openssl speed` (issue #12), interleaved: per repeat, key
# size and direction, one unit of 4096 bytes per call (BenchmarkXTS), a run
# of 4096-byte units per call (BenchmarkSectors, what the filesystem does)
# and `openssl speed -evp aes-N-xts -bytes 4096`. All per CPU second
# (openssl divides by user time; the Go benchmarks report cpu-MB/s), in
# decimal MB/s. IMPL=aesni (default) forces the AES-NI path with
# GODEBUG=cpu.avx512f=off, as a CPU without AVX-512 runs it; IMPL=vaes512
# or generic take the others. OpenSSL 3.0's XTS uses AES-NI only, VAES or
# not. Usage: [IMPL=aesni|vaes512|generic] scripts/bench-xts-openssl.sh [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=/usr/local/go/bin:$PATH
REP=${1:-7}
IMPL=${IMPL:-aesni}
case $IMPL in
aesni) GD=cpu.avx512f=off ;;
generic) GD=cpu.aes=off ;;
*) GD= ;;
esac
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
go test -c -o "$W/sector.test" ./cipher/sector
grep -m1 'model name' /proc/cpuinfo
echo "flags: $(grep -o -w -m1 'vaes\|avx512f' /proc/cpuinfo | sort -u | tr '\n' ' ')path: $IMPL; $(openssl version)"
cpumbs() { GODEBUG=$GD "$W/sector.test" -test.run XXX -test.bench "$1" -test.benchtime 1s |
	awk '/cpu-MB/ { for (i = 1; i <= NF; i++) if ($i == "cpu-MB/s") print $(i-1) }'; }
for r in $(seq 1 "$REP"); do
	for k in 128 256; do
		for dir in encrypt decrypt; do
			b=BenchmarkXTS d=
			[ $dir = decrypt ] && b=BenchmarkXTSDecrypt d=-decrypt
			one=$(cpumbs "^$b\$/aes$k/4096\$")
			run=$(cpumbs "^BenchmarkSectors\$/$IMPL/xts$k/$dir\$")
			ossl=$(openssl speed -evp aes-$k-xts $d -bytes 4096 -seconds 1 2>/dev/null |
				awk '/^AES/ { sub("k", "", $2); print $2 / 1000 }')
			echo "$r aes-$k-xts $dir unit $one run $run openssl $ossl"
		done
	done
done
