#!/usr/bin/env bash
# bench-clone.sh: cryptimg clone (a new copy with a new volume key) against
# cryptimg reencrypt (the same image rewritten in place with a new key) and
# cp of the same bytes, interleaved round by round on tmpfs, in one run.
# Prints the median wall time of each and the median of per-round ratios to
# reencrypt.
#
#   scripts/bench-clone.sh [SIZE_MIB] [ROUNDS]     (default 1024 MiB, 7 rounds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${1:-1024}
rounds=${2:-7}
dir=$(mktemp -d /dev/shm/cryptimg-bench-clone.XXXXXX)
trap 'rm -rf "$dir"' EXIT
cd "$dir"
go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
printf 'benchmark passphrase' > key
printf 'instance passphrase' > key2
chmod 600 key key2
head -c $((size_mib << 20)) /dev/urandom > plain.raw
./cryptimg encrypt --quiet --progress none -d key --pbkdf-force-iterations 1000 plain.raw golden.img
: > cp.times; : > clone.times; : > reenc.times
t() { /usr/bin/time -f '%e' -a -o "$1" "${@:2}" >/dev/null 2>&1; }
for r in $(seq 1 "$rounds"); do
  rm -f out.cp out.clone work.img; cp golden.img work.img; sync
  t cp.times cp golden.img out.cp
  t clone.times ./cryptimg clone --quiet --progress none -d key --new-key-file key2 --pbkdf-force-iterations 1000 golden.img out.clone
  t reenc.times ./cryptimg reencrypt --quiet --batch-mode --progress none -d key --pbkdf-force-iterations 1000 work.img
done
./cryptimg test-key --quiet -d key2 out.clone
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
paired() { paste -d' ' "$1" "$2" | awk '{printf "%.4f\n", $1/$2}' | median; }
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
echo "CPU: $cpu, $(nproc) CPUs; ${size_mib} MiB, $rounds rounds, tmpfs"
echo
echo "| job | median s | × reencrypt (median of per-round ratios) |"
echo "|---|---|---|"
for j in cp clone reenc; do
  printf '| %s | %.2f | %.2f |\n' "$(case $j in cp) echo 'cp (the bytes only)';; clone) echo 'clone (new file, new key)';; reenc) echo 'reencrypt (in place)';; esac)" \
    "$(median < $j.times)" "$(paired $j.times reenc.times)"
done
