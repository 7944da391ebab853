# Helpers of the guest scripts (guest.sh, trace-guest.sh), sourced; they
# report as "$TAG: ...".
# shellcheck disable=SC2034 # used by the scripts that source this
LL0=fe80::ff:fe00:1 LL1=fe80::ff:fe00:2 # rxe0/rxe1 GID 0 (test/vm/guest-rdma.sh)
log() { echo "$TAG: $*" >&2; }
fail() { echo "$TAG: FAIL: $*" >&2; exit 1; }

waitnode() { # PATH PID
	i=0
	while [ ! -e "$1" ]; do
		i=$((i + 1))
		{ [ $i -le 400 ] && kill -0 "$2" 2>/dev/null; } || fail "$1 did not appear"
		sleep 0.05
	done
}

waitlog() { # FILE TEXT PID: a server is ready once it logged TEXT
	i=0
	until grep -q "$2" "$1" 2>/dev/null; do
		i=$((i + 1))
		{ [ $i -le 600 ] && kill -0 "$3" 2>/dev/null; } || { cat "$1" >&2; fail "no '$2' in $1"; }
		sleep 0.05
	done
}

stop() { # PID...
	for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "$@"; do wait "$p" 2>/dev/null || true; done
}

# A process's CPU time (user + system) in clock ticks, and ticks as µs
# per unit of work.
HZ=$(getconf CLK_TCK)
proc_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
us_per() { awk -v t="$1" -v n="$2" -v hz="$HZ" 'BEGIN { printf "%.1f", t * 1e6 / hz / n }'; }

# out CMD...: runs one measurement and prints its line, or fails the run
# shellcheck disable=SC2154 # rep: set by the script sourcing this
out() {
	line=$("$@") || fail "$*"
	echo "rep=$rep $line"
}

# start_ucmd [WRAPPER]: the daemon ${UCMD:-$B/ucmd} serving with
# $UCMD_FLAGS (WRAPPER: a program that runs it), as $upid, once its last
# node is there; stop_ucmd stops it and shows the errors it logged.
start_ucmd() {
	# shellcheck disable=SC2086 # a list of flags
	${1:+"$1"} "${UCMD:-$B/ucmd}" serve $UCMD_FLAGS > /tmp/ucmd.log 2>&1 &
	upid=$!
	waitnode /dev/infiniband/ucm1 $upid
	sleep 0.2
}
stop_ucmd() {
	stop "$upid"
	grep -i "level=error" /tmp/ucmd.log >&2 || true
}

# The kernel's CM and ucmd cannot own a port's CM class at once.
kernel_cm() { modprobe -a rdma_ucm || fail "modprobe rdma_ucm"; }
no_kernel_cm() {
	modprobe -r rdma_ucm rdma_cm iw_cm ib_cm 2>/dev/null || true
	[ ! -d /sys/module/ib_cm ] || fail "ib_cm is still loaded"
}

# conn_ucmd LABEL SERVICE_ID CLIENT_ARGS...: one run of the libibcm-style
# client through the daemon $upid (exec'd by $UCMD, default $B/ucmd) to
# a server listening on rxe1, printed as "rep=$rep ucmclient label=LABEL
# ..." with the daemon's CPU per connection, and with --cmd-times each
# command's latency as label=LABEL-COMMAND. sh has no local variables:
# its own are cu_*, so that a caller's (a loop's r, say) survive it.
# shellcheck disable=SC2154 # upid and rep: set by the script sourcing this
conn_ucmd() {
	cu_label=$1 cu_sid=$2
	shift 2
	cu_d0=$(proc_ticks "$upid")
	# shellcheck disable=SC2086 # lists of flags
	cu_r=$("${UCMD:-$B/ucmd}" exec -- "$B/ucmclient" -q -c -d rxe0 -g $LL1 -s "$cu_sid" --libibcm -w 0 -T 600 "$@") ||
		{ echo "$cu_r" >&2; tail -n 20 /tmp/srv.log >&2; fail "ucmd $cu_label: the client failed"; }
	cu_d1=$(proc_ticks "$upid")
	echo "$cu_r" | sed -n "s/^ucmclient-cmdtime \(.* cmd=\([A-Z_]*\) .*\)/rep=$rep ucmclient-cmdtime label=$cu_label-\2 \1/p"
	cu_r=$(echo "$cu_r" | grep '^ucmclient-perf')
	cu_n=$(echo "$cu_r" | sed 's/.* n=\([0-9]*\).*/\1/')
	# the daemon's CPU per connection over the client's whole run (its
	# open and close too: two requests in a run of WIN connections)
	echo "rep=$rep ucmclient label=$cu_label ${cu_r#ucmclient-perf } daemon_cpu_us=$(us_per $((cu_d1 - cu_d0)) "$cu_n")"
}
