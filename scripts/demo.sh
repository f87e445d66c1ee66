#!/usr/bin/env bash
# The main job on a generated sample: builds cryptimg, makes a 32 MiB sample
# raw disk image and a random key file, encrypts the image into a LUKS1 image,
# shows its header, decrypts it again and checks the round trip. When
# cryptsetup is installed it also unlocks the image with cryptsetup.
#
#   scripts/demo.sh [WORKDIR]     (default: a new temporary directory)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=${1:-$(mktemp -d)}
mkdir -p "$work"
cd "$work"
go build -C "$root" -o "$work/cryptimg" ./cmd/cryptimg

# A sample image: 32 MiB, a recognisable text block every MiB, zeros between.
rm -f sample.raw
truncate -s 32M sample.raw
for i in $(seq 0 31); do
  printf 'cryptimg sample image, MiB %02d\n' "$i" | dd of=sample.raw bs=1M seek="$i" conv=notrunc status=none
done
(umask 077; head -c 32 /dev/urandom > key.bin)

set -x
./cryptimg encrypt --key-file key.bin --force sample.raw sample.luks
./cryptimg dump sample.luks
./cryptimg decrypt --key-file key.bin --force sample.luks roundtrip.raw
cmp sample.raw roundtrip.raw
{ set +x; } 2>/dev/null
if command -v cryptsetup >/dev/null; then
  cryptsetup open --test-passphrase --key-file key.bin sample.luks && echo "cryptsetup unlocks sample.luks"
fi
echo "demo OK: files in $work"
