#!/usr/bin/env bash
# Pipeline benchmark (no serial stage): decrypt to /dev/null through stdout
# and integrity verify at -j 1 and -j 2, each against "cat IMG >/dev/null";
# decrypt and encrypt to a file against the binary of BASE_REV (default:
# the merge base with main); and 4 parallel readers of the FUSE view
# against the same 4 readers of a plain file. Every pair is interleaved
# (farm-bench --vs: A B A B ..., medians of pairwise ratios) on tmpfs.
#
#   scripts/bench-pipeline.sh [SIZE_MIB] [ROUNDS]     (default 1024 MiB, 5 rounds)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${1:-1024}
rounds=${2:-5}
base=${BASE_REV:-$(git -C "$root" merge-base HEAD main)}
dir=${BENCH_DIR:-/dev/shm/cryptimg-bench-pipeline}
rm -rf "$dir"; mkdir -p "$dir"
trap 'fusermount3 -u "$dir/mnt" 2>/dev/null || true; rm -rf "$dir"' EXIT
cd "$dir"

go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
mkdir old && git -C "$root" archive "$base" | tar -x -C old
go build -C old -o "$dir/cryptimg-old" ./cmd/cryptimg
printf 'benchmark passphrase' > key
head -c $((size_mib << 20)) /dev/urandom > plain.raw
L2='--type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000'
./cryptimg encrypt --quiet -d key $L2 plain.raw xts.luks
./cryptimg encrypt --quiet -d key $L2 --cipher aes-xts-plain64 --key-size 256 --integrity hmac-sha256 --sector-size 512 plain.raw hmac.luks

# fb TITLE B A...: A against B, interleaved.
fb() { echo "## $1"; local b=$2; shift 2; farm-bench -n "$rounds" --timeout 600 --vs "$b" -- "$@" 2>&1; echo; }
# Controls: what parallelism the machine gives now. Two copies of a
# process against one: a wall ratio of 1.0 means two free cores, 2.0 one
# (a shared machine). The image-reading one bounds decrypt, the hashing
# one verify.
fb "control: 2 parallel cat of the image vs 1" "sh -c 'exec cat xts.luks >/dev/null'" sh -c "cat xts.luks >/dev/null & cat xts.luks >/dev/null; wait"
fb "control: 2 parallel sha256sum of the image vs 1" "sha256sum xts.luks" sh -c "sha256sum xts.luks & sha256sum xts.luks; wait"
D="./cryptimg decrypt --quiet -d key"
fb "decrypt xts.luks - >/dev/null, -j 1 vs cat" "sh -c 'exec cat xts.luks >/dev/null'" sh -c "exec $D -j 1 xts.luks - >/dev/null"
fb "decrypt xts.luks - >/dev/null, -j 2 vs cat" "sh -c 'exec cat xts.luks >/dev/null'" sh -c "exec $D -j 2 xts.luks - >/dev/null"
fb "decrypt xts.luks - >/dev/null, -j 2 vs -j 1" "sh -c 'exec $D -j 1 xts.luks - >/dev/null'" sh -c "exec $D -j 2 xts.luks - >/dev/null"
fb "decrypt xts.luks - >/dev/null, new vs old (-j 2)" "sh -c 'exec ./cryptimg-old decrypt --quiet -d key -j 2 xts.luks - >/dev/null'" sh -c "exec $D -j 2 xts.luks - >/dev/null"
V="./cryptimg verify --quiet -d key"
fb "verify hmac.luks (512-byte sectors), -j 2 vs -j 1" "$V -j 1 hmac.luks" $V -j 2 hmac.luks
fb "verify hmac.luks, -j 1 vs cat" "sh -c 'exec cat hmac.luks >/dev/null'" $V -j 1 hmac.luks
fb "verify hmac.luks, -j 2 vs cat" "sh -c 'exec cat hmac.luks >/dev/null'" $V -j 2 hmac.luks
fb "verify hmac.luks -j 2, new vs old" "./cryptimg-old verify --quiet -d key -j 2 hmac.luks" $V -j 2 hmac.luks
fb "decrypt to a file, new vs old" "sh -c 'rm -f out.raw; exec ./cryptimg-old decrypt --quiet -d key xts.luks out.raw'" sh -c "rm -f out.raw; exec $D xts.luks out.raw"
fb "encrypt to a file, new vs old" "sh -c 'rm -f out.luks; exec ./cryptimg-old encrypt --quiet -d key $L2 plain.raw out.luks'" sh -c "rm -f out.luks; exec ./cryptimg encrypt --quiet -d key $L2 plain.raw out.luks"
rm -f out.raw out.luks

# FUSE view: 4 dd readers of a quarter each, direct I/O, against the same on
# the plain file.
q=$((size_mib / 4))
readers() { # FILE
  local pids=()
  for i in 0 1 2 3; do dd if="$1" of=/dev/null bs=1M skip=$((i * q)) count=$q iflag=direct status=none & pids+=($!); done
  wait "${pids[@]}"
}
export -f readers; export q
mkdir mnt
./cryptimg open --background -d key xts.luks mnt
fb "FUSE view, 4 parallel readers vs the plain file" "bash -c 'readers plain.raw'" bash -c "readers mnt/xts.raw"
fb "FUSE view, 4 parallel readers vs 1 reader" "dd if=mnt/xts.raw of=/dev/null bs=1M iflag=direct status=none" bash -c "readers mnt/xts.raw"
./cryptimg close mnt
