#!/usr/bin/env bash
# Installs gguf-mount on this machine as a Debian package: installs the build dependencies
# (scripts/install-deps.sh --build-only), brings build/ up to date for what the package holds
# (target package_files: the binary, the mount helper link, the man page, the changelog; no
# tests), so after scripts/demo.sh or scripts/test.sh nothing is compiled again, packs it with
# cpack -G DEB and installs the .deb with dpkg -i (apt-get -f fixes missing dependencies).
# Remove it again with `sudo dpkg -r gguf-mount`.
# Installed: /usr/bin/gguf-mount, /usr/sbin/mount.fuse.gguf-mount (mount -t fuse.gguf-mount and
# fstab), /usr/share/man/man1/gguf-mount.1.gz, /usr/share/bash-completion/completions/gguf-mount,
# /lib/systemd/system/gguf-mount@.service, examples in /usr/share/doc/gguf-mount/examples.
# Usage: scripts/install.sh [extra cmake args...]   (given to build/'s cmake, as scripts/build.sh;
#        run as root, or sudo is used for apt-get and dpkg)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --build-only
GGUF_MOUNT_TARGETS=package_files scripts/build.sh "$@"
pkg=$(mktemp -d /tmp/gguf-mount-pkg.XXXXXX)
trap 'rm -rf "$pkg"' EXIT
(cd "$pkg" && cpack -G DEB --config "$OLDPWD/build/CPackConfig.cmake" -B "$pkg" >/dev/null)
deb=$(ls "$pkg"/gguf-mount_*.deb)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo dpkg -i "$deb" || $sudo apt-get install -f -y
echo "installed $(basename "$deb"): $(command -v gguf-mount); try 'man gguf-mount'"
