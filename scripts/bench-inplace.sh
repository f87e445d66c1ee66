#!/usr/bin/env bash
# bench-inplace.sh: cryptimg encrypt --in-place and decrypt --in-place of a
# raw image against dd copying the same bytes, interleaved round by round on
# tmpfs, in one run. Prints the median wall time of each, the median of the
# per-round ratios to dd, and the ratio of medians.
#
#   scripts/bench-inplace.sh [SIZE_MIB] [ROUNDS]     (default 1024 MiB, 7 rounds)
#
# Each round copies fresh inputs first (not timed): in-place commands
# rewrite their input.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${1:-1024}
rounds=${2:-7}
dir=${BENCH_DIR:-/dev/shm/cryptimg-bench-inplace}
rm -rf "$dir"; mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
cd "$dir"
go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
printf 'benchmark passphrase' > key
head -c $((size_mib << 20)) /dev/urandom > plain.raw
cp plain.raw enc.raw
./cryptimg encrypt --quiet --in-place -d key --pbkdf-force-iterations 1000 enc.raw
: > dd.times; : > enc.times; : > dec.times
t() { /usr/bin/time -f '%e' -a -o "$1" "${@:2}" >/dev/null 2>&1; }
for r in $(seq 1 "$rounds"); do
  rm -f out.dd work.enc work.dec; cp plain.raw work.enc; cp enc.raw work.dec; sync
  t dd.times dd if=plain.raw of=out.dd bs=4M
  t enc.times ./cryptimg encrypt --quiet --in-place -d key --pbkdf-force-iterations 1000 work.enc
  t dec.times ./cryptimg decrypt --quiet --in-place -d key work.dec
  cmp -s work.dec plain.raw || { echo "decrypt --in-place gave the wrong plaintext" >&2; exit 1; }
done
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
paired() { paste -d' ' "$1" "$2" | awk '{printf "%.4f\n", $1/$2}' | median; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "CPU: $cpu, $(nproc) CPUs; ${size_mib} MiB, $rounds rounds, tmpfs"
echo
echo "| job | median s | × dd (median of per-round ratios) | × dd (ratio of medians) |"
echo "|---|---|---|---|"
d=$(median < dd.times)
for j in dd enc dec; do
  m=$(median < $j.times)
  printf '| %s | %.2f | %.2f | %.2f |\n' "$(case $j in dd) echo 'dd bs=4M';; enc) echo 'encrypt --in-place';; dec) echo 'decrypt --in-place';; esac)" \
    "$m" "$(paired $j.times dd.times)" "$(awk -v a="$m" -v b="$d" 'BEGIN{print a/b}')"
done
