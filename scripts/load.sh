#!/usr/bin/env bash
# scripts/load.sh [SECONDS]: keeps this machine busy the way a laptop
# running a browser or a shared CI runner is, so the tests can be shown to
# hold under load: one CPU hog per core (stress-ng --cpu N, N = nproc) and
# one worker calling sync(2) in a loop (--io 1), which keeps the block
# layer and the writeback threads busy. On 2 cores this keeps the load
# average at about 3 on its own, 7-10 with a test run beside it.
#
# Runs in the foreground until SECONDS have passed (default: until
# interrupted); Ctrl-C or SIGTERM stops stress-ng and its workers.
# LOAD_CPU and LOAD_IO change the number of workers of each kind.
# stress-ng is Debian's stress-ng package.
set -euo pipefail
if ! command -v stress-ng >/dev/null; then
	echo "load.sh: stress-ng is not installed (apt-get install stress-ng)" >&2
	exit 2
fi
cpu=${LOAD_CPU:-$(nproc)}
io=${LOAD_IO:-1}
args=(--cpu "$cpu" --io "$io" --quiet)
if [ $# -gt 0 ]; then
	args+=(--timeout "${1}s")
fi
# exec: the PID the caller started is stress-ng's, which on SIGINT or
# SIGTERM stops its workers and reaps them before it exits.
exec stress-ng "${args[@]}"
