# tests/obs/lib.sh - shared by the observability shell tests: start a
# kvpoold on a private pool with /metrics on a free port, scrape it,
# clean up whatever way the test ends.  Sourced, not run.
#
# The pool is named [<KVPT_RUN>.]t<pid>_obs: tests/run.sh's tag (see
# tests/agent/harness.h) makes it this run's segment, which the run
# judges at its end (or removes, if its run is gone).

B=${KVP_BIN:-build/release}
T=$(mktemp -d /tmp/kvpt-obs.XXXXXX)
POOL=${KVPT_RUN:+$KVPT_RUN.}t$$_obs
AGENT_PID=
EXTRA_PIDS=

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

cleanup() {
	for p in $EXTRA_PIDS; do kill "$p" 2>/dev/null; done
	for p in $EXTRA_PIDS; do wait "$p" 2>/dev/null; done
	if [ -n "$AGENT_PID" ]; then
		kill "$AGENT_PID" 2>/dev/null
		wait "$AGENT_PID" 2>/dev/null
	fi
	rm -f "/dev/shm/kvpool.$POOL"
	rm -rf "$T"
}
trap cleanup EXIT INT TERM

# need TOOL PACKAGE: skip (exit 77, which tests/run.sh counts as SKIP,
# saying why) when a tool is missing
need() {
	if ! command -v "$1" >/dev/null 2>&1; then
		echo "SKIP: $1 not installed (apt-get install $2)"
		exit 77
	fi
}

# wait_for SECONDS COMMAND...: poll COMMAND every 0.1 s until it succeeds
# (a deadline, not a sleep used as synchronisation)
wait_for() {
	limit=$1; shift
	end=$(($(date +%s) + limit))
	until "$@"; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.1
	done
}

agent_up() {
	port=$("$B/kvpool" --pool "$POOL" stat --json 2>/dev/null | jq -r '.metrics_port') &&
		[ -n "$port" ] && [ "$port" != 0 ] && [ "$port" != null ]
}

# start_agent ARGS...: kvpoold in the foreground (backgrounded here),
# /metrics on a port of the kernel's choosing; sets MPORT
start_agent() {
	"$B/kvpoold" --foreground --pool "$POOL" --metrics-addr 127.0.0.1:0 "$@" \
		2>"$T/agent.log" &
	AGENT_PID=$!
	wait_for 20 agent_up || { cat "$T/agent.log"; fail "agent did not start"; }
	MPORT=$("$B/kvpool" --pool "$POOL" stat --json | jq -r '.metrics_port')
}

# prom SERIES: its value in a fresh scrape (empty if absent)
prom() {
	curl -sf "http://127.0.0.1:$MPORT/metrics" |
		awk -v s="$1" 'index($0, s " ") == 1 { print $2; exit }'
}
