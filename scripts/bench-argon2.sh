#!/usr/bin/env bash
# argon2id unlock against cryptsetup, on a keyslot cryptsetup benchmarked
# itself (luksFormat --type luks2 --iter-time MS: argon2id, 4 passes or
# more, memory and threads its benchmark chose): `cryptsetup open
# --test-passphrase` against `cryptimg test-key` of the same slot, and the
# new cryptimg against the binary of BASE_REV (default: the merge base with
# main). Interleaved pairs (farm-bench --vs: A B A B ..., medians of the
# pairwise ratios), wall and CPU; the slot's parameters are printed first.
# The issue's target: cryptimg's wall <= 1.1x cryptsetup's, user CPU about
# 2x wall (two lanes busy).
#
#   scripts/bench-argon2.sh [ITER_TIME_MS] [ROUNDS]     (default 1000 ms, 7 rounds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
iter=${1:-1000}
rounds=${2:-7}
base=${BASE_REV:-$(git -C "$root" merge-base HEAD main)}
dir=${BENCH_DIR:-/dev/shm/cryptimg-bench-argon2}
rm -rf "$dir"; mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
cd "$dir"

go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
mkdir old && git -C "$root" archive "$base" | tar -x -C old
go build -C old -o "$dir/cryptimg-old" ./cmd/cryptimg
printf 'benchmark passphrase' > key
truncate -s 20M slot.img
cryptsetup luksFormat -q --type luks2 --iter-time "$iter" --key-file key slot.img
cryptsetup luksDump slot.img | grep -E 'PBKDF|Time cost|Memory|Threads'
./cryptimg test-key -q -d key slot.img >/dev/null 2>&1 # fails loudly below if not

fb() { echo "## $1"; local b=$2; shift 2; farm-bench -n "$rounds" --timeout 900 --vs "$b" -- "$@" 2>&1; echo; }
CS="cryptsetup open --test-passphrase --key-file key slot.img"
fb "control: 2 parallel sha256sum vs 1 (1.0: two free cores)" "sh -c 'head -c 256M /dev/zero | sha256sum'" \
  sh -c "head -c 256M /dev/zero | sha256sum & head -c 256M /dev/zero | sha256sum; wait"
fb "cryptimg test-key vs cryptsetup open --test-passphrase (target: wall <= 1.1)" "$CS" ./cryptimg test-key -q -d key slot.img
fb "cryptimg-old test-key vs cryptsetup" "$CS" ./cryptimg-old test-key -q -d key slot.img
fb "cryptimg test-key, new vs old" "./cryptimg-old test-key -q -d key slot.img" ./cryptimg test-key -q -d key slot.img
