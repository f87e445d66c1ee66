#!/usr/bin/env bash
# qcow2 benchmark: cryptimg encrypt into qcow2+LUKS side by side with
# qemu-img convert on the same files, in one run, on tmpfs. Prints medians
# and ratios as Markdown.
#
#   scripts/bench-qcow2.sh [ROUNDS]      (default 5)
#
# Cases:
#   sparse: a 1 TiB virtual qcow2 holding 80 MiB of random data in 4 extents
#   dense:  a 1 GiB qcow2 full of random data, against the raw path
#           (cryptimg encrypt of the same data as a raw image into raw LUKS)
# PBKDF2 is forced to the minimum for cryptimg and iter-time=10 for qemu-img.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-5}
dir=${BENCH_DIR:-/dev/shm/cryptimg-bench-qcow2}
rm -rf "$dir"; mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
cd "$dir"
go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
printf 'benchmark passphrase' > key
S="--object secret,id=sec0,file=$dir/key"
E='encrypt.format=luks,encrypt.key-secret=sec0,encrypt.cipher-alg=aes-256,encrypt.cipher-mode=cbc,encrypt.ivgen-alg=essiv,encrypt.ivgen-hash-alg=sha256,encrypt.hash-alg=sha256,encrypt.iter-time=10'

# sparse.qcow2: 1 TiB virtual, 80 MiB of random data at 0, 1 GiB, 500 GiB, 1023 GiB.
truncate -s 1T sparse.raw
for off in 0 1024 512000 1047552; do   # MiB
  head -c 20M /dev/urandom | dd of=sparse.raw bs=1M seek=$off conv=notrunc status=none
done
qemu-img convert -f raw -O qcow2 sparse.raw sparse.qcow2
rm sparse.raw
head -c 1G /dev/urandom > dense.raw
qemu-img convert -f raw -O qcow2 dense.raw dense.qcow2

measure() {
  local name=$1; shift
  rm -f out.*
  local ok=0
  for _ in 1 2 3 4 5 6 7 8 9 10; do   # qemu-img's PBKDF benchmark fails at random
    if /usr/bin/time -f '%e %U %S' -o t.$$ "$@" >/dev/null 2>err.$$; then ok=1; break; fi
  done
  if [ $ok = 0 ]; then cat err.$$ >&2; exit 1; fi
  cat t.$$ >> "$name.times"
}
C="--quiet -d key --pbkdf-force-iterations 1000"
for r in $(seq 1 "$rounds"); do
  measure sparse-cryptimg ./cryptimg encrypt $C sparse.qcow2 out.s1
  measure sparse-qemu qemu-img convert $S -f qcow2 -O qcow2 -o "$E" sparse.qcow2 out.s2
  measure dense-cryptimg ./cryptimg encrypt $C dense.qcow2 out.d1
  measure dense-raw ./cryptimg encrypt $C dense.raw out.d2
  measure dense-qemu qemu-img convert $S -f qcow2 -O qcow2 -o "$E" dense.qcow2 out.d3
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
col() { awk -v c="$2" '{print $c}' "$1.times" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
echo "# qcow2, median of $rounds rounds, $(nproc) CPUs, tmpfs"
echo
echo "| job | wall s | user s | sys s |"
echo "| --- | --- | --- | --- |"
for n in sparse-cryptimg sparse-qemu dense-cryptimg dense-raw dense-qemu; do
  echo "| $n | $(col $n 1) | $(col $n 2) | $(col $n 3) |"
done
echo
echo "- sparse 1 TiB / 80 MiB: qemu-img ÷ cryptimg = $(ratio "$(col sparse-qemu 1)" "$(col sparse-cryptimg 1)")×"
echo "- dense 1 GiB: cryptimg qcow2 ÷ cryptimg raw path = $(ratio "$(col dense-cryptimg 1)" "$(col dense-raw 1)")×"
echo "- dense 1 GiB: qemu-img ÷ cryptimg = $(ratio "$(col dense-qemu 1)" "$(col dense-cryptimg 1)")×"
