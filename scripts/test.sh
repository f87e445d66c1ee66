#!/usr/bin/env bash
# Runs cryptimg's whole test suite: unit tests, the interop tests against the
# real cryptsetup and qemu-img, the kernel oracle (dm-crypt under
# qemu-system-x86_64), the pure-Go fallback, the arm64 kernels under
# qemu-user, and the generated-assembly check.
#
# Missing Debian packages are installed when running as root. Outside CI the
# interop tests skip (and say so) when cryptsetup or qemu-img is missing; with
# CI set they fail instead.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cryptsetup >/dev/null || need+=(cryptsetup-bin)
command -v veritysetup >/dev/null || need+=(cryptsetup-bin)
command -v qemu-img >/dev/null || need+=(qemu-utils)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)
command -v sfdisk >/dev/null || need+=(fdisk)
command -v debugfs >/dev/null || need+=(e2fsprogs)
command -v fusermount3 >/dev/null || need+=(fuse3)
# The kernel oracle (vectors/kernel): a kernel with its modules, booted
# under qemu-system-x86_64, with busybox-static and cryptsetup inside.
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
ls /boot/vmlinuz-*-cloud-amd64 >/dev/null 2>&1 || need+=(linux-image-cloud-amd64)
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)
command -v dmsetup >/dev/null || need+=(dmsetup)
# systemd-cryptenroll: the reference for enroll --wipe-slot.
command -v systemd-cryptenroll >/dev/null || need+=(systemd)
# systemd-dissect: the oracle of verity format --partition (as root, with
# loop devices).
command -v systemd-dissect >/dev/null || need+=(systemd-container)
# openssl cms -verify: the oracle of the verity signature partition.
command -v openssl >/dev/null || need+=(openssl)
# swtpm and tpm2-tools: the systemd-tpm2 oracles (header/token/tpm2).
command -v swtpm >/dev/null || need+=(swtpm swtpm-tools)
command -v tpm2_import >/dev/null || need+=(tpm2-tools)
# clevis and a tang server (tangd run by socat): the oracles of the clevis
# tokens (enroll --tang-adv, --clevis-config, --token-only).
command -v clevis >/dev/null || need+=(clevis)
command -v clevis-luks-bind >/dev/null || need+=(clevis-luks)
[ -x /usr/libexec/tangd ] || need+=(tang)
command -v socat >/dev/null || need+=(socat)
command -v jose >/dev/null || need+=(jose)
command -v curl >/dev/null || need+=(curl)
if ((${#need[@]})); then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ${need[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "warning: missing ${need[*]}; run as root to install them (interop tests will skip)" >&2
  fi
fi

echo "== gofmt"
unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then echo "gofmt needed: $unformatted" >&2; exit 1; fi
echo "== go vet"
go vet ./...
echo "== staticcheck"
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
echo "== cross builds (darwin, windows, linux/arm64)"
GOOS=darwin go build ./...
GOOS=windows go build ./...
GOARCH=arm64 go build ./...
echo "== go test (native)"
go test -count=1 -p 1 -timeout 20m ./...
# The race pass runs the library and CLI tests again under the race
# detector. The oracles (the kernel, and the tests named for qemu and
# cryptsetup, whose time goes to those programs) ran in full above and are
# not repeated; the crash and fault tests take fewer points (raceEnabled).
echo "== go test -race (pipeline, library and CLI; the oracles ran above)"
go test -count=1 -race -timeout 20m -skip 'TestKernel|Qemu|Cryptsetup|Interop' ./sectors ./header/cipher ./image/... ./cmd/...
echo "== go test -tags purego"
go test -count=1 -tags purego -timeout 20m ./asm ./essiv ./header/... ./sectors
if [ -x scripts/test-arm64.sh ]; then
  echo "== arm64 under qemu-user"
  scripts/test-arm64.sh
fi
if [ -x asm/_asm/check.sh ]; then
  echo "== generated assembly is up to date"
  asm/_asm/check.sh
fi
echo "== all tests passed"
