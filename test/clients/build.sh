#!/bin/sh
# Build ucmclient.
#   test/clients/build.sh [OUTPUT]                (default: bin/ucmclient)
#   test/clients/build.sh --no-libverbs [OUTPUT]  without libibverbs: --no-verbs only
#   test/clients/build.sh -m32 [OUTPUT]           static i386 client without libibverbs
#                                                 (default: bin/ucmclient32; needs gcc-multilib)
# Needs gcc and libibverbs-dev (Debian: apt-get install -y gcc libibverbs-dev).
# Without libibverbs (-DUCMCLIENT_NO_VERBS) only the raw ucm ABI path is
# compiled in (no QPs, no data), which is what a 32-bit client needs: its
# pointers travel zero-extended in the ABI's u64 fields. -static avoids i386
# libraries at run time.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
CC=${CC:-gcc}
flags="-O2 -Wall -Wextra -Werror -std=gnu11"
case ${1:-} in
-m32)
	shift
	out=${1:-$root/bin/ucmclient32}
	mode="-m32 -static -DUCMCLIENT_NO_VERBS"
	libs="-lpthread"
	;;
--no-libverbs)
	shift
	out=${1:-$root/bin/ucmclient}
	mode="-DUCMCLIENT_NO_VERBS"
	libs="-lpthread"
	;;
*)
	out=${1:-$root/bin/ucmclient}
	mode=""
	libs="-libverbs -lpthread"
	;;
esac
mkdir -p "$(dirname "$out")"
# shellcheck disable=SC2086 # flag lists
exec $CC $flags $mode -o "$out" "$here/ucmclient.c" $libs
