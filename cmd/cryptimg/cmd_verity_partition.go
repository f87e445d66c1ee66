package main

import (
	"crypto"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

// verityPartitionOptions are verity format's flags for GPT disk images.
type verityPartitionOptions struct {
	data, hash      int
	hashType        string
	privateKey, crt string
	grow            bool
}

const verityPartitionHelp = `
With --partition N, IMAGE is a raw GPT disk image: the tree covers its
partition N and goes, after a superblock at the partition's start, into a
hash partition, as systemd-repart's Verity=data and Verity=hash make them:
the hash partition gets the root-verity or usr-verity type of N's
architecture (--hash-type for a partition of any other type) and the
read-only flag; N's UUID becomes the root hash's first 128 bits and the
hash partition's its last 128 bits, so that systemd (roothash=, usrhash=,
systemd-dissect --root-hash) finds both. --hash-partition M writes into the
existing partition M; without it a new partition is added in the first free
gap that holds the tree (aligned to 1 MiB), or with --grow, where no gap
does, after the end of the image, which grows. With --private-key and
--certificate (PEM; RSA or ECDSA) a 16 KiB root-verity-sig (usr-verity-sig)
partition is added too, holding systemd's JSON with the PKCS#7 signature
of the root hash. The tree (and the signature) are written and synced
before the partition table, both of whose copies are then rewritten.
`

func addVerityPartitionFlags(cmd *cobra.Command, o *verityPartitionOptions) {
	f := cmd.Flags()
	f.IntVar(&o.data, "partition", 0, "build the tree of GPT partition N of IMAGE into a verity partition")
	f.IntVar(&o.hash, "hash-partition", 0, "with --partition: write the tree into the existing partition M (default: add one)")
	f.StringVar(&o.hashType, "hash-type", "", "with --partition: the hash partition's type GUID (default: the root-verity or usr-verity type of N's)")
	f.BoolVar(&o.grow, "grow", false, "with --partition: where no free gap holds a new partition, grow the image and add it at the end")
	f.StringVar(&o.privateKey, "private-key", "", "with --partition: sign the root hash with this PEM private key into a signature partition")
	f.StringVar(&o.crt, "certificate", "", "with --partition: the PEM certificate of --private-key, embedded in the signature")
}

// readSigner reads a PEM private key (PKCS#8, PKCS#1 or SEC 1) and a PEM
// certificate; the key file's bytes are cleared after parsing.
func readSigner(keyPath, certPath string) (crypto.Signer, *x509.Certificate, error) {
	if keyPath == "" || certPath == "" {
		return nil, nil, usagef("--private-key and --certificate go together")
	}
	cb, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	blk, _ := pem.Decode(cb)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, nil, fmt.Errorf("%s: not a PEM certificate", certPath)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certPath, err)
	}
	kb, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	defer clear(kb)
	kblk, _ := pem.Decode(kb)
	if kblk == nil {
		return nil, nil, fmt.Errorf("%s: not a PEM private key", keyPath)
	}
	defer clear(kblk.Bytes)
	var key any
	switch kblk.Type {
	case "PRIVATE KEY":
		key, err = x509.ParsePKCS8PrivateKey(kblk.Bytes)
	case "RSA PRIVATE KEY":
		key, err = x509.ParsePKCS1PrivateKey(kblk.Bytes)
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kblk.Bytes)
	default:
		return nil, nil, fmt.Errorf("%s: a PEM %q, not a private key", keyPath, kblk.Type)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, nil, fmt.Errorf("%s: %T cannot sign", keyPath, key)
	}
	return signer, cert, nil
}

// verityPartitionJSON is --json's output of verity format --partition.
type verityPartitionJSON struct {
	verityJSON
	DataPartition int    `json:"data_partition"`
	DataUUID      string `json:"data_uuid"`
	HashPartition int    `json:"hash_partition"`
	HashUUID      string `json:"hash_uuid"`
	HashType      string `json:"hash_type_guid"`
	HashStart     int64  `json:"hash_partition_start"`
	HashSize      int64  `json:"hash_partition_size"`
	NewPartition  bool   `json:"hash_partition_added"`
	SigPartition  int    `json:"signature_partition,omitempty"`
	SigType       string `json:"signature_type_guid,omitempty"`
	DiskSize      int64  `json:"disk_size,omitempty"`
}

func runVerityFormatPartition(cmd *cobra.Command, g *globalOptions, o *verityOptions, po *verityPartitionOptions, args []string) error {
	if len(args) != 1 {
		return usagef("--partition takes one IMAGE, the GPT disk image")
	}
	for _, name := range []string{"hash-offset", "no-superblock"} {
		if cmd.Flags().Changed(name) {
			return usagef("--%s does not go with --partition: the superblock is at the hash partition's start", name)
		}
	}
	if po.data <= 0 || cmd.Flags().Changed("hash-partition") && po.hash <= 0 {
		return usagef("partition numbers start at 1")
	}
	p, err := paramsFromFlags(cmd, o)
	if err != nil {
		return err
	}
	var signer crypto.Signer
	var cert *x509.Certificate
	if po.privateKey != "" || po.crt != "" {
		if signer, cert, err = readSigner(po.privateKey, po.crt); err != nil {
			return err
		}
	}
	path := args[0]
	f, err := openForWrite(path)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := image.FormatVerityPartition(cmd.Context(), f, image.VerityPartitionOptions{
		Data: po.data, Hash: po.hash, HashType: po.hashType, Params: p, Verity: verityRun(g),
		Signer: signer, Certificate: cert, Grow: po.grow,
	})
	if errors.Is(err, image.ErrNoSpace) && !po.grow {
		return fmt.Errorf("%s: %w (--grow adds it at the end of a grown image)", path, err)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if err := writeRootHashFile(o.rootHashFile, res.RootHash); err != nil {
		return err
	}
	if o.json {
		j := verityPartitionJSON{
			verityJSON:    newVerityJSON(fmt.Sprintf("%s:%d", path, res.Data), fmt.Sprintf("%s:%d", path, res.Hash), &res.Params, &res.Geometry, res.RootHash),
			DataPartition: res.Data, DataUUID: res.DataUUID,
			HashPartition: res.Hash, HashUUID: res.HashUUID, HashType: res.HashType,
			HashStart: res.HashStart, HashSize: res.HashSize, NewPartition: res.NewHash,
			SigPartition: res.Sig, SigType: res.SigType, DiskSize: res.DiskSize,
		}
		return json.NewEncoder(g.stdout).Encode(j)
	}
	if !g.quiet {
		printVerityHeader(g.stdout, fmt.Sprintf("%s partition %d", path, res.Hash), &res.Params, &res.Geometry, res.RootHash)
		fmt.Fprintf(g.stdout, "Data partition:  \t%d, UUID %s\n", res.Data, res.DataUUID)
		fmt.Fprintf(g.stdout, "Hash partition:  \t%d, UUID %s, type %s\n", res.Hash, res.HashUUID, res.HashType)
		if res.Sig != 0 {
			fmt.Fprintf(g.stdout, "Signature partition: \t%d, type %s\n", res.Sig, res.SigType)
		}
	}
	return nil
}

func runVerityVerifyPartition(cmd *cobra.Command, g *globalOptions, o *verityOptions, po *verityPartitionOptions, args []string) error {
	if len(args) > 2 {
		return usagef("--partition takes IMAGE and ROOTHASH")
	}
	for _, name := range []string{"hash", "data-block-size", "hash-block-size", "data-blocks", "salt", "format", "hash-offset", "no-superblock"} {
		if cmd.Flags().Changed(name) {
			return usagef("--%s does not go with --partition: the superblock at the hash partition's start holds it", name)
		}
	}
	if po.data <= 0 || cmd.Flags().Changed("hash-partition") && po.hash <= 0 {
		return usagef("partition numbers start at 1")
	}
	root, err := rootHashArg(o, args, 1)
	if err != nil {
		return err
	}
	path := args[0]
	f, err := openForRead(path)
	if err != nil {
		return err
	}
	defer f.Close()
	res, err := image.VerifyVerityPartition(cmd.Context(), f, root, po.data, po.hash, verityRun(g))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if o.json {
		j := verityPartitionJSON{
			verityJSON:    newVerityJSON(fmt.Sprintf("%s:%d", path, res.Data), fmt.Sprintf("%s:%d", path, res.Hash), &res.Params, &res.Geometry, res.RootHash),
			DataPartition: res.Data, DataUUID: res.DataUUID,
			HashPartition: res.Hash, HashUUID: res.HashUUID, HashType: res.HashType,
			HashStart: res.HashStart, HashSize: res.HashSize,
		}
		j.OK = true
		return json.NewEncoder(g.stdout).Encode(j)
	}
	return nil
}
