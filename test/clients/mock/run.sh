#!/bin/sh
# Drive a ucmclient server and client through the LD_PRELOAD ucm mock.
#   test/clients/mock/run.sh [-b BIN] [-m MOCK_SO] [-e VAR=VAL]... -- SERVER_ARGS -- CLIENT_ARGS
# Prints both outputs, exits with the client's status (server's if the client
# passed and the server failed). Both get -D /dev/infiniband/ucm0 (intercepted).
set -u
here=$(cd "$(dirname "$0")" && pwd)
bin=""
mock=""
envs=""
while [ $# -gt 0 ]; do
	case $1 in
	-b) bin=$2; shift 2 ;;
	-m) mock=$2; shift 2 ;;
	-e) envs="$envs $2"; shift 2 ;;
	--) shift; break ;;
	*) echo "usage: $0 [-b BIN] [-m MOCK_SO] [-e VAR=VAL]... -- SERVER_ARGS -- CLIENT_ARGS" >&2; exit 2 ;;
	esac
done
srv=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do srv="$srv $1"; shift; done
[ $# -gt 0 ] && shift
cli="$*"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM
if [ -z "$bin" ]; then
	bin=$tmp/ucmclient
	"$here/../build.sh" "$bin" || exit 1
fi
if [ -n "$mock" ]; then
	cp "$mock" "$tmp/ucm_mock.so" || exit 1
else
	gcc -O2 -Wall -Wextra -Werror -std=gnu11 -shared -fPIC -o "$tmp/ucm_mock.so" "$here/ucm_mock.c" -ldl -lpthread || exit 1
fi
mkdir "$tmp/fabric"
# shellcheck disable=SC2086
env UCM_MOCK_DIR="$tmp/fabric" LD_PRELOAD="$tmp/ucm_mock.so" $envs \
	"$bin" -D /dev/infiniband/ucm0 $srv > "$tmp/server.out" 2>&1 &
spid=$!
i=0
while ! ls "$tmp/fabric"/listen-* > /dev/null 2>&1; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $spid 2>/dev/null; then break; fi
	sleep 0.05
done
# shellcheck disable=SC2086
env UCM_MOCK_DIR="$tmp/fabric" LD_PRELOAD="$tmp/ucm_mock.so" $envs \
	"$bin" -D /dev/infiniband/ucm0 $cli > "$tmp/client.out" 2>&1
crc=$?
wait $spid
src=$?
echo "--- server (exit $src)"; cat "$tmp/server.out"
echo "--- client (exit $crc)"; cat "$tmp/client.out"
[ $crc -ne 0 ] && exit $crc
exit $src
