#!/usr/bin/env bash
# The issue's three speed targets, each pair interleaved (farm-bench --vs:
# A B A B ..., medians of the pairwise ratios), and a summary of the
# ratios at the end:
#
#   1. argon2id unlock: `cryptimg test-key` against `cryptsetup open
#      --test-passphrase` of the same keyslot, one that cryptsetup
#      benchmarked itself (luksFormat --type luks2 --iter-time 1000:
#      argon2id, its choice of passes, memory and threads). Target: wall
#      <= 1.1x, user CPU about 2x wall.
#   2. `verify` of an integrity image (HMAC-SHA256 tags, 512-byte sectors)
#      at -j 2 against -j 1. Target: speed-up >= 1.8 (time ratio <= 0.56).
#   3. `decrypt IMG - >/dev/null` at -j 2 against `cat IMG >/dev/null`.
#      Target: <= 1.0.
#
# and the new binary against the one of BASE_REV (default: the merge base
# with main) for 1 and 2. Images are SIZE_MIB of random data on tmpfs.
#
#   scripts/bench-targets.sh [SIZE_MIB] [ROUNDS]     (default 1024 MiB, 7 rounds)
#
# Environment: SLOT_OPTS replaces `--iter-time 1000` when formatting the
# argon2 slot (e.g. "--pbkdf-force-iterations 4 --pbkdf-memory 511522
# --pbkdf-parallel 2", the slot cryptsetup chose on the 2-core machine
# when idle), so that a busy machine's benchmark does not pick a smaller
# one. CHRT=1 runs every command SCHED_FIFO (chrt -f 10, needs root): on a
# machine shared with other work it gets the CPUs whenever it is runnable,
# as on an idle one; without it, a shared machine's figures are noise.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${1:-1024}
rounds=${2:-7}
base=${BASE_REV:-$(git -C "$root" merge-base HEAD main)}
dir=${BENCH_DIR:-/dev/shm/cryptimg-bench-targets}
rt=(); [ "${CHRT:-}" = 1 ] && rt=(chrt -f 10)
load=$(cut -d' ' -f1-3 /proc/loadavg)
rm -rf "$dir"; mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
cd "$dir"

go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
mkdir old && git -C "$root" archive "$base" | tar -x -C old
go build -C old -o "$dir/cryptimg-old" ./cmd/cryptimg
printf 'benchmark passphrase' > key
truncate -s 20M slot.img
# shellcheck disable=SC2086
cryptsetup luksFormat -q --type luks2 ${SLOT_OPTS:---iter-time 1000} --key-file key slot.img
cryptsetup luksDump slot.img | grep -E 'PBKDF|Time cost|Memory|Threads'
./cryptimg test-key -q -d key slot.img
head -c $((size_mib << 20)) /dev/urandom > plain.raw
L2='--type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000'
./cryptimg encrypt --quiet -d key $L2 plain.raw xts.luks
./cryptimg encrypt --quiet -d key $L2 --cipher aes-xts-plain64 --key-size 256 --integrity hmac-sha256 --sector-size 512 plain.raw hmac.luks
rm plain.raw

summary=()
# fb TITLE B A...: A against B, interleaved; keeps the median wall ratio
# and A's median user CPU / wall for the summary.
fb() {
  local title=$1 b=$2; shift 2
  echo "## $title"
  local out; out=$("${rt[@]}" farm-bench -n "$rounds" --timeout 1800 --vs "$b" -- "$@" 2>&1)
  echo "$out"; echo
  local ratio user wall
  ratio=$(awk '/^A\/B wall/ {print $4}' <<<"$out")
  user=$(awk '/^A user s/ {print $5}' <<<"$out")
  wall=$(awk '/^A wall s/ {print $5}' <<<"$out")
  summary+=("$(printf '%-62s A/B wall %s  (A: wall %s s, user/wall %s)' "$title" "$ratio" "$wall" \
    "$(awk -v u="$user" -v w="$wall" 'BEGIN { if (w > 0) printf "%.2f", u / w }')")")
}
CS="cryptsetup open --test-passphrase --key-file key slot.img"
fb "control: 2 parallel sha256sum vs 1 (1.0 = two free cores)" "sha256sum xts.luks" \
  sh -c "sha256sum xts.luks & sha256sum xts.luks; wait"
fb "1. test-key vs cryptsetup (target <= 1.1)" "$CS" ./cryptimg test-key -q -d key slot.img
fb "1. test-key, new vs old" "./cryptimg-old test-key -q -d key slot.img" ./cryptimg test-key -q -d key slot.img
V="./cryptimg verify --quiet -d key"
fb "2. verify -j 2 vs -j 1 (target <= 0.56)" "$V -j 1 hmac.luks" $V -j 2 hmac.luks
fb "2. verify -j 2, new vs old" "./cryptimg-old verify --quiet -d key -j 2 hmac.luks" $V -j 2 hmac.luks
D="./cryptimg decrypt --quiet -d key"
fb "3. decrypt -j 2 IMG - >/dev/null vs cat (target <= 1.0)" "sh -c 'exec cat xts.luks >/dev/null'" sh -c "exec $D -j 2 xts.luks - >/dev/null"
fb "3. decrypt -j 2 to /dev/null, new vs old" "sh -c 'exec ./cryptimg-old decrypt --quiet -d key -j 2 xts.luks - >/dev/null'" sh -c "exec $D -j 2 xts.luks - >/dev/null"
# Diagnostics for 2 and 3: one spare P (GOMAXPROCS = jobs + 1). With as
# many Ps as workers, the runtime's sysmon takes a worker's P while it is
# in pread (about 200 hand-offs per 512 MiB) and starts a spinning thread
# for it; with a spare P it does not (about 20). A gain here on an idle
# machine, where SCHED_FIFO runs show none (FIFO starves sysmon), says
# the rest of the gap is the scheduler, not the pipeline.
fb "diag: verify -j 2, GOMAXPROCS=3 vs 2" "env GOMAXPROCS=2 $V -j 2 hmac.luks" env GOMAXPROCS=3 $V -j 2 hmac.luks
fb "diag: decrypt -j 2 to /dev/null, GOMAXPROCS=3 vs 2" "sh -c 'GOMAXPROCS=2 exec $D -j 2 xts.luks - >/dev/null'" sh -c "GOMAXPROCS=3 exec $D -j 2 xts.luks - >/dev/null"
echo "## summary ($(nproc) CPUs, load average before: $load${rt:+, SCHED_FIFO})"
printf '%s\n' "${summary[@]}"
