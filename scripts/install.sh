#!/usr/bin/env bash
# Installs gguf-mount on this machine as a Debian package: builds what the package holds (the
# binary, the man page; no tests) in build-pkg/, packs it with cpack -G DEB and installs the .deb with dpkg -i (apt-get -f fixes missing
# dependencies). Remove it again with `sudo dpkg -r gguf-mount`.
# Installed: /usr/bin/gguf-mount, /usr/sbin/mount.fuse.gguf-mount (mount -t fuse.gguf-mount and
# fstab), /usr/share/man/man1/gguf-mount.1.gz, /usr/share/bash-completion/completions/gguf-mount,
# /lib/systemd/system/gguf-mount@.service, examples in /usr/share/doc/gguf-mount/examples.
# Usage: scripts/install.sh [extra cmake args...]   (run as root, or sudo is used for dpkg)
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-pkg -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGGUF_MOUNT_BUILD_TESTS=OFF "$@" >/dev/null
ninja -C build-pkg
pkg=$(mktemp -d /tmp/gguf-mount-pkg.XXXXXX)
trap 'rm -rf "$pkg"' EXIT
(cd "$pkg" && cpack -G DEB --config "$OLDPWD/build-pkg/CPackConfig.cmake" -B "$pkg" >/dev/null)
deb=$(ls "$pkg"/gguf-mount_*.deb)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo=sudo
$sudo dpkg -i "$deb" || $sudo apt-get install -f -y
echo "installed $(basename "$deb"): $(command -v gguf-mount); try 'man gguf-mount'"
