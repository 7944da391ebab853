#!/bin/sh
# ucmclient self-test: no RDMA hardware and no ucmd needed.
#   test/clients/selftest.sh [path/to/ucmclient [path/to/libucmd-sysfs.so]]
#   (default: build into a temp dir)
# Checks: the ABI layouts (compile-time asserts, by building), the exact wire
# image of every command, argument parsing, libibcm-style discovery
# (SYSFS_PATH for abi_version; /sys/class/infiniband_cm/ucmN/ibdev in a private
# mount namespace when run as root), and what is written to the device node.
set -u
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
if [ $# -ge 1 ]; then
	bin=$1
else
	bin=$tmp/ucmclient
	"$here/build.sh" "$bin" || { echo "FAIL: build"; exit 1; }
fi
if [ $# -ge 2 ]; then
	shim=$2
else
	shim=$tmp/libucmd-sysfs.so
	gcc -O2 -Wall -Wextra -Werror -std=gnu11 -shared -fPIC -o "$shim" "$here/../../dist/preload/ucmd-sysfs.c" -ldl ||
		{ echo "FAIL: build the shim"; exit 1; }
fi
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

# run NAME WANT_RC WANT_TEXT CMD... : exit status and a substring of stdout+stderr
run() {
	name=$1 want_rc=$2 want_text=$3
	shift 3
	out=$("$@" 2>&1)
	rc=$?
	if [ "$rc" != "$want_rc" ]; then
		bad "$name: exit $rc, want $want_rc; output: $out"
	elif [ -n "$want_text" ] && ! printf '%s' "$out" | grep -qF -- "$want_text"; then
		bad "$name: output lacks '$want_text'; got: $out"
	else
		ok "$name"
	fi
}

# 1. Wire images (docs/ucm-abi.md §2.2 worked examples and §2.4 offsets).
#    Pointers are the fake values 0x11000000000000N0.
cat > "$tmp/wire.golden" <<'G'
CREATE_ID 24: 00 00 00 00 10 00 04 00 88 77 66 55 44 33 22 11 10 00 00 00 00 00 00 11
DESTROY_ID 24: 01 00 00 00 10 00 04 00 10 00 00 00 00 00 00 11 07 00 00 00 00 00 00 00
ATTR_ID 24: 02 00 00 00 10 00 18 00 10 00 00 00 00 00 00 11 07 00 00 00 00 00 00 00
LISTEN 32: 03 00 00 00 18 00 00 00 00 00 00 00 00 00 10 00 00 00 00 00 00 00 00 00 07 00 00 00 00 00 00 00
NOTIFY 16: 04 00 00 00 08 00 00 00 07 00 00 00 04 00 00 00
NOTIFY 12: 04 00 00 00 04 00 00 00 07 00 00 00
SEND_REQ 72: 05 00 00 00 40 00 00 00 07 00 00 00 56 34 12 00 02 00 00 00 ef cd ab 00 00 00 00 00 00 00 10 00 10 00 00 00 00 00 00 11 20 00 00 00 00 00 00 11 00 00 00 00 00 00 00 00 04 00 04 02 14 00 14 05 06 05 00 00 00 00 00 00
SEND_REP 48: 06 00 00 00 28 00 00 00 11 22 33 44 55 66 77 88 10 00 00 00 00 00 00 11 08 00 00 00 21 43 65 00 11 11 11 00 04 02 04 14 00 00 05 00 00 00 00 00
SEND_RTU 24: 07 00 00 00 10 00 00 00 10 00 00 00 00 00 00 11 07 00 00 00 04 00 00 00
SEND_DREQ 24: 08 00 00 00 10 00 00 00 10 00 00 00 00 00 00 11 07 00 00 00 04 00 00 00
SEND_DREP 24: 09 00 00 00 10 00 00 00 00 00 00 00 00 00 00 00 08 00 00 00 00 00 00 00
GET_EVENT 40: 10 00 00 00 20 00 c0 00 10 00 00 00 00 00 00 11 20 00 00 00 00 00 00 11 30 00 00 00 00 00 00 11 ff ff 00 00 00 00 00 00
INIT_QP_ATTR 24: 11 00 00 00 10 00 90 00 10 00 00 00 00 00 00 11 07 00 00 00 02 00 00 00
G
if "$bin" --dump-commands > "$tmp/wire.out" 2>&1 && cmp -s "$tmp/wire.golden" "$tmp/wire.out"; then
	ok "wire images of CREATE_ID..INIT_QP_ATTR (ABI 5, NOTIFY also ABI 4)"
else
	bad "wire images differ:"; diff "$tmp/wire.golden" "$tmp/wire.out"
fi

# 1b. The same images from the builds without libibverbs: 64-bit, and the
#     static 32-bit one (gcc-multilib; make vm-setup installs it), whose
#     layouts the compile-time asserts check too.
if "$here/build.sh" --no-libverbs "$tmp/ucmclient-nv" > "$tmp/nv.log" 2>&1 &&
	"$tmp/ucmclient-nv" --dump-commands 2>&1 | cmp -s "$tmp/wire.golden" -; then
	ok "wire images, built without libibverbs"
else
	bad "build without libibverbs or its wire images: $(cat "$tmp/nv.log")"
fi
if ! echo 'int main(void){return 0;}' | ${CC:-gcc} -m32 -static -x c -o "$tmp/m32probe" - 2>/dev/null; then
	echo "skip wire images of the 32-bit client: gcc -m32 -static cannot link (install gcc-multilib)"
elif ! "$tmp/m32probe" 2>/dev/null; then
	# A kernel built without IA32 emulation, or booted with
	# ia32_emulation=0, cannot exec it; the guest's kernel can, and
	# make e2e runs the client there (TestDaemon32BitClient).
	echo "skip wire images of the 32-bit client: this kernel cannot run 32-bit programs (make e2e runs it in the guest)"
elif "$here/build.sh" -m32 "$tmp/ucmclient32" > "$tmp/m32.log" 2>&1 &&
	"$tmp/ucmclient32" --dump-commands 2>&1 | cmp -s "$tmp/wire.golden" -; then
	ok "wire images, 32-bit static client (gcc -m32)"
else
	bad "32-bit build or its wire images: $(cat "$tmp/m32.log")"
fi

# 2. Argument parsing.
run "help" 0 "usage:" "$bin" -h
run "no mode" 2 "exactly one of" "$bin"
run "both modes" 2 "exactly one of" "$bin" -c -l 0x1000 -g fe80::1
run "client without -g" 2 "remote GID" "$bin" -c
run "bad GID" 2 "bad remote GID" "$bin" -c -g nonsense
run "no-verbs client without -G" 2 "local GID" "$bin" -c -g fe80::1 --no-verbs
run "bad count" 2 "bad count" "$bin" -l 0x1000 -n x
run "bad service id" 2 "bad service id" "$bin" -l 12zz
run "bad mtu" 2 "bad mtu" "$bin" -c -g fe80::1 --mtu 9
run "stray argument" 2 "unexpected argument" "$bin" -l 0x1000 extra
run "unknown option" 2 "usage:" "$bin" --frobnicate
run "--burst on the server" 2 "--burst is for the client" "$bin" -l 0x1000 --burst
run "--burst with --hold" 2 "--burst is for the client" "$bin" -c -g fe80::1 -G fe80::2 --no-verbs --burst --hold 10
run "--rdma-cm: SID outside the TCP port space" 2 "not in rdma_cm's TCP port space" "$bin" -c -g fe80::1 --rdma-cm
run "--rdma-cm: REQ user data too long" 2 "at most 56 fit" "$bin" -c -g fe80::1 --rdma-cm -s 0x1061234 \
	--pdata 123456789012345678901234567890123456789012345678901234567
run "--pdata without --rdma-cm" 2 "need --rdma-cm" "$bin" -c -g fe80::1 --pdata x
run "--rdma-cm: bad --src-ip" 2 "bad source address" "$bin" -c -g fe80::1 --rdma-cm -s 0x1061234 --src-ip 1.2.3
run "--cred-check with -l" 2 "takes no -l or -c" "$bin" --cred-check -l 0x1000
run "--cred-check: missing node" 1 "open $tmp/nonexistent: errno 2" "$bin" --cred-check -D "$tmp/nonexistent"

# 3. Discovery, libibcm style. abi_version via SYSFS_PATH.
mkdir -p "$tmp/sys3/class/infiniband_cm" "$tmp/sys5/class/infiniband_cm" "$tmp/sysnone"
echo 3 > "$tmp/sys3/class/infiniband_cm/abi_version"
echo 5 > "$tmp/sys5/class/infiniband_cm/abi_version"
run "abi_version 3 refused" 1 "kernel ABI version 3 doesn't match library version 5" \
	env SYSFS_PATH="$tmp/sys3//" "$bin" -l 0x1000 --no-verbs -d nosuchdev0
run "abi_version unreadable: warning, then no ucm device" 1 "couldn't read ABI version" \
	env SYSFS_PATH="$tmp/sysnone" "$bin" -l 0x1000 --no-verbs -d nosuchdev0
run "no ucm device" 1 "no ucm device for nosuchdev0" \
	env SYSFS_PATH="$tmp/sys5" "$bin" -l 0x1000 --no-verbs -d nosuchdev0
run "-D missing node" 1 "open $tmp/nonexistent: errno 2" \
	"$bin" -l 0x1000 --no-verbs -D "$tmp/nonexistent"

# 4. -D on a regular file: the first write is a CREATE_ID, the file keeps its
#    bytes, and the client notices that no response was written.
: > "$tmp/node"
run "-D regular file: response not written" 1 "CREATE_ID: write succeeded but the device did not write the 4-byte response" \
	"$bin" -l 0x1000 --no-verbs -D "$tmp/node"
hdr=$(od -An -tx1 -N8 "$tmp/node" | tr -s ' ' | sed 's/^ //;s/ $//')
size=$(wc -c < "$tmp/node" | tr -d ' ')
if [ "$hdr" = "00 00 00 00 10 00 04 00" ] && [ "$size" = 24 ]; then
	ok "CREATE_ID written as one 24-byte write"
else
	bad "node holds $size bytes, header '$hdr'"
fi

# 5. The hard-coded /sys/class/infiniband_cm/ucmN/ibdev scan, in a private
#    mount namespace (root + unshare only; nothing is visible outside it).
if [ "$(id -u)" = 0 ] && unshare -m sh -c 'mount --make-rprivate / && mount -t tmpfs none /sys/class && mount -t tmpfs none /dev' 2>/dev/null; then
	cat > "$tmp/ns.sh" <<NS
set -e
mount --make-rprivate /
mount -t tmpfs none /sys/class
mkdir -p /sys/class/infiniband_cm/ucm0 /sys/class/infiniband_cm/ucm3
echo 5 > /sys/class/infiniband_cm/abi_version
echo other0 > /sys/class/infiniband_cm/ucm0/ibdev
echo fake3 > /sys/class/infiniband_cm/ucm3/ibdev
mount -t tmpfs none /dev
mkdir /dev/infiniband
: > /dev/infiniband/ucm3
"$bin" -l 0x1000 --no-verbs -d fake3 -v 2>&1 || true
echo "bytes=\$(wc -c < /dev/infiniband/ucm3)"
"$bin" -l 0x1000 --no-verbs -d absent9 2>&1 || true
NS
	out=$(unshare -m sh "$tmp/ns.sh" 2>&1)
	for want in "fake3 is ucm3" "opened /dev/infiniband/ucm3" "bytes=24" "no ucm device for absent9"; do
		if printf '%s' "$out" | grep -qF "$want"; then ok "ibdev scan: $want"; else bad "ibdev scan: no '$want' in: $out"; fi
	done
else
	echo "skip ibdev scan in a mount namespace (needs root, unshare and mount)"
fi

# 5b. The same scan through the LD_PRELOAD shim (dist/preload), which needs
#     no namespace and no privileges: /sys/class/infiniband_cm is read from
#     $UCMD_CLASS_DIR/infiniband_cm, every other path as it is.
mkdir -p "$tmp/class/infiniband_cm/ucm0" "$tmp/class/infiniband_cm/ucm2"
echo 5 > "$tmp/class/infiniband_cm/abi_version"
echo other0 > "$tmp/class/infiniband_cm/ucm0/ibdev"
echo shim2 > "$tmp/class/infiniband_cm/ucm2/ibdev"
run "shim: ibdev scan finds ucm2" 1 "shim2 is ucm2" \
	env LD_PRELOAD="$shim" UCMD_CLASS_DIR="$tmp/class" "$bin" -l 0x1000 --no-verbs -d shim2 -v
run "shim: abi_version read through it" 1 "/sys/class/infiniband_cm/abi_version: ABI version 5" \
	env LD_PRELOAD="$shim" UCMD_CLASS_DIR="$tmp/class" "$bin" -l 0x1000 --no-verbs -d shim2 -v
run "shim: a device it does not list" 1 "no ucm device for absent9" \
	env LD_PRELOAD="$shim" UCMD_CLASS_DIR="$tmp/class" "$bin" -l 0x1000 --no-verbs -d absent9
run "shim: other paths untouched" 0 "" \
	env LD_PRELOAD="$shim" UCMD_CLASS_DIR="$tmp/class" cat "$tmp/class/infiniband_cm/abi_version"
run "shim: /sys/class/infiniband_cmx is not the class" 1 "No such file" \
	env LD_PRELOAD="$shim" UCMD_CLASS_DIR="$tmp/class" cat /sys/class/infiniband_cmx/abi_version

# 6. The whole client (no verbs) against the LD_PRELOAD ucm mock: event loop,
#    uid/id dispatch, events_reported accounting, private data, timeouts.
gcc -O2 -Wall -Wextra -Werror -std=gnu11 -shared -fPIC -o "$tmp/ucm_mock.so" \
	"$here/mock/ucm_mock.c" -ldl -lpthread || bad "build the mock"
C="-c --no-verbs -G fe80::ff:fe00:1 -g fe80::ff:fe00:2"
mock() { # NAME WANT_RC WANT_TEXT [-e VAR=VAL] -- SERVER -- CLIENT
	name=$1 want_rc=$2 want_text=$3
	shift 3
	run "mock: $name" "$want_rc" "$want_text" "$here/mock/run.sh" -b "$bin" -m "$tmp/ucm_mock.so" "$@"
}
# $C is a list of options: split on purpose
# shellcheck disable=SC2086
{
mock "5 in sequence" 0 "client: 5 of 5 connections ok" -- -l 0x1000 --no-verbs -n 5 -- $C -n 5
mock "3 rounds x 4 in parallel" 0 "client: 12 of 12 connections ok" -- -l 0x1000 --no-verbs -n 3 -P 4 -- $C -n 3 -P 4
mock "O_NONBLOCK fd" 0 "client: 4 of 4 connections ok" -- -l 0x1000 --no-verbs -n 2 -P 2 --nonblock -- $C -n 2 -P 2 --nonblock
mock "IB path (LIDs)" 0 "client: 1 of 1 connections ok" -- -l 0x1000 --no-verbs -- $C -L 2 --slid 1
mock "--hold before DREQ" 0 "client: 1 of 1 connections ok" -- -l 0x1000 --no-verbs -t 2000 -- $C --hold 300
mock "--burst: each round held until all are up" 0 "burst: 3 connections up in " -- -l 0x1000 --no-verbs -n 2 -P 3 -- $C -n 2 -P 3 --burst -v
mock "--burst as libibcm, as make perf runs it" 0 "client: 6 of 6 connections ok" -- -l 0x1000 --no-verbs -n 2 -P 3 -- $C -n 2 -P 3 --burst --libibcm -w 0
mock "-w 0: a destroyed id's TIMEWAIT_EXIT never reaches its number's next id" 0 "client: 6 of 6 connections ok" -- -l 0x1000 --no-verbs -n 2 -P 3 -- $C -n 2 -P 3 -w 0
mock "no TIMEWAIT_EXIT" 0 "timewait no" -e UCM_MOCK_NO_TIMEWAIT=1 -- -l 0x1000 --no-verbs -w 100 -- $C -w 100
mock "RTU lost (DREQ establishes)" 0 "established_by DREQ(no RTU seen)" -e UCM_MOCK_DROP_RTU=1 -- -l 0x1000 --no-verbs -- $C
mock "events_reported mismatch detected" 1 "DESTROY_ID: events_reported 4, but GET_EVENT delivered 3" -e UCM_MOCK_BAD_REPORTED=1 -- -l 0x1000 --no-verbs -- $C
mock "no listener: REJ reported" 1 "REJ_RECEIVED while waiting for REP: reason 8 (invalid service id)" -- -l 0x2000 --no-verbs -T 2 -- $C
mock "lost REP: both sides time out" 1 "timed out after 300 ms waiting for REP" -e UCM_MOCK_DROP_REP=1 -- -l 0x1000 --no-verbs -t 300 -- $C -t 300
mock "-q: the summary, no line per connection" 0 "client: 3 of 3 connections ok" -- -l 0x1000 --no-verbs -n 3 -q -- $C -n 3 -q
mock "--cmd-times: each command's latency" 0 "ucmclient-cmdtime role=client cmd=SEND_REQ n=3 " -- -l 0x1000 --no-verbs -n 3 -q -- $C -n 3 -q --cmd-times
case $out in *" ok: "*) bad "-q: a line per connection printed: $out" ;; esac
}
# --rdma-cm both ways through the mock: the cma_hdr the client builds (from
# IPv4-mapped GIDs, link-local GIDs, or --src-ip/--dst-ip), the server's
# parse of it, and plain user data in the REP.
R="-l 0x1061234 --rdma-cm --no-verbs --pdata srv-rep"
A="-c --rdma-cm --no-verbs -s 0x1061234 --src-port 4660 --pdata cli-req"
# shellcheck disable=SC2086
{
mock "--rdma-cm: REP data as the peer sent it" 0 "rep_pd 'srv-rep'" -- $R -- $A -G ::ffff:10.0.0.1 -g ::ffff:10.0.0.2
mock "--rdma-cm: IPv4 cma_hdr from the GIDs" 0 "REQ cma_hdr ipv4 src 10.0.0.1:4660 dst 10.0.0.2 sid 0x1061234" -- $R -- $A -G ::ffff:10.0.0.1 -g ::ffff:10.0.0.2
mock "--rdma-cm: user data after the cma_hdr" 0 "req_pd 'cli-req'" -- $R -- $A -G ::ffff:10.0.0.1 -g ::ffff:10.0.0.2
mock "--rdma-cm: IPv6 cma_hdr from link-local GIDs" 0 "REQ cma_hdr ipv6 src fe80::ff:fe00:1:4660 dst fe80::ff:fe00:2" -- $R -- $A -G fe80::ff:fe00:1 -g fe80::ff:fe00:2
mock "--rdma-cm: --src-ip/--dst-ip" 0 "REQ cma_hdr ipv4 src 192.0.2.1:4660 dst 192.0.2.2" -- $R -- $A -G fe80::ff:fe00:1 -g fe80::ff:fe00:2 --src-ip 192.0.2.1 --dst-ip 192.0.2.2
mock "--rdma-cm server refuses a REQ without a cma_hdr" 1 "does not start with a cma_hdr" -- $R -t 500 -- $C -s 0x1061234 -t 500 -T 5
}
mock "every option accepted" 0 "client: 1 of 1 connections ok" -- -l 0x1000 --no-verbs -- -t 3000 -s 0x1000 --cm-timeout 1 --no-verbs --plt 0 -M 1 --hop-limit 1 --rate 2 --retry 4 --rnr-retry 3 --mtu 1 --lax -z 8 -x 0 -i 1 -n 1 -P 1 -w 0 -T 5 -D /dev/infiniband/ucm0 -d x -G fe80::1 -g fe80::2 -L 1 --slid 1 -c
echo "selftest: $pass passed, $fail failed"
[ "$fail" = 0 ]
