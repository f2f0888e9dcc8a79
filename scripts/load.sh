#!/usr/bin/env bash
# scripts/load.sh [SECONDS]: keeps this machine busy the way a laptop
# running a browser or a shared CI runner is, so the tests can be shown to
# hold under load: one CPU hog per core (stress-ng --cpu N, N = nproc) and
# one worker writing and reading back a file in a directory of its own
# (--hdd 1 --temp-path DIR), which keeps the block layer and the writeback
# threads busy. On 2 cores this keeps the load average at about 3 on its
# own, 7-15 with a test run beside it.
#
# Not --io: stress-ng's io workers call syncfs(2) on every mounted
# filesystem through descriptors they keep open, which holds every mount
# that existed when they looked busy: the tests' unmounts then fail with
# EBUSY for as long as the load runs (seen: a FUSE mount of a test held
# for over a minute by stress-ng-io). A real laptop's load does not pin
# other programs' mounts.
#
# Runs in the foreground until SECONDS have passed (default: until
# interrupted); Ctrl-C or SIGTERM stops stress-ng and its workers.
# LOAD_CPU and LOAD_HDD change the number of workers of each kind.
# stress-ng is Debian's stress-ng package.
set -euo pipefail
if ! command -v stress-ng >/dev/null; then
	echo "load.sh: stress-ng is not installed (apt-get install stress-ng)" >&2
	exit 2
fi
cpu=${LOAD_CPU:-$(nproc)}
hdd=${LOAD_HDD:-1}
tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/twincrypt-load.XXXXXX")
args=(--cpu "$cpu" --hdd "$hdd" --hdd-bytes 256M --temp-path "$tmp" --quiet)
if [ $# -gt 0 ]; then
	args+=(--timeout "${1}s")
fi
# stress-ng runs as our child so that its directory can be removed once
# it has stopped; SIGINT and SIGTERM are passed on to it, and it stops
# and reaps its workers before it exits.
stress-ng "${args[@]}" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' INT TERM
wait "$pid" || true
wait "$pid" 2>/dev/null || true
rm -rf "$tmp"
