#!/bin/sh
# Runs INSIDE the guest (make deb-test): guest-deb.sh OLD.deb NEW.deb RULES
# The guest has no systemd as PID 1; a systemctl stand-in (first on PATH,
# with /run/systemd/system present so the scripts believe systemd runs)
# records what the maintainer scripts ask for and reports ucmd active.
set -eu

old=$1 new=$2 rules=$3
n=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
fail() { echo "FAIL: $*" >&2; exit 1; }
log=/tmp/systemctl.log

mkdir -p /run/systemd/system /usr/local/sbin
cat > /usr/local/sbin/systemctl <<'SH'
#!/bin/sh
echo "$*" >> /tmp/systemctl.log
exit 0
SH
chmod 755 /usr/local/sbin/systemctl
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
calls() { if [ -e $log ]; then tr '\n' ';' < $log; fi; rm -f $log; }

# --- install -----------------------------------------------------------
out=$(dpkg -i "$old" 2>&1) || fail "dpkg -i $old: $out"
echo "$out" | grep -q "installed, not enabled" || fail "install says nothing about enabling: $out"
c=$(calls)
[ "$c" = "daemon-reload;" ] || fail "install asked systemctl for: $c"
ok "install: only daemon-reload; says 'installed, not enabled'"
[ ! -e /etc/systemd/system/multi-user.target.wants/ucmd.service ] || fail "enabled on install"
ok "install: not enabled"
case "$(/usr/sbin/ucmd --version)" in "ucmd 0.9.0 (ucm ABI 5, go1."*")") ;; *) false ;; esac || fail "version: $(/usr/sbin/ucmd --version)"
! readelf -l /usr/sbin/ucmd | grep -q INTERP || fail "/usr/sbin/ucmd is dynamically linked"
ok "binary: static, ucmd --version = $(/usr/sbin/ucmd --version)"
for f in /lib/systemd/system/ucmd.service /lib/udev/rules.d/90-ucmd.rules /etc/default/ucmd \
  /usr/share/man/man8/ucmd.8.gz /usr/share/man/man8/ucmd-serve.8.gz /usr/share/man/man8/ucmd-exec.8.gz \
  /usr/share/bash-completion/completions/ucmd /usr/share/zsh/vendor-completions/_ucmd \
  /usr/share/fish/vendor_completions.d/ucmd.fish /usr/share/doc/ucmd/copyright \
  /usr/share/doc/ucmd/docs/ucm-abi.md /usr/share/doc/ucmd/docs/ib-cm.md /usr/share/doc/ucmd/docs/design.md \
  /usr/lib/ucmd/libucmd-sysfs.so; do
  [ -s "$f" ] || fail "missing $f"
done
grep -q '^ExecStart=/usr/sbin/ucmd serve' /lib/systemd/system/ucmd.service || fail "unit's ExecStart is not /usr/sbin/ucmd"
grep -q '^/etc/default/ucmd$' /var/lib/dpkg/info/ucmd.conffiles || fail "/etc/default/ucmd is not a conffile"
zcat /usr/share/man/man8/ucmd-exec.8.gz | grep -q 'SUDO_USER' || fail "ucmd-exec(8) lacks the --user text"
ok "files: unit (ExecStart=/usr/sbin/ucmd), udev rule, conffile, man pages, completions, docs, the LD_PRELOAD shim"
if command -v systemd-analyze >/dev/null; then
  v=$(systemd-analyze verify /lib/systemd/system/ucmd.service 2>&1) || fail "systemd-analyze verify: $v"
  ok "systemd-analyze verify ucmd.service: clean"
  s=$(systemd-analyze security --offline=yes /lib/systemd/system/ucmd.service 2>&1 | tail -1)
  echo "# $s"
fi

# --- the udev rule against the real CUSE nodes ---------------------------
echo 'UCMD_ARGS="--log-level debug"' > /etc/default/ucmd # an administrator's edit
/usr/sbin/ucmd serve --fixed-numbers --runtime-dir /run/ucmd > /tmp/ucmd.log 2>&1 &
pid=$!
i=0
until [ -e /run/ucmd/ucmd.sock ]; do
  i=$((i + 1)); [ $i -lt 100 ] || { cat /tmp/ucmd.log; fail "ucmd did not start"; }
  kill -0 $pid 2>/dev/null || { cat /tmp/ucmd.log; fail "ucmd exited"; }
  sleep 0.1
done
ok "ucmd 0.9.0 serving (pid $pid)"
for node in 'infiniband!ucm0' 'infiniband!ucm1'; do
  [ -e "/sys/class/cuse/$node" ] || fail "no /sys/class/cuse/$node"
  t=$(udevadm test --action=add "/sys/class/cuse/$node" 2>&1) || true
  echo "$t" | grep -q '90-ucmd.rules:[0-9]*.*MODE.*0666' || { echo "$t" | tail -20; fail "the rule does not match $node"; }
  echo "$t" | grep '90-ucmd.rules:[0-9]' | sed 's/^/# /'
done
ok "udevadm test: 90-ucmd.rules sets MODE 0666 on infiniband/ucm0 and infiniband/ucm1"
# the rule as it was (KERNEL=="ucm[0-9]*") does not match: what this fixes
printf 'KERNEL=="ucm[0-9]*", SUBSYSTEM=="cuse", MODE="0666"\n' > /etc/udev/rules.d/89-old-ucmd.rules
t=$(udevadm test --action=add '/sys/class/cuse/infiniband!ucm0' 2>&1) || true
echo "$t" | grep -q 'Reading rules file: /etc/udev/rules.d/89-old-ucmd.rules' || fail "udevadm test did not read the old rule"
echo "$t" | grep -q '89-old-ucmd.rules:[0-9]' && fail "the old rule matched?"
rm /etc/udev/rules.d/89-old-ucmd.rules
ok "the old KERNEL==\"ucm[0-9]*\" rule does not match"
cmp -s "$rules" /lib/udev/rules.d/90-ucmd.rules || fail "packaged rule differs from dist/90-ucmd.rules"

# --- upgrade under a running ucmd -----------------------------------------
out=$(dpkg -i "$new" 2>&1) || fail "dpkg -i $new: $out"
c=$(calls)
case $c in *restart* | *start\ * | *stop* | *enable* | *reload\ *) fail "upgrade asked systemctl for: $c" ;; esac
echo "$out" | grep -q "still the old one" || fail "upgrade does not say the running ucmd is the old one: $out"
ok "upgrade 0.9.0 -> 1.0.0: systemctl asked only for: $c"
kill -0 $pid || fail "the running ucmd died in the upgrade"
/usr/sbin/ucmd status --runtime-dir /run/ucmd | grep -q "ucmd 0.9.0" || fail "status: $(/usr/sbin/ucmd status --runtime-dir /run/ucmd 2>&1 | head -3)"
case "$(/usr/sbin/ucmd --version)" in "ucmd 1.0.0 (ucm ABI 5, go1."*")") ;; *) false ;; esac || fail "new version not installed"
ok "the running ucmd (pid $pid) is still 0.9.0 and serving; /usr/sbin/ucmd is 1.0.0"
grep -q -- '--log-level debug' /etc/default/ucmd || fail "upgrade replaced the edited /etc/default/ucmd"
ok "upgrade kept the edited /etc/default/ucmd"
kill -TERM $pid
wait $pid || fail "ucmd exited non-zero on SIGTERM: $(tail -5 /tmp/ucmd.log)"

# --- remove, purge ---------------------------------------------------------
mkdir -p /etc/systemd/system/multi-user.target.wants # as `systemctl enable ucmd` would
ln -s /lib/systemd/system/ucmd.service /etc/systemd/system/multi-user.target.wants/ucmd.service
# In a chroot or an image build, policy-rc.d forbids stopping services.
printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
chmod 755 /usr/sbin/policy-rc.d
/var/lib/dpkg/info/ucmd.prerm remove 2>/dev/null || fail "prerm remove failed under policy-rc.d"
c=$(calls)
case $c in *stop*) fail "prerm stopped ucmd although policy-rc.d forbids it: $c" ;; esac
rm /usr/sbin/policy-rc.d
ok "remove under a policy-rc.d that forbids it: ucmd not stopped"
out=$(dpkg -r ucmd 2>&1) || fail "dpkg -r: $out"
c=$(calls)
case $c in "stop ucmd.service;"*daemon-reload*) ;; *) fail "remove asked systemctl for: $c" ;; esac
for f in /usr/sbin/ucmd /lib/systemd/system/ucmd.service /lib/udev/rules.d/90-ucmd.rules /usr/lib/ucmd/libucmd-sysfs.so; do
  [ ! -e $f ] || fail "remove left $f"
done
[ -e /etc/default/ucmd ] || fail "remove deleted the conffile"
ok "remove: stopped ucmd ($c), files gone, /etc/default/ucmd kept"
mkdir -p /run/ucmd/class # as the unit keeps it (RuntimeDirectoryPreserve=yes)
out=$(dpkg -P ucmd 2>&1) || fail "dpkg -P: $out"
[ ! -e /etc/default/ucmd ] || fail "purge left /etc/default/ucmd"
[ ! -e /run/ucmd ] || fail "purge left /run/ucmd"
[ ! -L /etc/systemd/system/multi-user.target.wants/ucmd.service ] || fail "purge left the enablement symlink"
dpkg -s ucmd >/dev/null 2>&1 && fail "dpkg still knows ucmd"
ok "purge: conffile, enablement symlink and /run/ucmd gone, package unknown to dpkg"
echo "guest-deb: all $n checks passed"
