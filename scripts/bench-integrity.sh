#!/usr/bin/env bash
# Integrity benchmark: cryptimg verify, decrypt (to a file, and to stdout
# sent to /dev/null) and encrypt of LUKS2 images
# with integrity protection (a tag per sector, dm-integrity layout), side by
# side with plain SHA-256 over the same plaintext (scripts/sha256rate, Go's
# crypto/sha256), in one run, on tmpfs. Prints a Markdown table of medians,
# GB/s and the throughput ratio to the SHA-256 baseline.
#
#   scripts/bench-integrity.sh [SIZE_MIB] [ROUNDS]     (default 1024 MiB, 7 rounds)
#   BENCH_JOBS="sha256-j2 essiv-4096-verify" scripts/bench-integrity.sh   (only these jobs)
#   BENCH_DIR=/dev/shm/elsewhere scripts/bench-integrity.sh
#   BENCH_RAW=/tmp/raw scripts/bench-integrity.sh   (keep each job's per-round
#                                                   "wall user sys maxrss_kib" there)
#
# Each round runs every job once, in the same order (baselines first, then
# verify, decrypt and encrypt of each image), so that load from other
# processes on the machine falls on all of them alike. The requirement is
# that cryptimg reaches 0.8 of SHA-256's throughput per core with both
# cores: the paired ratio sha256-j2 wall ÷ job wall (both on two cores) is
# the per-core figure. PBKDF2 is forced to 1000 iterations, so the numbers
# are about the data path. decrypt and encrypt write into new tmpfs pages,
# whose price the host sets (docs/BENCHMARKS.md, "new tmpfs pages"); the same
# work with the outputs' pages kept is scripts/authrate.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${1:-1024}
rounds=${2:-7}
# A directory of its own unless BENCH_DIR names one: two runs at once must
# not remove each other's files.
if [ -n "${BENCH_DIR:-}" ]; then
  dir=$BENCH_DIR; rm -rf "$dir"; mkdir -p "$dir"
else
  dir=$(mktemp -d /dev/shm/cryptimg-bench-integrity.XXXXXX)
fi
trap 'rm -rf "$dir"' EXIT
cd "$dir"

go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
go build -C "$root" -o "$dir/sha256rate" ./scripts/sha256rate
printf 'benchmark passphrase' > key
head -c $((size_mib << 20)) /dev/urandom > plain.raw

L2='--type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000'
# The images: NAME and its encrypt flags (4096-byte sectors are the default
# for a file of whole 4096-byte sectors).
images=(essiv-4096 xts-4096 essiv-512 gcm-4096)
flags() {
  case $1 in
    essiv-4096) echo "--integrity hmac-sha256 --cipher aes-cbc-essiv:sha256" ;;
    xts-4096) echo "--integrity hmac-sha256 --cipher aes-xts-plain64" ;;
    essiv-512) echo "--integrity hmac-sha256 --cipher aes-cbc-essiv:sha256 --sector-size 512" ;;
    gcm-4096) echo "--integrity aead --cipher aes-gcm-random" ;;
  esac
}
for i in "${images[@]}"; do
  # shellcheck disable=SC2046 # the flags are words
  ./cryptimg encrypt --quiet -d key $L2 $(flags "$i") plain.raw "$i.luks"
done

# want NAME: whether BENCH_JOBS (default: all) lists the job.
want() { [ -z "${BENCH_JOBS:-}" ] || [[ " $BENCH_JOBS " == *" $1 "* ]]; }

# measure NAME CMD...: appends "wall user sys maxrss_kib" to NAME.times.
# Outputs are removed first, so every write allocates its tmpfs pages anew.
measure() {
  local name=$1; shift
  want "$name" || return 0
  rm -f out.*
  if ! /usr/bin/time -f '%e %U %S %M' -o t.$$ "$@" >/dev/null 2>err.$$; then
    echo "$name failed:" >&2; cat err.$$ >&2; exit 1
  fi
  cat t.$$ >> "$name.times"
}

# dd-write is a reference, not a requirement: dd copying the plaintext to a
# new tmpfs file, the write (page allocation and copy) that decrypt and
# encrypt do on top of the cipher and the baselines do not.
jobs=(sha256-j2 sha256-j1 dd-write)
# NAME-stdout is decrypt to stdout, which measure sends to /dev/null: the
# same command without the new file's pages.
for i in "${images[@]}"; do jobs+=("$i-verify" "$i-decrypt" "$i-stdout" "$i-encrypt"); done

# busy: CPU seconds all processes on the machine have used so far (user,
# nice, system, irq, softirq, steal in /proc/stat, at USER_HZ).
busy() { awk -v hz="$(getconf CLK_TCK)" '$1 == "cpu" {print ($2+$3+$4+$7+$8+$9)/hz; exit}' /proc/stat; }
busy0=$(busy); t0=$(date +%s.%N)
for r in $(seq 1 "$rounds"); do
  measure sha256-j2 ./sha256rate -j 2 plain.raw
  measure sha256-j1 ./sha256rate -j 1 plain.raw
  measure dd-write dd if=plain.raw of=out.dd bs=1M
  for i in "${images[@]}"; do
    measure "$i-verify" ./cryptimg verify --quiet -d key "$i.luks"
    measure "$i-decrypt" ./cryptimg decrypt --quiet -d key "$i.luks" out.dec
    measure "$i-stdout" ./cryptimg decrypt --quiet -d key "$i.luks" -
    # shellcheck disable=SC2046
    measure "$i-encrypt" ./cryptimg encrypt --quiet -d key $L2 $(flags "$i") plain.raw out.enc
  done
done
busy1=$(busy); t1=$(date +%s.%N)
rm -f out.*

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
col() { awk -v c="$2" '{print $c}' "$1.times" | median; }
bytes=$((size_mib << 20))
gbs() { awk -v b="$bytes" -v w="$1" 'BEGIN{printf "%.2f", b/w/1e9}'; }
# cpu NAME: the median over the rounds of (user+sys)/wall.
cpu() { awk '{printf "%.4f\n", ($2+$3)/$1}' "$1.times" | median | awk '{printf "%.2f", $1}'; }
# paired A B K: the per-round throughput ratio of job A to job B, that is
# K × B's wall ÷ A's wall, as "median (min–max)". Jobs of one round ran
# within half a minute of each other, so drift in the machine's speed
# cancels; the machine is shared and this is the robust figure.
paired() {
  paste -d' ' <(awk '{print $1}' "$1.times") <(awk '{print $1}' "$2.times") |
    awk -v k="$3" '{printf "%.4f\n", k*$2/$1}' | sort -g |
    awk '{a[NR]=$1} END {m=(NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); printf "%.2f (%.2f–%.2f)", m, a[1], a[NR]}'
}
# cpuratio A: the per-round ratio of sha256-j2's CPU seconds (user+sys) to
# A's, "median (min–max)": throughput per CPU second, which does not depend
# on how many CPUs the machine left free.
cpuratio() {
  paste -d' ' <(awk '{print $2+$3}' "$1.times") <(awk '{print $2+$3}' sha256-j2.times) |
    awk '{printf "%.4f\n", $2/$1}' | sort -g |
    awk '{a[NR]=$1} END {m=(NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); printf "%.2f (%.2f–%.2f)", m, a[1], a[NR]}'
}
# ofmedians A B K: K × median wall of B ÷ median wall of A.
ofmedians() { awk -v a="$(col "$1" 1)" -v b="$(col "$2" 1)" -v k="$3" 'BEGIN{printf "%.2f", k*b/a}'; }
# meets A: yes when the median paired ratio to sha256-j2 is at least 0.8.
meets() {
  paste -d' ' <(awk '{print $1}' "$1.times") <(awk '{print $1}' sha256-j2.times) |
    awk '{printf "%.4f\n", $2/$1}' | median | awk '{print ($1 >= 0.8 ? "yes" : "**no**")}'
}

cpuname=$(awk -F': ' '/^model name/ {print $2; exit}' /proc/cpuinfo)
rev=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git -C "$root" status --porcelain 2>/dev/null)" ] && rev="$rev (with uncommitted changes)"
echo "# integrity, ${size_mib} MiB random plaintext on tmpfs, median of $rounds rounds, $(nproc) CPUs ($cpuname), $(date -u +%F), cryptimg $rev, $(go version | cut -d' ' -f3)"
echo
echo "GB/s is 1e9 bytes/s of plaintext. CPU is (user+sys) ÷ wall (2.00 = both cores busy)."
echo "÷ sha256 -j2 is the throughput ratio to SHA-256 on two goroutines (the per-core ratio):"
echo "median (min–max) of the per-round ratios, then the ratio of the medians."
echo "÷ 2×(-j1) is the same against twice the single-goroutine SHA-256 rate. CPU s ratio is"
echo "sha256-j2's user+sys ÷ the job's, per round: work per CPU second, whatever the load."
echo
echo "| job | wall s | user s | sys s | GB/s | CPU | ÷ sha256 -j2, paired | ÷ sha256 -j2, of medians | ÷ 2×(-j1), paired | ÷ 2×(-j1), of medians | CPU s ratio | ≥ 0.8 |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
for n in "${jobs[@]}"; do
  [ -f "$n.times" ] || continue
  w=$(col "$n" 1)
  r2='' m2='' r1='' m1='' c2='' ok=''
  if [ -f sha256-j2.times ]; then r2=$(paired "$n" sha256-j2 1); m2=$(ofmedians "$n" sha256-j2 1); c2=$(cpuratio "$n"); fi
  if [ -f sha256-j1.times ]; then r1=$(paired "$n" sha256-j1 0.5); m1=$(ofmedians "$n" sha256-j1 0.5); fi
  if [ -f sha256-j2.times ] && [[ $n != sha256-* && $n != dd-write ]]; then ok=$(meets "$n"); fi
  echo "| $n | $w | $(col "$n" 2) | $(col "$n" 3) | $(gbs "$w") | $(cpu "$n") | $r2 | $m2 | $r1 | $m1 | $c2 | $ok |"
done
echo
# What the measured jobs used is known from their times; the rest of the
# machine's busy CPU time during the rounds is other processes' (and this
# script's own, which is small).
ours=$(cat ./*.times | awk '{s += $2+$3} END {printf "%.1f", s}')
awk -v b0="$busy0" -v b1="$busy1" -v t0="$t0" -v t1="$t1" -v o="$ours" -v n="$(nproc)" 'BEGIN{
  printf "- during the rounds (%.0f s): the jobs used %.1f CPU s, other processes %.1f CPU s, on average %.2f of the %d CPUs\n",
    t1-t0, o, b1-b0-o, (b1-b0-o)/(t1-t0), n}'
echo "- load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
if [ -n "${BENCH_RAW:-}" ]; then mkdir -p "$BENCH_RAW" && cp ./*.times "$BENCH_RAW"/; fi
