#!/usr/bin/env bash
# make vm-bench: boot the guest N times (default 5) running `true`, and
# report boot-to-command (host clock, from qemu start) and the whole run's
# wall time: min / median / max. Results depend on the host's load.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
n=${1:-5}
boot=() wall=()
for _ in $(seq "$n"); do
  line=$("$HERE/run.sh" -- true 2>&1 | grep '^vm: exit status 0;') ||
    { echo "vm-bench: a run failed" >&2; exit 1; }
  # "vm: exit status 0; command started B s after qemu (U s guest uptime); wall W s"
  boot+=("$(sed -E 's/.*started ([0-9.]+) s after qemu.*/\1/' <<< "$line")")
  wall+=("$(sed -E 's/.*wall ([0-9.]+) s$/\1/' <<< "$line")")
done
stats() { printf '%s\n' "$@" | sort -n | awk '{ v[NR] = $1 } END {
  printf "min %.1f  median %.1f  max %.1f s", v[1], v[int((NR + 1) / 2)], v[NR] }'; }
echo "vm-bench: $n boots; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  boot to command: $(stats "${boot[@]}")"
echo "  run.sh true:     $(stats "${wall[@]}")"
