#!/usr/bin/env bash
# Unpacks Debian 13 (trixie)'s systemd 257 userland into DIR (default
# /var/cache/cryptimg/trixie-systemd), for the systemd-tpm2 oracle tests
# (header/token/tpm2, cmd/cryptimg): systemd-cryptenroll 257 seals offline
# and unseals through a TPM, which Debian 12's systemd 252 cannot. Nothing is
# installed: apt runs with private state and lists, the packages are only
# downloaded and unpacked with dpkg -x, and the binaries run with DIR's own
# loader:
#   DIR/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path \
#     DIR/usr/lib/x86_64-linux-gnu:DIR/usr/lib/x86_64-linux-gnu/systemd \
#     DIR/usr/bin/systemd-cryptenroll ...
# Idempotent: a finished DIR (DIR/.done) is left alone.
set -euo pipefail
dir=${1:-/var/cache/cryptimg/trixie-systemd}
[ -e "$dir/.done" ] && exit 0
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work"/{lists/partial,archives/partial,cache,state,debs} "$dir"
echo 'deb http://deb.debian.org/debian trixie main' >"$work/sources.list"
: >"$work/status"
apt=(apt-get -q -o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null
  -o Dir::State="$work/state" -o Dir::State::Lists="$work/lists" -o Dir::State::status="$work/status"
  -o Dir::Cache="$work/cache" -o Dir::Cache::Archives="$work/archives" -o APT::Install-Recommends=0
  -o APT::Sandbox::User=root)
"${apt[@]}" update >/dev/null
# systemd-cryptenroll and its libraries down to libc6 (resolved against an
# empty status file), plus the tpm2-tss libraries systemd dlopen()s.
pkgs=$("${apt[@]}" -s install systemd-cryptsetup cryptsetup-bin libtss2-esys-3.0.2-0t64 libtss2-rc0t64 \
  libtss2-tctildr0t64 libtss2-tcti-device0t64 libtss2-tcti-swtpm0t64 libtss2-mu-4.0.1-0t64 |
  awk '/^Inst /{print $2}')
(cd "$work/debs" && "${apt[@]}" download $pkgs >/dev/null)
for d in "$work"/debs/*.deb; do dpkg -x "$d" "$dir"; done
"$dir/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" \
  --library-path "$dir/usr/lib/x86_64-linux-gnu:$dir/usr/lib/x86_64-linux-gnu/systemd" \
  "$dir/usr/bin/systemd-cryptenroll" --version | head -1
touch "$dir/.done"
