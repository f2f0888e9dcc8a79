#!/usr/bin/env bash
# scripts/test-under-load.sh [N]: runs the README's test command
# (scripts/test.sh) N times in a row (default 5) while scripts/load.sh
# keeps the machine busy, and summarises: per run the exit status, the
# wall time, the load average before and after, and the failures that
# run's summary named. Exits 1 if any run failed. Each run's full output
# is kept in a directory printed at the end (TEST_LOAD_LOGS to choose it).
# The load's processes are stopped on exit, however the script ends.
set -uo pipefail
cd "$(dirname "$0")/.."
n=${1:-5}
logs=${TEST_LOAD_LOGS:-$(mktemp -d "${TMPDIR:-/tmp}/twincrypt-under-load.XXXXXX")}
mkdir -p "$logs"

scripts/load.sh &
load_pid=$!
stop_load() {
	if kill -0 "$load_pid" 2>/dev/null; then
		kill -TERM "$load_pid" 2>/dev/null
		wait "$load_pid" 2>/dev/null
	fi
}
trap stop_load EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
echo "load: scripts/load.sh (pid $load_pid, stress-ng --cpu $(nproc) --hdd 1); logs in $logs"
# Let the load reach its level before the first run.
sleep 5
if ! kill -0 "$load_pid" 2>/dev/null; then
	echo "test-under-load: the load did not start" >&2
	exit 2
fi

loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
failures=0
summary=()
for i in $(seq 1 "$n"); do
	before=$(loadavg)
	t0=$SECONDS
	scripts/test.sh >"$logs/run$i.log" 2>&1
	rc=$?
	line=$(printf 'run %d/%d: exit %d, %d s, load before %s, after %s' "$i" "$n" "$rc" $((SECONDS - t0)) "$before" "$(loadavg)")
	echo "$line"
	summary+=("$line")
	if [ "$rc" -ne 0 ]; then
		failures=$((failures + 1))
		# The failures as test.sh summarised them.
		sed -n '/^== summary:/,$p' "$logs/run$i.log" | sed 's/^/    /'
	fi
done

echo
echo "== test-under-load: $n runs, $failures failed (logs in $logs)"
printf '%s\n' "${summary[@]}"
[ "$failures" -eq 0 ]
