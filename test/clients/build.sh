#!/bin/sh
# Build ucmclient. Usage: test/clients/build.sh [OUTPUT]   (default: bin/ucmclient)
# Needs gcc and libibverbs-dev (Debian: apt-get install -y gcc libibverbs-dev).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$root/bin/ucmclient}
CC=${CC:-gcc}
mkdir -p "$(dirname "$out")"
exec $CC -O2 -Wall -Wextra -Werror -std=gnu11 -o "$out" "$here/ucmclient.c" -libverbs -lpthread
