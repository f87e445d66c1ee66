package main

import (
	"fmt"
	"time"

	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/pflag"
)

// newKeyArg takes the new key file from a second positional argument, as
// cryptsetup's luksAddKey and luksChangeKey do.
func newKeyArg(k *keyOptions, args []string) error {
	if len(args) < 2 {
		return nil
	}
	if k.keyFile != "" {
		return usagef("give the new key file either as an argument or with --new-key-file, not both")
	}
	k.keyFile = args[1]
	return nil
}

func addNewKeyFlags(f *pflag.FlagSet, k *keyOptions) {
	k.newKey = true
	f.StringVar(&k.keyFile, "new-key-file", "", "read the new key from FILE as raw bytes (- for stdin)")
	// cryptsetup's spelling (luksAddKey --new-keyfile, cryptsetup 2.6),
	// beside its --new-keyfile-offset and --new-keyfile-size.
	f.StringVar(&k.keyFile, "new-keyfile", "", "alias of --new-key-file")
	f.MarkHidden("new-keyfile")
	f.Int64Var(&k.keyfileOffset, "new-keyfile-offset", 0, "skip this many bytes at the start of the new key file")
	f.Int64Var(&k.keyfileSize, "new-keyfile-size", 0, "read at most this many bytes of the new key file (0 = all)")
}

// forceIterationsUsage is the help of --pbkdf-force-iterations, whose
// minimum depends on the KDF, as cryptsetup's (lib/utils_pbkdf.c
// verify_pbkdf_params with the limits of crypt_pbkdf_get_limits).
var forceIterationsUsage = fmt.Sprintf("use exactly this cost instead of benchmarking: for %s (LUKS1, or --pbkdf %[1]s) the iterations, at least %d; for argon2 (LUKS2's default) the passes over --pbkdf-memory, at least %d",
	header.PBKDF2, header.MinCost(header.PBKDF2), header.MinCost(header.Argon2id))

// pbkdfOptions are the cost flags of a new key slot.
type pbkdfOptions struct {
	iterTime        int
	forceIterations uint32
	pbkdf           string
	memory          uint32
	parallel        uint32
}

func (p *pbkdfOptions) addFlags(f *pflag.FlagSet) {
	f.IntVarP(&p.iterTime, "iter-time", "i", int(header.DefaultIterTime.Milliseconds()), "KDF time for the new key slot, in milliseconds")
	f.Uint32Var(&p.forceIterations, "pbkdf-force-iterations", 0, forceIterationsUsage)
	f.StringVar(&p.pbkdf, "pbkdf", "", pbkdfUsage)
	f.Uint32Var(&p.memory, "pbkdf-memory", 0, pbkdfMemoryUsage)
	f.Uint32Var(&p.parallel, "pbkdf-parallel", 0, pbkdfParallelUsage)
}

// slotOptions checks the flags that need no header; the header checks the
// rest (the KDF its version has, and the cost's minimum).
func (p pbkdfOptions) slotOptions(slot int) (image.SlotOptions, error) {
	if p.iterTime <= 0 {
		return image.SlotOptions{}, usagef("--iter-time must be positive")
	}
	if err := checkPBKDF(p.pbkdf); err != nil {
		return image.SlotOptions{}, err
	}
	return image.SlotOptions{Slot: slot, IterTime: time.Duration(p.iterTime) * time.Millisecond, ForceIterations: p.forceIterations,
		PBKDF: p.pbkdf, PBKDFMemory: p.memory, PBKDFParallel: p.parallel}, nil
}

// checkKeySources refuses two keys read from stdin.
func checkKeySources(a, b keyOptions) error {
	if a.keyFile == "-" && b.keyFile == "-" {
		return usagef("only one key can be read from stdin")
	}
	return nil
}
