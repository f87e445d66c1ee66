#!/usr/bin/env bash
# Builds cryptimg and installs its man pages (cryptimg.1 and one
# cryptimg-COMMAND.1 per command) into PREFIX/share/man/man1.
#
#   scripts/install-man.sh [PREFIX]     # PREFIX defaults to /usr/local
#
# DESTDIR, if set, is put in front of PREFIX (staged installs). Set
# SOURCE_DATE_EPOCH for reproducible pages: it fixes the date they carry.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=${1:-/usr/local}
mandir="${DESTDIR:-}$prefix/share/man/man1"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "== building cryptimg"
go build -o "$tmp/cryptimg" ./cmd/cryptimg
echo "== generating the man pages"
"$tmp/cryptimg" --quiet man --dir "$tmp/man1"
echo "== installing them into $mandir"
mkdir -p "$mandir"
for page in "$tmp"/man1/*.1; do
  install -m 0644 "$page" "$mandir/"
  echo "installed $mandir/$(basename "$page")"
done
echo "== done: try 'man cryptimg' (add $prefix/share/man to MANPATH if man does not find it)"
