#!/usr/bin/env bash
# Runs the arm64 tests of ./asm, ./essiv and ./header/cipher under qemu-user:
# the ARMv8 Crypto Extensions kernels, ESSIV and XTS (qemu's "max" CPU has
# the AES instructions), and the pure-Go fallback (-tags purego). It also
# checks that the generated arm64 files match their generators,
# asm/gen_arm64.go and asm/gen_xts_arm64.go.
#
# It installs nothing: qemu-aarch64-static comes from Debian's
# qemu-user-static package (scripts/test.sh installs it when run as root).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v qemu-aarch64-static >/dev/null; then
  echo "test-arm64: qemu-aarch64-static not found; install Debian's qemu-user-static package (apt-get install qemu-user-static)" >&2
  exit 1
fi

exec_flag=(-exec 'qemu-aarch64-static -cpu max')

echo "== arm64 generated assembly is up to date"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp asm/gen_arm64.go asm/gen_xts_arm64.go "$tmp/"
(cd "$tmp" && go run gen_arm64.go && go run gen_xts_arm64.go)
for f in cbc_arm64.s cbc_arm64_stubs.go xts_arm64.s xts_arm64_stubs.go; do
  if ! cmp -s "$tmp/$f" "asm/$f"; then
    echo "test-arm64: asm/$f is stale; run 'GOARCH=arm64 go generate ./asm'" >&2
    exit 1
  fi
done

echo "== go vet (arm64)"
GOARCH=arm64 go vet ./asm ./essiv ./header/cipher
echo "== go test (arm64, qemu-user)"
GOARCH=arm64 go test -count=1 -timeout 20m "${exec_flag[@]}" ./asm ./essiv ./header/cipher
echo "== go test -tags purego (arm64, qemu-user)"
GOARCH=arm64 go test -count=1 -timeout 20m -tags purego "${exec_flag[@]}" ./asm ./essiv ./header/cipher
