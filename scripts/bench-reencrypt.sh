#!/usr/bin/env bash
# bench-reencrypt.sh: cryptimg reencrypt against cryptimg encrypt and
# cryptsetup reencrypt (LUKS2, offline, on a file) on the same machine, in
# the same run, on tmpfs. Prints the median wall time of each and the ratios.
#
#   scripts/bench-reencrypt.sh            # 1 GiB, 5 runs each
#   SIZE_MIB=256 RUNS=3 scripts/bench-reencrypt.sh
#
# The runs are interleaved (encrypt, reencrypt, cryptsetup, encrypt, ...) so
# that load from other processes hits all three alike. Needs cryptsetup
# (run as root or with --disable-locks, which this script passes).
set -euo pipefail

SIZE_MIB=${SIZE_MIB:-1024}
RUNS=${RUNS:-5}
cd "$(dirname "$0")/.."
dir=$(mktemp -d /dev/shm/cryptimg-bench-reenc.XXXXXX)
trap 'rm -rf "$dir"' EXIT

go build -o "$dir/cryptimg" ./cmd/cryptimg
ci="$dir/cryptimg"
printf 'bench passphrase' >"$dir/key"
head -c "${SIZE_MIB}M" /dev/urandom >"$dir/plain.raw"

# Templates: a LUKS1 image for cryptimg, a LUKS2 one for cryptsetup whose
# payload has the same size (LUKS2 takes a 16 MiB header by default).
"$ci" encrypt --quiet --progress none -d "$dir/key" --pbkdf-force-iterations 1000 "$dir/plain.raw" "$dir/luks1.img"
head -c 16M /dev/urandom >"$dir/luks2.img"
cat "$dir/plain.raw" >>"$dir/luks2.img"
cryptsetup luksFormat --batch-mode --type luks2 --cipher aes-cbc-essiv:sha256 --sector-size 512 \
	--pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file "$dir/key" "$dir/luks2.img"

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

: >"$dir/t.encrypt"
: >"$dir/t.reencrypt"
: >"$dir/t.cryptsetup"
for i in $(seq "$RUNS"); do
	rm -f "$dir/out.img"
	t0=$(now)
	"$ci" encrypt --quiet --progress none -d "$dir/key" --pbkdf-force-iterations 1000 "$dir/plain.raw" "$dir/out.img"
	t1=$(now)
	echo "$t1 - $t0" | bc -l >>"$dir/t.encrypt"
	rm -f "$dir/out.img"

	cp "$dir/luks1.img" "$dir/work1.img"
	t0=$(now)
	"$ci" reencrypt --quiet --batch-mode --progress none -d "$dir/key" --pbkdf-force-iterations 1000 "$dir/work1.img"
	t1=$(now)
	echo "$t1 - $t0" | bc -l >>"$dir/t.reencrypt"
	rm -f "$dir/work1.img"

	cp "$dir/luks2.img" "$dir/work2.img"
	t0=$(now)
	cryptsetup reencrypt --batch-mode --force-offline-reencrypt --disable-locks \
		--pbkdf pbkdf2 --pbkdf-force-iterations 1000 --key-file "$dir/key" "$dir/work2.img" >/dev/null
	t1=$(now)
	echo "$t1 - $t0" | bc -l >>"$dir/t.cryptsetup"
	rm -f "$dir/work2.img"
done

enc=$(median <"$dir/t.encrypt")
re=$(median <"$dir/t.reencrypt")
cs=$(median <"$dir/t.cryptsetup")
rate() { echo "scale=0; $SIZE_MIB / $1" | bc -l; }
echo "image: ${SIZE_MIB} MiB on /dev/shm, ${RUNS} interleaved runs each, $(nproc) CPUs"
printf '%-28s %8.3f s  %6s MiB/s\n' "cryptimg encrypt" "$enc" "$(rate "$enc")"
printf '%-28s %8.3f s  %6s MiB/s\n' "cryptimg reencrypt" "$re" "$(rate "$re")"
printf '%-28s %8.3f s  %6s MiB/s\n' "cryptsetup reencrypt (LUKS2)" "$cs" "$(rate "$cs")"
printf 'reencrypt / encrypt throughput:              %.2f\n' "$(echo "$enc / $re" | bc -l)"
printf 'cryptimg / cryptsetup reencrypt throughput:  %.2f\n' "$(echo "$cs / $re" | bc -l)"
