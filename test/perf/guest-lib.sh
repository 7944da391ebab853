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
