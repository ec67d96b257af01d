#!/usr/bin/env bash
# Operations test (needs root and /dev/fuse): builds the .deb with cpack, installs it with
# dpkg -i, checks every systemd unit with systemd-analyze verify, mounts the fixture shards
# through the installed mount helper (mount -t fuse.gguf-mount, and an fstab line through
# mount --fstab) and checks the merged sha256, then dpkg -r and checks nothing is left behind.
# Usage: deb_test.sh BUILD_DIR FIXTURES_DIR      (exit 77 = skipped)
set -euo pipefail
build=$(realpath "$1")
fixtures=$(realpath "$2")
expected=188145f4ca7ba59da646e9e72b30db80647a047477bd8031e159b069b3f57f8f

if [ "$(id -u)" -ne 0 ]; then echo "SKIP: dpkg -i and mount(8) need root"; exit 77; fi
if [ ! -c /dev/fuse ]; then echo "SKIP: /dev/fuse is missing"; exit 77; fi
if dpkg-query -W -f='${Status}' gguf-mount 2>/dev/null | grep -q "install ok installed"; then
  echo "SKIP: a gguf-mount package is already installed on this machine; not touching it"; exit 77
fi

work=$(mktemp -d /tmp/gguf-mount-deb.XXXXXX)
mnt="$work/mnt"
installed=0
cleanup() {
  set +e
  for m in "$mnt" "$work/mnt2"; do
    if grep -qs " $m " /proc/mounts; then umount "$m" 2>/dev/null || fusermount3 -uz "$m"; fi
  done
  [ "$installed" = 1 ] && dpkg -r gguf-mount >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

echo "== cpack -G DEB"
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/pkg" >/dev/null)
deb=$(ls "$work"/pkg/gguf-mount_*.deb)
echo "$deb"
dpkg-deb -f "$deb" Depends | tee "$work/depends"
grep -q fuse3 "$work/depends" || fail "Depends lacks fuse3"
grep -q libfuse3-3 "$work/depends" || fail "Depends lacks libfuse3-3"
grep -Eq 'libspdlog|libfmt' "$work/depends" || fail "Depends lacks the spdlog/fmt runtime"
dpkg-deb -f "$deb" Recommends | grep -q bash-completion || fail "Recommends lacks bash-completion"

echo "== dpkg -i"
dpkg -i "$deb" >/dev/null
installed=1
dpkg -L gguf-mount > "$work/files"
for f in /usr/bin/gguf-mount /usr/sbin/mount.fuse.gguf-mount /lib/systemd/system/gguf-mount@.service \
         /lib/systemd/system/gguf-mount-remote@.service \
         /usr/share/man/man1/gguf-mount.1.gz /usr/share/bash-completion/completions/gguf-mount; do
  [ -e "$f" ] || fail "$f not installed"
done
gguf-mount --version
[ -e /usr/share/doc/gguf-mount/changelog.Debian.gz ] || fail "no changelog.Debian.gz"
# Stripped: no .debug_info section in the installed binary (the build tree keeps it).
if readelf -S /usr/bin/gguf-mount | grep -q '\.debug_info'; then fail "/usr/bin/gguf-mount is not stripped"; fi
man -w gguf-mount >/dev/null || fail "man gguf-mount not found"

echo "== systemd-analyze verify"
mkdir -p "$work/units"
cp /lib/systemd/system/gguf-mount@.service "$work/units/"
cp /usr/share/doc/gguf-mount/examples/mnt-models.mount.example "$work/units/mnt-models.mount"
(cd "$work/units" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify \
   /lib/systemd/system/gguf-mount@.service "$work/units/mnt-models.mount" 2>&1 | tee "$work/verify")
# verify prints nothing for clean units; anything it says is a finding.
[ ! -s "$work/verify" ] || fail "systemd-analyze verify reported problems"
(cd "$work/units" && systemd-analyze verify gguf-mount@mnt-models.service 2>&1 | tee "$work/verify2")
[ ! -s "$work/verify2" ] || fail "systemd-analyze verify reported problems for an instance"
remote_unit=/lib/systemd/system/gguf-mount-remote@.service
(cd "$work/units" && SYSTEMD_LOG_LEVEL=notice systemd-analyze verify "$remote_unit" 2>&1 | tee "$work/verify3")
[ ! -s "$work/verify3" ] || fail "systemd-analyze verify reported problems for the remote unit"
(cd "$work/units" && systemd-analyze verify gguf-mount-remote@mnt-remote.service 2>&1 | tee "$work/verify4")
[ ! -s "$work/verify4" ] || fail "systemd-analyze verify reported problems for a remote instance"
# The remote unit: network ordering, the address families HTTP(S) needs (and only there), the
# cache directory, the token as a credential and never in argv.
grep -qE '^After=.*network-online.target' "$remote_unit" || fail "remote unit not After=network-online.target"
grep -qx 'Wants=network-online.target' "$remote_unit" || fail "remote unit does not want network-online.target"
grep -qx 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6' "$remote_unit" || fail "remote unit address families"
grep -qx 'RestrictAddressFamilies=AF_UNIX' /lib/systemd/system/gguf-mount@.service || fail "local unit must stay AF_UNIX only"
grep -qx 'CacheDirectory=gguf-mount' "$remote_unit" || fail "remote unit has no CacheDirectory=gguf-mount"
grep -qx 'LoadCredential=hf-token:/etc/gguf-mount/hf-token' "$remote_unit" || fail "remote unit has no token credential"
grep '^ExecStart=' "$remote_unit" | grep -qiE 'token|CREDENTIALS' && fail "a token reaches the command line"
# The SOURCE URL (credentials, signed queries) as a credential too, never $SOURCE in argv.
grep -qx 'LoadCredential=source:/etc/gguf-mount/%i.source' "$remote_unit" || fail "remote unit has no source credential"
grep '^ExecStart=' "$remote_unit" | grep -q -- '--source-file %d/source' || fail "remote unit does not read the source credential"
grep '^ExecStart=' "$remote_unit" | grep -q 'SOURCE' && fail "remote unit puts \$SOURCE on the command line"
# With the variable CacheDirectory= sets (CACHE_DIRECTORY) and no --cache-dir, the daemon opens
# its cache there (an offline mount of an uncached URL: it exits 1 after opening the cache).
mkdir -p "$work/sdcache" "$work/mnt2"  # the mount point is checked before the cache is opened
CACHE_DIRECTORY="$work/sdcache" HOME=/nonexistent XDG_CACHE_HOME= \
  gguf-mount --foreground --offline http://127.0.0.1:9/m-00001-of-00002.gguf "$work/mnt2" 2>/dev/null || true
[ -d "$work/sdcache/v1" ] || fail "the daemon did not use \$CACHE_DIRECTORY as its cache"
if [ "$(ps -p 1 -o comm=)" != systemd ]; then
  echo "NOTE: systemd is not PID 1 here ($(ps -p 1 -o comm=)): the units are verified and inspected," \
       "not started (network-online ordering, CacheDirectory creation and LoadCredential are not exercised)"
fi

echo "== mount -t fuse.gguf-mount"
mkdir -p "$work/src" "$mnt"
cp "$fixtures"/kvzoo/t7/*.gguf "$work/src/"
mount -t fuse.gguf-mount "$work/src" "$mnt" -o ro,allow_other,nofail,_netdev,x-systemd.automount
grep " $mnt " /proc/mounts
grep -q " $mnt fuse.gguf-mount ro," /proc/mounts || fail "not mounted as fuse.gguf-mount ro"
grep " $mnt " /proc/mounts | grep -q allow_other || fail "allow_other was not passed through"
[ "$(sha256sum "$mnt/kvzoo.gguf" | cut -d' ' -f1)" = "$expected" ] || fail "wrong merged sha256 via mount -t"
umount "$mnt"
grep -qs " $mnt " /proc/mounts && fail "still mounted after umount"

echo "== mount --fstab"
# gguf-mount's own options ride along as -o items (log_file=, show_shards, log-level=): fstab has no other way.
printf '# test fstab\n%s %s fuse.gguf-mount ro,nofail,noauto,_netdev,x-systemd.automount,comment=x,log_file=%s,show_shards,log-level=debug 0 0\n' \
  "$work/src" "$mnt" "$work/fstab-mount.log" > "$work/fstab"
mount --fstab "$work/fstab" "$mnt"
[ "$(sha256sum "$mnt/kvzoo.gguf" | cut -d' ' -f1)" = "$expected" ] || fail "wrong merged sha256 via fstab"
[ -e "$mnt/kvzoo-00002-of-00007.gguf" ] || fail "-o show_shards was not applied"
grep -q "debug: " "$work/fstab-mount.log" || fail "-o log_file=, log-level=debug: no debug line in the log file"
umount "$mnt"
echo "== mount -t with an unknown -o option: refused, one line, nothing mounted"
if mount -t fuse.gguf-mount "$work/src" "$mnt" -o ro,cache_dirx=/nowhere 2>"$work/unknown.err"; then
  fail "an unknown -o option was accepted"
fi
grep -q "cache_dirx=/nowhere: unknown mount option" "$work/unknown.err" || fail "unknown option: $(cat "$work/unknown.err")"
grep -qs " $mnt " /proc/mounts && fail "mounted despite an unknown option"

echo "== a killed daemon leaves a dead mount; the next mount clears it and does not stack"
mount -t fuse.gguf-mount "$work/src" "$mnt"
# The daemon is the newest process with this command line: the parent that daemonized it may
# still be exiting (seen in CI: the old `head -1` picked it, and the live daemon went on serving).
pid=""
for _ in $(seq 50); do
  pid=$(pgrep -n -f "mount.fuse.gguf-mount $work/src $mnt" || true)
  [ -n "$pid" ] && [ "$(pgrep -c -f "mount.fuse.gguf-mount $work/src $mnt")" = 1 ] && break
  sleep 0.1
done
[ -n "$pid" ] || fail "daemon not found"
kill -9 "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
# Cached attributes may still answer stat(); a read that must reach the daemon may not.
if dd if="$mnt/kvzoo.gguf" of=/dev/null bs=4096 count=1 iflag=direct 2>"$work/dd.err"; then
  fail "a dead mount still served data"
fi
grep -q "Transport endpoint is not connected" "$work/dd.err" || fail "unexpected error: $(cat "$work/dd.err")"
mount -t fuse.gguf-mount "$work/src" "$mnt" || fail "the mount over a dead gguf-mount mount was refused"
[ "$(grep -c " $mnt " /proc/mounts)" = 1 ] || fail "a mount was stacked on the dead one"
[ "$(sha256sum "$mnt/kvzoo.gguf" | cut -d' ' -f1)" = "$expected" ] || fail "wrong merged sha256 after the remount"
echo "== a second mount on a live mount point is refused"
if mount -t fuse.gguf-mount "$work/src" "$mnt" 2>"$work/second.err"; then fail "mounted twice"; fi
grep -q "already mounted" "$work/second.err" || fail "unexpected message: $(cat "$work/second.err")"
umount "$mnt"
grep -qs " $mnt " /proc/mounts && fail "a mount is left after umount (a stacked dead one?)"

echo "== dpkg -r"
dpkg -r gguf-mount >/dev/null
installed=0
left=0
while read -r f; do
  case "$f" in /|/.|/usr|/usr/*/|/lib|/sbin|/etc) continue;; esac
  if [ -f "$f" ] || [ -L "$f" ]; then echo "left behind: $f"; left=1; fi
done < "$work/files"
[ "$left" = 0 ] || fail "files left after dpkg -r"
hash -r
command -v gguf-mount >/dev/null && fail "gguf-mount still on PATH after dpkg -r"
echo "PASS"
