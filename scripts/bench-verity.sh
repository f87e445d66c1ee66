#!/usr/bin/env bash
# dm-verity benchmark: cryptimg verity format and verify against
# veritysetup format and verify (cryptsetup 2.6.1 here) of the same data,
# with the same salt and UUID, on tmpfs, in interleaved rounds. Prints a
# Markdown table of medians (wall, user+sys CPU, CPU/wall: how many cores
# it kept busy) and the wall-time ratio cryptimg/veritysetup. The issue's
# target is format at <= 0.33x veritysetup's wall time, on both cores.
#
#   scripts/bench-verity.sh [SIZE_MIB] [ROUNDS]     (default 1024 MiB, 7 rounds)
#   BENCH_DIR=/dev/shm/elsewhere scripts/bench-verity.sh
#
# With "encrypt" first, it compares instead cryptimg encrypt --verity (the
# tree made in the encryption's pass) with plain cryptimg encrypt of the
# same input, interleaved, and prints their medians and ratio; the issue's
# target is <= 1.2x. veritysetup verify checks the tree once.
#
#   scripts/bench-verity.sh encrypt [SIZE_MIB] [ROUNDS]
#   BENCH_ENCRYPT_FLAGS="--type luks2 --pbkdf pbkdf2" scripts/bench-verity.sh encrypt
#
# Each round runs every job once in the same order, so that load from other
# processes falls on all of them alike. The hash files of the two formats
# are compared once: they must be the same bytes.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mode=format
if [ "${1:-}" = encrypt ]; then mode=encrypt; shift; fi
size_mib=${1:-1024}
rounds=${2:-7}
if [ -n "${BENCH_DIR:-}" ]; then
  dir=$BENCH_DIR; rm -rf "$dir"; mkdir -p "$dir"
else
  dir=$(mktemp -d /dev/shm/cryptimg-bench-verity.XXXXXX)
fi
trap 'rm -rf "$dir"' EXIT
cd "$dir"

command -v veritysetup >/dev/null || { echo "veritysetup is missing (Debian: cryptsetup-bin)" >&2; exit 1; }
go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
head -c $((size_mib << 20)) /dev/urandom > data
salt=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
uuid=12345678-9abc-4ef0-9234-56789abcdef0
p=(--salt "$salt" --uuid "$uuid")

median() { sort -n | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

# measure NAME CMD...: appends "wall user sys" to NAME.times.
measure() {
  local name=$1; shift
  rm -f out.hash
  if ! /usr/bin/time -f '%e %U %S' -o t.$$ "$@" >/dev/null 2>err.$$; then
    echo "$name failed:" >&2; cat err.$$ >&2; exit 1
  fi
  cat t.$$ >> "$name.times"
}

if [ $mode = encrypt ]; then
  printf 'bench verity key' > key
  read -ra flags <<< "${BENCH_ENCRYPT_FLAGS:-}"
  enc=(./cryptimg encrypt -d key --pbkdf-force-iterations 1000 --force "${flags[@]}")
  "${enc[@]}" --verity check.hash --root-hash-file check.root data check.img >/dev/null
  veritysetup verify check.img check.hash "$(cat check.root)"
  rm -f check.img check.hash
  load0=$(cut -d' ' -f1-3 /proc/loadavg)
  for ((r = 1; r <= rounds; r++)); do
    for j in encrypt encrypt-verity; do
      extra=(); [ $j = encrypt-verity ] && extra=(--verity out.hash)
      rm -f out.img out.hash
      measure "$j" "${enc[@]}" "${extra[@]}" data out.img
    done
  done
  rm -f out.img out.hash
  echo "encrypt ${BENCH_ENCRYPT_FLAGS:-(defaults)}; load average at the start $load0"
  echo "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load average $(cut -d' ' -f1-3 /proc/loadavg), $size_mib MiB, $rounds rounds"
  echo
  echo "| job | wall s (median) | user+sys s | CPU/wall | wall vs encrypt |"
  echo "|---|---:|---:|---:|---:|"
  base=$(awk '{print $1}' encrypt.times | median)
  for j in encrypt encrypt-verity; do
    w=$(awk '{print $1}' "$j.times" | median); c=$(awk '{print $2 + $3}' "$j.times" | median)
    awk -v j="$j" -v w="$w" -v c="$c" -v b="$base" 'BEGIN {printf "| %s | %.3f | %.3f | %.2f | %.2fx |\n", j, w, c, c / w, w / b}'
  done
  exit 0
fi

veritysetup format data vs.hash "${p[@]}" > vs.out
./cryptimg verity format data ci.hash "${p[@]}" > ci.out
cmp vs.hash ci.hash || { echo "the hash files differ" >&2; exit 1; }
roothash=$(awk '/^Root hash:/ {print $3}' vs.out)

jobs=(veritysetup-format cryptimg-format veritysetup-verify cryptimg-verify)
for ((r = 1; r <= rounds; r++)); do
  measure veritysetup-format veritysetup format data out.hash "${p[@]}"
  measure cryptimg-format ./cryptimg verity format data out.hash "${p[@]}"
  measure veritysetup-verify veritysetup verify data vs.hash "$roothash"
  measure cryptimg-verify ./cryptimg verity verify data ci.hash "$roothash"
done

wall() { awk '{print $1}' "$1.times" | median; }
cpu() { awk '{print $2 + $3}' "$1.times" | median; }

echo "$(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $size_mib MiB, $rounds rounds, $(veritysetup --version | cut -d' ' -f1-2)"
echo
echo "| job | wall s (median) | user+sys s | CPU/wall | wall vs veritysetup |"
echo "|---|---:|---:|---:|---:|"
for j in "${jobs[@]}"; do
  w=$(wall "$j"); c=$(cpu "$j")
  base=$(wall "veritysetup-${j#*-}")
  awk -v j="$j" -v w="$w" -v c="$c" -v b="$base" 'BEGIN {printf "| %s | %.3f | %.3f | %.2f | %.2fx |\n", j, w, c, c / w, w / b}'
done
