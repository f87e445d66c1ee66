#!/usr/bin/env bash
# End-to-end benchmark: cryptimg encrypt/decrypt side by side with dd and
# qemu-img convert on the same files, in one run, on tmpfs. Prints a Markdown
# table of medians (wall, user and system CPU seconds per GiB) and ratios.
#
#   scripts/bench-e2e.sh [SIZE_MIB] [ROUNDS]     (default 1024 MiB, 5 rounds)
#   BENCH_JOBS="dd luks2-encrypt luks2-decrypt" scripts/bench-e2e.sh 1024 7   (only these jobs)
#
# PBKDF2 cost is forced to the minimum for cryptimg (1000 iterations) and set
# to iter-time=10 ms for qemu-img, so the numbers are about the data path.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
size_mib=${1:-1024}
rounds=${2:-5}
dir=${BENCH_DIR:-/dev/shm/cryptimg-bench}
rm -rf "$dir"; mkdir -p "$dir"
trap 'rm -rf "$dir"' EXIT
cd "$dir"

go build -C "$root" -o "$dir/cryptimg" ./cmd/cryptimg
go build -C "$root" -tags purego -o "$dir/cryptimg-purego" ./cmd/cryptimg
printf 'benchmark passphrase' > key
head -c $((size_mib << 20)) /dev/urandom > plain.raw
./cryptimg encrypt --quiet -d key --pbkdf-force-iterations 1000 plain.raw enc.luks
X='--cipher aes-xts-plain64 --key-size 512'
./cryptimg encrypt --quiet -d key --pbkdf-force-iterations 1000 $X plain.raw xts.luks
# LUKS2 with cryptsetup's defaults (aes-xts-plain64/512, 4096-byte sectors), pbkdf2 for speed.
L2='--type luks2 --pbkdf pbkdf2 --pbkdf-force-iterations 1000'
./cryptimg encrypt --quiet -d key $L2 plain.raw l2.luks
S="--object secret,id=sec0,file=$dir/key"
L='key-secret=sec0,cipher-alg=aes-256,cipher-mode=cbc,ivgen-alg=essiv,ivgen-hash-alg=sha256,hash-alg=sha256,iter-time=10'
# qemu-img's own default: aes-256 xts plain64, as cryptimg's $X.
LX='key-secret=sec0,iter-time=10'

# want NAME: whether BENCH_JOBS (default: all) lists the job.
want() { [ -z "${BENCH_JOBS:-}" ] || [[ " $BENCH_JOBS " == *" $1 "* ]]; }

# measure NAME CMD...: appends "wall user sys maxrss_kib" to NAME.times.
measure() {
  local name=$1; shift
  want "$name" || return 0
  rm -f out.*
  local ok=0
  for _ in 1 2 3 4 5 6 7 8 9 10; do   # qemu-img's PBKDF benchmark fails at random
    if /usr/bin/time -f '%e %U %S %M' -o t.$$ "$@" >/dev/null 2>err.$$; then ok=1; break; fi
  done
  if [ $ok = 0 ]; then cat err.$$ >&2; exit 1; fi
  cat t.$$ >> "$name.times"
}

for r in $(seq 1 "$rounds"); do
  measure dd dd if=plain.raw of=out.dd bs=4M
  measure encrypt ./cryptimg encrypt --quiet -d key --pbkdf-force-iterations 1000 plain.raw out.enc
  measure decrypt ./cryptimg decrypt --quiet -d key enc.luks out.dec
  measure qemu-encrypt qemu-img convert $S -f raw -O luks -o "$L" plain.raw out.qenc
  measure qemu-decrypt qemu-img convert $S --image-opts "driver=luks,key-secret=sec0,file.filename=$dir/enc.luks" -O raw out.qdec
  measure xts-encrypt ./cryptimg encrypt --quiet -d key --pbkdf-force-iterations 1000 $X plain.raw out.xenc
  measure xts-decrypt ./cryptimg decrypt --quiet -d key xts.luks out.xdec
  measure qemu-xts-encrypt qemu-img convert $S -f raw -O luks -o "$LX" plain.raw out.qxenc
  measure qemu-xts-decrypt qemu-img convert $S --image-opts "driver=luks,key-secret=sec0,file.filename=$dir/xts.luks" -O raw out.qxdec
  measure purego-j1 ./cryptimg-purego encrypt --quiet -j 1 -d key --pbkdf-force-iterations 1000 plain.raw out.p1
  measure purego-j2 ./cryptimg-purego encrypt --quiet -j 2 -d key --pbkdf-force-iterations 1000 plain.raw out.p2
  measure luks2-encrypt ./cryptimg encrypt --quiet -d key $L2 plain.raw out.l2enc
  measure luks2-decrypt ./cryptimg decrypt --quiet -d key l2.luks out.l2dec
done
rm -f out.*

median() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
col() { awk -v c="$2" '{print $c}' "$1.times" | median; }
gib=$(awk -v m="$size_mib" 'BEGIN{print m/1024}')
per() { awk -v v="$1" -v g="$gib" 'BEGIN{printf "%.3f", v/g}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
# paired A B: the wall-time ratio A/B of each round (the two jobs ran minutes
# apart at most, so drift in the machine's speed cancels), as
# "median (min–max)". The machine is shared; this is the robust figure.
paired() {
  paste -d' ' <(awk '{print $1}' "$1.times") <(awk '{print $1}' "$2.times") |
    awk '{printf "%.4f\n", $1/$2}' | sort -n |
    awk '{a[NR]=$1} END {m=(NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2); printf "%.2f (%.2f–%.2f)", m, a[1], a[NR]}'
}

dd_wall=$([ -f dd.times ] && col dd 1 || echo 1)
echo "# end-to-end, ${size_mib} MiB random raw image on tmpfs, median of $rounds rounds, $(nproc) CPUs"
echo
echo "| job | wall s | wall s/GiB | user s/GiB | sys s/GiB | wall ÷ dd | peak RSS MiB |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for n in dd encrypt decrypt qemu-encrypt qemu-decrypt xts-encrypt xts-decrypt qemu-xts-encrypt qemu-xts-decrypt purego-j1 purego-j2 luks2-encrypt luks2-decrypt; do
  [ -f $n.times ] || continue
  w=$(col $n 1); u=$(col $n 2); s=$(col $n 3); m=$(col $n 4)
  echo "| $n | $w | $(per "$w") | $(per "$u") | $(per "$s") | $(ratio "$w" "$dd_wall") | $((m / 1024)) |"
done
echo
echo "Ratios of medians, then in brackets the median (min–max) of the per-round ratios:"
echo
[ -f encrypt.times ] && [ -f dd.times ] && echo "- cryptimg encrypt ÷ dd: $(ratio "$(col encrypt 1)" "$dd_wall") [$(paired encrypt dd)]"
[ -f decrypt.times ] && [ -f dd.times ] && echo "- cryptimg decrypt ÷ dd: $(ratio "$(col decrypt 1)" "$dd_wall") [$(paired decrypt dd)]"
[ -f qemu-encrypt.times ] && [ -f encrypt.times ] && echo "- qemu-img encrypt ÷ cryptimg encrypt: $(ratio "$(col qemu-encrypt 1)" "$(col encrypt 1)")× [$(paired qemu-encrypt encrypt)]"
[ -f qemu-decrypt.times ] && [ -f decrypt.times ] && echo "- qemu-img decrypt ÷ cryptimg decrypt: $(ratio "$(col qemu-decrypt 1)" "$(col decrypt 1)")× [$(paired qemu-decrypt decrypt)]"
[ -f xts-encrypt.times ] && [ -f dd.times ] && echo "- cryptimg xts encrypt ÷ dd: $(ratio "$(col xts-encrypt 1)" "$dd_wall") [$(paired xts-encrypt dd)]"
[ -f xts-decrypt.times ] && [ -f dd.times ] && echo "- cryptimg xts decrypt ÷ dd: $(ratio "$(col xts-decrypt 1)" "$dd_wall") [$(paired xts-decrypt dd)]"
[ -f qemu-xts-encrypt.times ] && [ -f xts-encrypt.times ] && echo "- qemu-img xts encrypt ÷ cryptimg xts encrypt: $(ratio "$(col qemu-xts-encrypt 1)" "$(col xts-encrypt 1)")× [$(paired qemu-xts-encrypt xts-encrypt)]"
[ -f qemu-xts-decrypt.times ] && [ -f xts-decrypt.times ] && echo "- qemu-img xts decrypt ÷ cryptimg xts decrypt: $(ratio "$(col qemu-xts-decrypt 1)" "$(col xts-decrypt 1)")× [$(paired qemu-xts-decrypt xts-decrypt)]"
[ -f purego-j1.times ] && [ -f purego-j2.times ] && echo "- purego --jobs 1 ÷ --jobs 2: $(ratio "$(col purego-j1 1)" "$(col purego-j2 1)")× [$(paired purego-j1 purego-j2)]"
[ -f luks2-encrypt.times ] && [ -f dd.times ] && echo "- cryptimg LUKS2 encrypt ÷ dd: $(ratio "$(col luks2-encrypt 1)" "$dd_wall") [$(paired luks2-encrypt dd)]"
[ -f luks2-decrypt.times ] && [ -f dd.times ] && echo "- cryptimg LUKS2 decrypt ÷ dd: $(ratio "$(col luks2-decrypt 1)" "$dd_wall") [$(paired luks2-decrypt dd)]"
[ -n "${BENCH_JOBS:-}" ] && exit 0 # the RSS figures below belong to a full run

# Peak RSS for a 4 GiB image at the default --jobs: dense (the random image
# four times over, so every byte is read and written), then sparse (holes
# are skipped, a different path).
rm -f enc.luks xts.luks
for _ in 1 2 3 4; do cat plain.raw; done > big.raw
/usr/bin/time -f '%M' -o t.$$ ./cryptimg encrypt --quiet -d key --pbkdf-force-iterations 1000 big.raw big.luks
echo "- peak RSS encrypting a dense 4 GiB image (default --jobs): $(( $(cat t.$$) / 1024 )) MiB"
rm -f big.raw
/usr/bin/time -f '%M' -o t.$$ ./cryptimg decrypt --quiet -d key big.luks big.out
echo "- peak RSS decrypting it: $(( $(cat t.$$) / 1024 )) MiB"
rm -f big.luks big.out
truncate -s 4G big.raw
/usr/bin/time -f '%M' -o t.$$ ./cryptimg encrypt --quiet -d key --pbkdf-force-iterations 1000 big.raw big.luks
echo "- peak RSS encrypting a sparse 4 GiB image: $(( $(cat t.$$) / 1024 )) MiB"
