#!/usr/bin/env bash
# Host setup for the test VM (make vm-setup). Idempotent; a second run with
# nothing to do takes about a second and downloads nothing.
#
#  1. apt packages (only when one is missing; apt-get update first, because a
#     machine image's package lists may be stale or absent);
#  2. Debian's current linux-image-<abi>-amd64 .deb (the ABI name is resolved
#     through the linux-image-amd64 metapackage, never hard-coded), downloaded
#     once into $UCMD_VM_CACHE/dl and unpacked, NOT installed;
#  3. a pruned module tree (modules.list plus dependencies) with depmod;
#  4. the decompressed vmlinux: qemu boots it directly through its PVH note,
#     which saves ~5 s of in-guest XZ decompression per boot under TCG;
#  5. the initramfs: static busybox, test/vm/init and the 9p/overlay modules.
#
# Cache: $UCMD_VM_CACHE (default <repo>/.cache/vm, git-ignored); the .deb is
# also linked into $UCMD_VM_DL_CACHE (default ~/.cache/ucmd-vm) for other clones.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
CACHE=${UCMD_VM_CACHE:-$REPO/.cache/vm}
# the downloaded .deb is also kept per machine, so that another clone (a CI
# run) need not fetch it again
DLCACHE=${UCMD_VM_DL_CACHE:-${XDG_CACHE_HOME:-${HOME:-/root}/.cache}/ucmd-vm}
export DEBIAN_FRONTEND=noninteractive
export PATH=$PATH:/usr/sbin:/sbin # depmod

PKGS=(qemu-system-x86 busybox-static kmod iproute2 cpio xz-utils rdma-core
  ibverbs-utils infiniband-diags rdmacm-utils libibumad-dev libibverbs-dev librdmacm-dev fuse3
  libfuse3-dev pkg-config gcc libc6-dev gcc-multilib util-linux coreutils shellcheck
  tshark   # tshark: the host-side decode of ucmd trace's capture (make e2e)
  qemu-user) # qemu-s390x: the tests on a big-endian host (make cross)

log() { echo "vm-setup: $*" >&2; }
die() { echo "vm-setup: error: $*" >&2; exit 1; }
# first GLOB... prints the first existing path a glob expanded to
first() { local f; for f in "$@"; do [ -e "$f" ] && { echo "$f"; return; }; done; return 0; }

updated=
apt_update() {
  [ -n "$updated" ] && return 0
  log "apt-get update"
  # a fresh machine's own first apt run may hold the lists' lock: wait for
  # it, and try again after a failure; one unreachable third-party source
  # fails the update as a whole, and the Debian lists it did fetch may
  # still be enough
  local try
  for try in 1 2 3; do
    apt-get update -qq -o DPkg::Lock::Timeout=300 >&2 && break
    [ "$try" = 3 ] && { log "warning: apt-get update failed; continuing with the lists there are"; break; }
    log "apt-get update failed; again in 10 s"
    sleep 10
  done
  updated=1
}

install_packages() {
  local missing=() p
  for p in "${PKGS[@]}"; do
    [ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" = "install ok installed" ] ||
      missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "missing packages (${missing[*]}); run as root to install them"
  apt_update
  # wireshark-common asks whether non-root users may capture: no (and no
  # question: the install is non-interactive)
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  log "installing ${missing[*]}"
  apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=300 \
    -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
    "${missing[@]}" >/dev/null ||
    die "apt-get install ${missing[*]} failed"
}

# resolve_kpkg prints linux-image-<abi>-amd64, the package the metapackage
# currently depends on, or nothing if the package lists do not know it.
resolve_kpkg() {
  apt-cache depends linux-image-amd64 2>/dev/null |
    awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }'
}

# fetch_kernel leaves exactly one kernel .deb in $CACHE/dl and prints its path.
fetch_kernel() {
  local kpkg deb
  kpkg=$(resolve_kpkg)
  if [ -z "$kpkg" ]; then
    apt_update
    kpkg=$(resolve_kpkg)
  fi
  if [ -z "$kpkg" ]; then
    # offline and no lists: keep whatever kernel the cache already has
    deb=$(first "$CACHE"/dl/linux-image-*.deb)
    [ -n "$deb" ] || die "cannot resolve linux-image-amd64 (no apt lists?) and no cached kernel"
    log "cannot resolve linux-image-amd64; using cached $(basename "$deb")"
    echo "$deb"; return
  fi
  mkdir -p "$CACHE/dl"
  deb=$(first "$CACHE/dl/${kpkg}"_*_amd64.deb)
  if [ -z "$deb" ]; then
    deb=$(first "$DLCACHE/${kpkg}"_*_amd64.deb)
    if [ -n "$deb" ]; then
      log "reusing $(basename "$deb") from $DLCACHE"
      share "$deb" "$CACHE/dl"
    else
      download "$kpkg"
      deb=$(first "$CACHE/dl/${kpkg}"_*_amd64.deb)
      [ -n "$deb" ] || die "apt-get download $kpkg left no .deb in $CACHE/dl"
    fi
    deb=$CACHE/dl/$(basename "$deb")
    # an older ABI's .deb is dead weight now
    find "$CACHE/dl" -name 'linux-image-*.deb' ! -name "$(basename "$deb")" -delete
  fi
  if [ ! -e "$DLCACHE/$(basename "$deb")" ]; then
    if mkdir -p "$DLCACHE" && share "$deb" "$DLCACHE"; then
      find "$DLCACHE" -name 'linux-image-*.deb' ! -name "$(basename "$deb")" -delete
    else
      log "warning: could not keep $(basename "$deb") in $DLCACHE"
    fi
  fi
  echo "$deb"
}

# download KPKG: apt-get download into $CACHE/dl.
download() {
  local kpkg=$1
  log "downloading $kpkg"
  if ! (cd "$CACHE/dl" && apt-get download -qq -o APT::Sandbox::User=root "$kpkg" >&2); then
    # stale lists name a version the archive no longer has: refresh, retry
    [ -z "$updated" ] || die "apt-get download $kpkg failed"
    apt_update
    kpkg=$(resolve_kpkg)
    (cd "$CACHE/dl" && apt-get download -qq -o APT::Sandbox::User=root "$kpkg" >&2) ||
      die "apt-get download $kpkg failed"
  fi
}

# share FILE DIR: a hard link when possible (no second copy on disk).
share() { ln -f "$1" "$2/" 2>/dev/null || cp "$1" "$2/"; }

# names FILE prints the module names listed in FILE (comments stripped).
names() { sed -e 's/#.*//' "$1" | awk 'NF { print $1 }'; }

# closure ROOT KVER NAME... prints the .ko paths (relative to ROOT) needed to
# load NAMEs, dependencies first, each once.
closure() {
  local root=$1 kver=$2; shift 2
  local n
  for n in "$@"; do
    modprobe -d "$root" -S "$kver" --show-depends "$n" ||
      die "module $n not found in $kver"
  done | awk '$1 == "insmod" && !seen[$2]++ { print $2 }' | sed "s|^$root/||"
}

# build_tree DEB KVER: unpack, prune to modules.list, depmod, vmlinux.
build_tree() {
  local deb=$1 kver=$2 tmp f off want list kos
  tmp=$CACHE/unpack
  rm -rf "$tmp" "${CACHE:?}/lib" "$CACHE/vmlinux"
  log "unpacking $(basename "$deb")"
  dpkg-deb -x "$deb" "$tmp"
  # the .deb ships no modules.dep; the closure below needs one
  depmod -b "$tmp" "$kver"
  mkdir -p "$CACHE/lib/modules/$kver"
  cp -p "$tmp/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} \
    "$CACHE/lib/modules/$kver/"
  mapfile -t want < <(names "$HERE/modules.list"; names "$HERE/initramfs.list")
  # not a process substitution: its failure (a misspelt module) would be lost
  list=$(closure "$tmp" "$kver" "${want[@]}") || die "resolving modules failed"
  mapfile -t kos <<< "$list"
  for f in "${kos[@]}"; do
    mkdir -p "$CACHE/$(dirname "$f")"
    cp -p "$tmp/$f" "$CACHE/$f"
  done
  depmod -b "$CACHE" "$kver"
  log "kept ${#kos[@]} modules"
  # bzImage -> vmlinux: the payload is one XZ stream after the setup code
  off=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$tmp/boot/vmlinuz-$kver" | head -1 | cut -d: -f1)
  [ -n "$off" ] || die "no XZ payload in vmlinuz-$kver"
  # (tail's SIGPIPE when xz stops at the end of the stream is no error)
  xz -dcq --single-stream < <(tail -c +$((off + 1)) "$tmp/boot/vmlinuz-$kver") \
    > "$CACHE/vmlinux.tmp" || die "XZ decompression of vmlinuz-$kver failed"
  [ "$(head -c4 "$CACHE/vmlinux.tmp" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] ||
    die "decompressed vmlinux-$kver is not an ELF image"
  mv "$CACHE/vmlinux.tmp" "$CACHE/vmlinux"
  rm -rf "$tmp"
}

# build_initramfs KVER: busybox, init, and the initramfs.list closure in load
# order (mods/order), so init needs no module names of its own.
build_initramfs() {
  local kver=$1 t f bb want list
  bb=$(command -v busybox) || die "busybox not found"
  t=$(mktemp -d)
  mkdir -p "$t"/{bin,dev,proc,sys,mods}
  cp "$bb" "$t/bin/busybox"
  cp "$HERE/init" "$t/init"
  mapfile -t want < <(names "$HERE/initramfs.list")
  list=$(closure "$CACHE" "$kver" "${want[@]}") || die "resolving initramfs modules failed"
  while read -r f; do
    cp "$CACHE/$f" "$t/mods/"
    basename "$f" >> "$t/mods/order"
  done <<< "$list"
  (cd "$t" && find . | cpio -o -H newc --quiet | gzip -1) > "$CACHE/initramfs.cpio.gz.tmp"
  mv "$CACHE/initramfs.cpio.gz.tmp" "$CACHE/initramfs.cpio.gz"
  rm -rf "$t"
}

main() {
  local deb kver stamp
  install_packages
  mkdir -p "$CACHE"
  deb=$(fetch_kernel)
  kver=$(basename "$deb" | sed -E 's/^linux-image-([^_]+)_.*/\1/')
  # everything derived from the .deb is rebuilt when any input changes
  stamp=$( { basename "$deb"; cat "$HERE/modules.list" "$HERE/initramfs.list" \
    "$HERE/init" "$HERE/setup.sh"; } | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$CACHE/stamp" 2>/dev/null)" = "$stamp" ] && [ -f "$CACHE/vmlinux" ] &&
    [ -f "$CACHE/initramfs.cpio.gz" ]; then
    log "up to date (kernel $kver, cache $CACHE)"
    return
  fi
  # a guest booting from this cache right now would lose its kernel and
  # modules under it: rebuild a cache that has a kernel under run.sh's VM lock
  if [ -f "$CACHE/vmlinux" ]; then
    exec 9>>"${UCMD_VM_LOCK:-/tmp/ucmd-vm.lock}"
    if ! flock -n 9; then
      log "waiting for the VM lock: a guest may be running from $CACHE"
      flock -w "${UCMD_VM_LOCK_WAIT:-3600}" 9 || die "VM lock not acquired"
    fi
  fi
  rm -f "$CACHE/stamp"
  build_tree "$deb" "$kver"
  build_initramfs "$kver"
  echo "$kver" > "$CACHE/kver"
  echo "$stamp" > "$CACHE/stamp"
  log "ready: kernel $kver, $(du -sh "$CACHE" | cut -f1) in $CACHE"
}

main "$@"
