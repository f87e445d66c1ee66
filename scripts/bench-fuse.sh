#!/usr/bin/env bash
# FUSE view throughput, as root: sequential dd bs=1M (direct I/O) through the
# file that "cryptimg open" mounts, for a raw LUKS and a qcow2+LUKS image of
# 1 GiB on tmpfs, with the same dd on a plain file of the same directory as the
# baseline of the same run. Prints medians of ROUNDS rounds as Markdown.
#
# Writes copy random data from a file on the same tmpfs: the qcow2 view
# stores nothing for zeros written over clusters that read as zeros, so
# /dev/zero would not measure allocation. One row writes zeros to show that.
#
#   scripts/bench-fuse.sh [ROUNDS]      (default 5)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-5}
dir=${BENCH_DIR:-/dev/shm/cryptimg-bench-fuse}
rm -rf "$dir"; mkdir -p "$dir"
cleanup() { "$dir/cryptimg" close "$dir/mnt" 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
cd "$dir"
go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
mkdir mnt
printf 'benchmark passphrase' > key
truncate -s 1G plain.raw
head -c 1G /dev/urandom > random.raw
K="--quiet -d key"
C="$K --pbkdf-force-iterations 1000"

# rate ARGS...: dd's rate in MB/s.
rate() {
  dd "$@" 2>&1 | awk '/copied/ { v=$(NF-1); u=$NF; if (u ~ /^GB/) v*=1000; if (u ~ /^kB/) v/=1000; print v }'
}
median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

for r in $(seq 1 "$rounds"); do
  # Baseline: the same dd on a plain file, no FUSE and no crypto.
  rm -f base.raw
  rate if=random.raw of=base.raw bs=1M count=1024 >> base-write1
  rate if=random.raw of=base.raw bs=1M count=1024 conv=notrunc >> base-write
  rate if=base.raw of=/dev/null bs=1M >> base-read
  for fmt in raw qcow2; do
    rm -f img
    ./cryptimg encrypt $C -O "$fmt" plain.raw img
    ./cryptimg open --background $K img mnt
    # qcow2: zeros over unallocated clusters store nothing; the first
    # write of data allocates every cluster; the second rewrites.
    rate if=/dev/zero of=mnt/img.raw bs=1M count=1024 oflag=direct conv=notrunc >> "$fmt-write0"
    rate if=random.raw of=mnt/img.raw bs=1M count=1024 oflag=direct conv=notrunc >> "$fmt-write1"
    rate if=random.raw of=mnt/img.raw bs=1M count=1024 oflag=direct conv=notrunc >> "$fmt-write2"
    rate if=mnt/img.raw of=/dev/null bs=1M iflag=direct >> "$fmt-read"
    ./cryptimg close mnt
  done
done
echo "| dd bs=1M, direct I/O | raw LUKS MB/s | qcow2+LUKS MB/s | plain file MB/s |"
echo "| --- | --- | --- | --- |"
echo "| zeros over an empty image | $(median < raw-write0) | $(median < qcow2-write0) | |"
echo "| first write of data | $(median < raw-write1) | $(median < qcow2-write1) | $(median < base-write1) (new file) |"
echo "| rewrite | $(median < raw-write2) | $(median < qcow2-write2) | $(median < base-write) |"
echo "| read | $(median < raw-read) | $(median < qcow2-read) | $(median < base-read) |"
