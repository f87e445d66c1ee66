package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/cryptimg/cryptimg/image"
	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/spf13/cobra"
)

// verityOptions are the flags that describe a tree, as veritysetup's.
type verityOptions struct {
	hash          string
	dataBlockSize int
	hashBlockSize int
	dataBlocks    uint64
	salt          string
	uuid          string
	hashOffset    int64
	hashType      uint32
	noSuperblock  bool
	rootHashFile  string
	json          bool
}

func newVerityCommand(g *globalOptions) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "verity format|verify|dump",
		Short: "Build, check and show dm-verity hash trees",
		Long: `Build, check and show dm-verity hash trees in veritysetup's format, on
files, without root: a tree that "veritysetup open" (and the kernel's
dm-verity) accepts, byte for byte what "veritysetup format" writes for the
same salt and UUID.
` + exitStatusHelp,
		Example: `  cryptimg verity format root.img root.verity
  cryptimg verity verify root.img root.verity $(cat root.hash)`,
	}
	cmd.Args = cobra.NoArgs
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return cmd.Help() }
	cmd.AddCommand(newVerityFormatCommand(g), newVerityVerifyCommand(g), newVerityDumpCommand(g))
	return cmd
}

// verityRun is the library's options from the global flags: --jobs.
func verityRun(g *globalOptions) verity.Options {
	jobs := g.jobs
	if jobs == 0 {
		jobs = defaultJobs()
	}
	return verity.Options{Jobs: jobs}
}

// addTreeFlags adds the flags that give a tree's parameters.
func addTreeFlags(cmd *cobra.Command, o *verityOptions) {
	f := cmd.Flags()
	f.StringVar(&o.hash, "hash", verity.DefaultHash, "hash algorithm: sha1, sha224, sha256, sha384 or sha512")
	f.IntVar(&o.dataBlockSize, "data-block-size", verity.DefaultBlockSize, "data block size in bytes")
	f.IntVar(&o.hashBlockSize, "hash-block-size", verity.DefaultBlockSize, "hash block size in bytes")
	f.Uint64Var(&o.dataBlocks, "data-blocks", 0, "number of data blocks (default: all whole blocks of DATA)")
	f.StringVar(&o.salt, "salt", "", "salt in hex, - for none (default: 32 random bytes)")
	f.Int64Var(&o.hashOffset, "hash-offset", 0, "byte offset of the superblock (or with --no-superblock of the tree) in HASH")
	f.Uint32Var(&o.hashType, "format", 1, "hash type: 1 (normal) or 0 (original Chrome OS)")
	f.BoolVar(&o.noSuperblock, "no-superblock", false, "no superblock: every parameter is given on the command line")
	f.BoolVar(&o.json, "json", false, "print the parameters as JSON on stdout")
}

// paramsFromFlags builds a tree's parameters from the flags: veritysetup's
// defaults (a random salt) where a flag is not given.
func paramsFromFlags(cmd *cobra.Command, o *verityOptions) (verity.Params, error) {
	p, err := verity.NewParams(0)
	if err != nil {
		return p, err
	}
	p.Hash = o.hash
	p.HashType = o.hashType
	p.DataBlockSize = o.dataBlockSize
	p.HashBlockSize = o.hashBlockSize
	p.DataBlocks = o.dataBlocks
	p.HashOffset = o.hashOffset
	p.NoSuperblock = o.noSuperblock
	if cmd.Flags().Changed("salt") {
		if p.Salt, err = parseSalt(o.salt); err != nil {
			return p, err
		}
	}
	if o.uuid != "" {
		if p.UUID, err = verity.ParseUUID(o.uuid); err != nil {
			return p, usagef("--uuid: %w", err)
		}
	}
	// Checked as if with one data block: without --data-blocks the count
	// comes from the data.
	n := p.DataBlocks
	if n == 0 {
		p.DataBlocks = 1
	}
	err = p.Check()
	p.DataBlocks = n
	if err != nil {
		return p, usagef("%w", err)
	}
	return p, nil
}

func parseSalt(s string) ([]byte, error) {
	if s == "-" {
		return []byte{}, nil
	}
	b, err := hex.DecodeString(s)
	if err != nil {
		return nil, usagef("--salt %q is not hex (or - for none)", s)
	}
	return b, nil
}

// verityJSON is --json's output of verity format, verify and dump.
type verityJSON struct {
	MessageType    string `json:"message_type"`
	Data           string `json:"data,omitempty"`
	HashDevice     string `json:"hash_device"`
	HashType       uint32 `json:"hash_type"`
	Hash           string `json:"hash"`
	DataBlockSize  int    `json:"data_block_size"`
	HashBlockSize  int    `json:"hash_block_size"`
	DataBlocks     uint64 `json:"data_blocks"`
	HashBlocks     uint64 `json:"hash_blocks"`
	Salt           string `json:"salt"`
	UUID           string `json:"uuid,omitempty"`
	Superblock     bool   `json:"superblock"`
	HashOffset     int64  `json:"hash_offset"`
	HashStartBlock uint64 `json:"hash_start_block"`
	HashDeviceSize int64  `json:"hash_device_size"`
	RootHash       string `json:"root_hash,omitempty"`
	OK             bool   `json:"ok,omitempty"`
}

func newVerityJSON(data, hashPath string, p *verity.Params, g *verity.Geometry, root []byte) verityJSON {
	j := verityJSON{
		MessageType:    "verity",
		Data:           data,
		HashDevice:     hashPath,
		HashType:       p.HashType,
		Hash:           p.Hash,
		DataBlockSize:  p.DataBlockSize,
		HashBlockSize:  p.HashBlockSize,
		DataBlocks:     p.DataBlocks,
		HashBlocks:     g.Blocks(),
		Salt:           hex.EncodeToString(p.Salt),
		Superblock:     !p.NoSuperblock,
		HashOffset:     p.HashOffset,
		HashStartBlock: g.Start,
		HashDeviceSize: g.End(p.HashBlockSize),
		RootHash:       hex.EncodeToString(root),
	}
	if !p.NoSuperblock {
		j.UUID = verity.FormatUUID(p.UUID)
	}
	return j
}

// printVerityHeader prints what veritysetup 2.6.1 prints for format and
// dump (lib/verity/verity.c, VERITY_dump): the hash device size only at
// offset 0, the root hash only when it is known.
func printVerityHeader(w io.Writer, hashPath string, p *verity.Params, g *verity.Geometry, root []byte) {
	uuid := ""
	if !p.NoSuperblock {
		uuid = verity.FormatUUID(p.UUID)
	}
	salt := "-"
	if len(p.Salt) > 0 {
		salt = hex.EncodeToString(p.Salt)
	}
	fmt.Fprintf(w, "VERITY header information for %s\n", hashPath)
	fmt.Fprintf(w, "UUID:            \t%s\n", uuid)
	fmt.Fprintf(w, "Hash type:       \t%d\n", p.HashType)
	fmt.Fprintf(w, "Data blocks:     \t%d\n", p.DataBlocks)
	fmt.Fprintf(w, "Data block size: \t%d\n", p.DataBlockSize)
	fmt.Fprintf(w, "Hash blocks:     \t%d\n", g.Blocks())
	fmt.Fprintf(w, "Hash block size: \t%d\n", p.HashBlockSize)
	fmt.Fprintf(w, "Hash algorithm:  \t%s\n", p.Hash)
	fmt.Fprintf(w, "Salt:            \t%s\n", salt)
	if root != nil {
		fmt.Fprintf(w, "Root hash:      \t%x\n", root)
	}
	if p.HashOffset == 0 {
		fmt.Fprintf(w, "Hash device size: \t%d [bytes]\n", g.End(p.HashBlockSize))
	}
}

// openVerityFiles opens DATA and HASH under the locks of the command:
// shared to read, exclusive where the tree is written. One file given
// twice is opened once. A HASH that does not exist is created (write
// only) as a temporary file, renamed by its Commit.
func openVerityFiles(dataPath, hashPath string, write bool) (data *os.File, hash *os.File, out *image.Output, err error) {
	open := openForRead
	if write {
		open = openForWrite
	}
	if image.SameFile(dataPath, hashPath) {
		f, err := open(dataPath)
		return f, f, nil, err
	}
	if data, err = openForRead(dataPath); err != nil {
		return nil, nil, nil, err
	}
	if _, serr := os.Stat(hashPath); write && os.IsNotExist(serr) {
		out, err = image.CreateOutput(hashPath, false)
		if err != nil {
			data.Close()
			return nil, nil, nil, err
		}
		return data, out.File, out, nil
	}
	if hash, err = open(hashPath); err != nil {
		data.Close()
		return nil, nil, nil, err
	}
	return data, hash, nil, nil
}

func statSize(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
