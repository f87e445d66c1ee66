package image

import (
	"context"
	"crypto"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cryptimg/cryptimg/image/qcow2"
	"github.com/cryptimg/cryptimg/image/verity"
	"github.com/diskfs/go-diskfs/partition/gpt"
	"github.com/google/uuid"
)

// dm-verity partitions as systemd-repart's Verity=data/hash makes them
// (systemd src/partition/repart.c, repart.d(5) of systemd 252; the
// Discoverable Partitions Specification of the UAPI group):
//   - the hash partition holds a veritysetup superblock at its byte 0 and
//     the tree after it (systemd-veritysetup 252 reads the superblock);
//   - its type is the root-verity or usr-verity type of the data
//     partition's architecture;
//   - the data partition's UUID is the root hash's first 128 bits and the
//     hash partition's its last 128 bits, in UUID text order (the first 32
//     hex digits split 8-4-4-4-12), stored in the GPT entry like any GUID;
//   - the hash partition is marked read-only (GPT attribute bit 60), as the
//     specification recommends and repart does.

// discoverable is one architecture's partition types of the Discoverable
// Partitions Specification: the data type and its verity and verity
// signature types, as systemd 252 (src/shared/gpt.c, systemd-id128 show)
// lists them (without its host-dependent aliases "native" and
// "secondary").
type discoverable struct {
	name, data, verity, sig string
}

var discoverableTypes = []discoverable{
	{"root-alpha", "6523f8ae-3eb1-4e2a-a05a-18b695ae656f", "fc56d9e9-e6e5-4c06-be32-e74407ce09a5", "d46495b7-a053-414f-80f7-700c99921ef8"},
	{"root-arc", "d27f46ed-2919-4cb8-bd25-9531f3c16534", "24b2d975-0f97-4521-afa1-cd531e421b8d", "143a70ba-cbd3-4f06-919f-6c05683a78bc"},
	{"root-arm", "69dad710-2ce4-4e3c-b16c-21a1d49abed3", "7386cdf2-203c-47a9-a498-f2ecce45a2d6", "42b0455f-eb11-491d-98d3-56145ba9d037"},
	{"root-arm64", "b921b045-1df0-41c3-af44-4c6f280d3fae", "df3300ce-d69f-4c92-978c-9bfb0f38d820", "6db69de6-29f4-4758-a7a5-962190f00ce3"},
	{"root-ia64", "993d8d3d-f80e-4225-855a-9daf8ed7ea97", "86ed10d5-b607-45bb-8957-d350f23d0571", "e98b36ee-32ba-4882-9b12-0ce14655f46a"},
	{"root-loongarch64", "77055800-792c-4f94-b39a-98c91b762bb6", "f3393b22-e9af-4613-a948-9d3bfbd0c535", "5afb67eb-ecc8-4f85-ae8e-ac1e7c50e7d0"},
	{"root-mips", "e9434544-6e2c-47cc-bae2-12d6deafb44c", "7a430799-f711-4c7e-8e5b-1d685bd48607", "bba210a2-9c5d-45ee-9e87-ff2ccbd002d0"},
	{"root-mips-le", "37c58c8a-d913-4156-a25f-48b1b64e07f0", "d7d150d2-2a04-4a33-8f12-16651205ff7b", "c919cc1f-4456-4eff-918c-f75e94525ca5"},
	{"root-mips64", "d113af76-80ef-41b4-bdb6-0cff4d3d4a25", "579536f8-6a33-4055-a95a-df2d5e2c42a8", "43ce94d4-0f3d-4999-8250-b9deafd98e6e"},
	{"root-mips64-le", "700bda43-7a34-4507-b179-eeb93d7a7ca3", "16b417f8-3e06-4f57-8dd2-9b5232f41aa6", "904e58ef-5c65-4a31-9c57-6af5fc7c5de7"},
	{"root-parisc", "1aacdb3b-5444-4138-bd9e-e5c2239b2346", "d212a430-fbc5-49f9-a983-a7feef2b8d0e", "15de6170-65d3-431c-916e-b0dcd8393f25"},
	{"root-ppc", "1de3f1ef-fa98-47b5-8dcd-4a860a654d78", "98cfe649-1588-46dc-b2f0-add147424925", "1b31b5aa-add9-463a-b2ed-bd467fc857e7"},
	{"root-ppc64", "912ade1d-a839-4913-8964-a10eee08fbd2", "9225a9a3-3c19-4d89-b4f6-eeff88f17631", "f5e2c20c-45b2-4ffa-bce9-2a60737e1aaf"},
	{"root-ppc64-le", "c31c45e6-3f39-412e-80fb-4809c4980599", "906bd944-4589-4aae-a4e4-dd983917446a", "d4a236e7-e873-4c07-bf1d-bf6cf7f1c3c6"},
	{"root-riscv32", "60d5a7fe-8e7d-435c-b714-3dd8162144e1", "ae0253be-1167-4007-ac68-43926c14c5de", "3a112a75-8729-4380-b4cf-764d79934448"},
	{"root-riscv64", "72ec70a6-cf74-40e6-bd49-4bda08e8f224", "b6ed5582-440b-4209-b8da-5ff7c419ea3d", "efe0f087-ea8d-4469-821a-4c2a96a8386a"},
	{"root-s390", "08a7acea-624c-4a20-91e8-6e0fa67d23f9", "7ac63b47-b25c-463b-8df8-b4a94e6c90e1", "3482388e-4254-435a-a241-766a065f9960"},
	{"root-s390x", "5eead9a9-fe09-4a1e-a1d7-520d00531306", "b325bfbe-c7be-4ab8-8357-139e652d2f6b", "c80187a5-73a3-491a-901a-017c3fa953e9"},
	{"root-tilegx", "c50cdd70-3862-4cc3-90e1-809a8c93ee2c", "966061ec-28e4-4b2e-b4a5-1f0a825a1d84", "b3671439-97b0-4a53-90f7-2d5a8f3ad47b"},
	{"root-x86", "44479540-f297-41b2-9af7-d131d5f0458a", "d13c5d3b-b5d1-422a-b29f-9454fdc89d76", "5996fc05-109c-48de-808b-23fa0830b676"},
	{"root-x86-64", "4f68bce3-e8cd-4db1-96e7-fbcaf984b709", "2c7357ed-ebd2-46d9-aec1-23d437ec2bf5", "41092b05-9fc8-4523-994f-2def0408b176"},
	{"usr-alpha", "e18cf08c-33ec-4c0d-8246-c6c6fb3da024", "8cce0d25-c0d0-4a44-bd87-46331bf1df67", "5c6e1c76-076a-457a-a0fe-f3b4cd21ce6e"},
	{"usr-arc", "7978a683-6316-4922-bbee-38bff5a2fecc", "fca0598c-d880-4591-8c16-4eda05c7347c", "94f9a9a1-9971-427a-a400-50cb297f0f35"},
	{"usr-arm", "7d0359a3-02b3-4f0a-865c-654403e70625", "c215d751-7bcd-4649-be90-6627490a4c05", "d7ff812f-37d1-4902-a810-d76ba57b975a"},
	{"usr-arm64", "b0e01050-ee5f-4390-949a-9101b17104e9", "6e11a4e7-fbca-4ded-b9e9-e1a512bb664e", "c23ce4ff-44bd-4b00-b2d4-b41b3419e02a"},
	{"usr-ia64", "4301d2a6-4e3b-4b2a-bb94-9e0b2c4225ea", "6a491e03-3be7-4545-8e38-83320e0ea880", "8de58bc2-2a43-460d-b14e-a76e4a17b47f"},
	{"usr-loongarch64", "e611c702-575c-4cbe-9a46-434fa0bf7e3f", "f46b2c26-59ae-48f0-9106-c50ed47f673d", "b024f315-d330-444c-8461-44bbde524e99"},
	{"usr-mips", "773b2abc-2a99-4398-8bf5-03baac40d02b", "6e5a1bc8-d223-49b7-bca8-37a5fcceb996", "97ae158d-f216-497b-8057-f7f905770f54"},
	{"usr-mips-le", "0f4868e9-9952-4706-979f-3ed3a473e947", "46b98d8d-b55c-4e8f-aab3-37fca7f80752", "3e23ca0b-a4bc-4b4e-8087-5ab6a26aa8a9"},
	{"usr-mips64", "57e13958-7331-4365-8e6e-35eeee17c61b", "81cf9d90-7458-4df4-8dcf-c8a3a404f09b", "05816ce2-dd40-4ac6-a61d-37d32dc1ba7d"},
	{"usr-mips64-le", "c97c1f32-ba06-40b4-9f22-236061b08aa8", "3c3d61fe-b5f3-414d-bb71-8739a694a4ef", "f2c2c7ee-adcc-4351-b5c6-ee9816b66e16"},
	{"usr-parisc", "dc4a4480-6917-4262-a4ec-db9384949f25", "5843d618-ec37-48d7-9f12-cea8e08768b2", "450dd7d1-3224-45ec-9cf2-a43a346d71ee"},
	{"usr-ppc", "7d14fec5-cc71-415d-9d6c-06bf0b3c3eaf", "df765d00-270e-49e5-bc75-f47bb2118b09", "7007891d-d371-4a80-86a4-5cb875b9302e"},
	{"usr-ppc64", "2c9739e2-f068-46b3-9fd0-01c5a9afbcca", "bdb528a5-a259-475f-a87d-da53fa736a07", "0b888863-d7f8-4d9e-9766-239fce4d58af"},
	{"usr-ppc64-le", "15bb03af-77e7-4d4a-b12b-c0d084f7491c", "ee2b9983-21e8-4153-86d9-b6901a54d1ce", "c8bfbd1e-268e-4521-8bba-bf314c399557"},
	{"usr-riscv32", "b933fb22-5c3f-4f91-af90-e2bb0fa50702", "cb1ee4e3-8cd0-4136-a0a4-aa61a32e8730", "c3836a13-3137-45ba-b583-b16c50fe5eb4"},
	{"usr-riscv64", "beaec34b-8442-439b-a40b-984381ed097d", "8f1056be-9b05-47c4-81d6-be53128e5b54", "d2f9000a-7a18-453f-b5cd-4d32f77a7b32"},
	{"usr-s390", "cd0f869b-d0fb-4ca0-b141-9ea87cc78d66", "b663c618-e7bc-4d6d-90aa-11b756bb1797", "17440e4f-a8d0-467f-a46e-3912ae6ef2c5"},
	{"usr-s390x", "8a4f5770-50aa-4ed3-874a-99b710db6fea", "31741cc4-1a2a-4111-a581-e00b447d2d06", "3f324816-667b-46ae-86ee-9b0c0c6c11b4"},
	{"usr-tilegx", "55497029-c7c1-44cc-aa39-815ed1558630", "2fb4bf56-07fa-42da-8132-6b139f2026ae", "4ede75e2-6ccc-4cc8-b9c7-70334b087510"},
	{"usr-x86", "75250d76-8cc6-458e-bd66-bd47cc81a812", "8f461b0d-14ee-4e81-9aa9-049b6fb97abd", "974a71c0-de41-43c3-be5d-5c5ccd1ad2c0"},
	{"usr-x86-64", "8484680c-9521-48c6-9c11-b0720656f69e", "77ff5f63-e7b6-4633-acf4-1565b864c0e6", "e7bb33fb-06cf-4e81-8273-e543b413e2e2"},
}

// VerityTypes returns the discoverable partition types that go with a data
// partition of type typeGUID (a root or usr partition of some
// architecture): the name of the data type ("root-x86-64"), the verity
// type and the verity signature type. ok is false for any other type.
func VerityTypes(typeGUID string) (name, verityType, sigType string, ok bool) {
	for _, d := range discoverableTypes {
		if strings.EqualFold(d.data, typeGUID) {
			return d.name, d.verity, d.sig, true
		}
	}
	return "", "", "", false
}

// gptAttrReadOnly is the Discoverable Partitions Specification's read-only
// flag, bit 60 of the GPT entry's attributes.
const gptAttrReadOnly = 1 << 60

// ErrNoSpace reports a disk without free space for a new partition.
var ErrNoSpace = errors.New("no free space on the disk")

// VerityPartitionOptions configure FormatVerityPartition.
type VerityPartitionOptions struct {
	// Data is the 1-based GPT index of the partition the tree covers.
	Data int
	// Hash is the GPT index of an existing partition that receives the
	// superblock and the tree (what was in it is lost); 0 adds a new
	// partition in the first free gap that holds them, aligned to 1 MiB.
	Hash int
	// HashType is the hash partition's type GUID; empty means the
	// root-verity or usr-verity type that goes with the data partition's
	// type (an error for any other type).
	HashType string
	// HashName is a new hash partition's name; empty means the type's
	// name, as systemd-repart labels a partition by default
	// ("root-x86-64-verity"). An existing partition keeps its name.
	HashName string
	// Params are the tree's parameters. HashOffset and NoSuperblock must
	// be zero (systemd reads the superblock at the partition's start);
	// DataBlocks 0 means all whole blocks of the data partition.
	Params verity.Params
	// Grow: where no free gap holds a new partition, put it after the end
	// of the disk, which grows (1 MiB aligned) with the backup GPT moved to
	// its new end.
	Grow   bool
	Verity verity.Options
	// Signer and Certificate, when set, sign the root hash into a new
	// signature partition of the root-verity-sig or usr-verity-sig type
	// (SignRootHash, VeritySignatureContent), 16 KiB as systemd-repart
	// makes it, with a random UUID and the read-only flag.
	Signer      crypto.Signer
	Certificate *x509.Certificate
}

// VerityPartitionResult describes what FormatVerityPartition wrote.
type VerityPartitionResult struct {
	RootHash []byte
	Params   verity.Params
	Geometry verity.Geometry
	// Data and Hash are the partitions' GPT indexes, DataUUID and
	// HashUUID their new UUIDs (from the root hash), HashType the hash
	// partition's type GUID, all lower case.
	Data, Hash         int
	DataUUID, HashUUID string
	HashType           string
	// DataStart, HashStart and HashSize are byte offsets and sizes.
	DataStart, HashStart, HashSize int64
	// NewHash: the hash partition was added.
	NewHash bool
	// DiskSize is the image's size after the change (it grows with Grow).
	DiskSize int64
	// Sig is the signature partition's GPT index (0: none), SigStart its
	// byte offset, SigType its type GUID.
	Sig      int
	SigStart int64
	SigType  string
}

// RootHashUUIDs splits a root hash into the data and hash partitions'
// UUIDs as systemd does: the first and the last 16 bytes, in UUID text
// order. The root hash must be at least 16 bytes.
func RootHashUUIDs(root []byte) (data, hash string) {
	var d, h [16]byte
	copy(d[:], root[:16])
	copy(h[:], root[len(root)-16:])
	return verity.FormatUUID(d), verity.FormatUUID(h)
}

// gptLimits are a GPT header's first and last usable LBAs and the number
// of entries of its partition array (UEFI 2.10 §5.3.2, header bytes 40,
// 48 and 80).
func gptLimits(f *os.File) (first, last uint64, entries int, err error) {
	h := make([]byte, SectorSize)
	if _, err := f.ReadAt(h, SectorSize); err != nil {
		return 0, 0, 0, fmt.Errorf("failed to read the GPT header: %w", err)
	}
	return binary.LittleEndian.Uint64(h[40:48]), binary.LittleEndian.Uint64(h[48:56]), int(binary.LittleEndian.Uint32(h[80:84])), nil
}

// FormatVerityPartition builds the dm-verity tree of partition o.Data of
// the raw GPT disk image f into a hash partition, and gives both
// partitions the UUIDs the root hash sets (and the hash partition its
// type), as systemd-repart does. The hash partition is zeroed, then holds
// the superblock and the tree only. The tree goes to disk (and is synced)
// before the partition table changes; the table's update writes and syncs
// the backup copy, then the primary. f must be open read-write, and its
// caller holds it exclusively.
func FormatVerityPartition(ctx context.Context, f *os.File, o VerityPartitionOptions) (_ *VerityPartitionResult, retErr error) {
	p := o.Params
	if p.HashOffset != 0 || p.NoSuperblock {
		return nil, fmt.Errorf("%w: a verity partition holds its superblock at its start", verity.ErrInvalid)
	}
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	t, err := readRawGPT(f)
	if err != nil {
		return nil, err
	}
	if t.RecoveredFromBackup {
		return nil, fmt.Errorf("%w: the primary GPT is damaged (repair it first, e.g. sgdisk -e)", ErrNoTable)
	}
	if o.Hash == o.Data {
		return nil, fmt.Errorf("partition %d cannot hold its own tree", o.Data)
	}
	var have []int
	var data, hash *gpt.Partition
	for _, q := range t.Partitions {
		if q.Type == gpt.Unused {
			continue
		}
		have = append(have, q.Index)
		switch q.Index {
		case o.Data:
			data = q
		case o.Hash:
			hash = q
		}
	}
	if data == nil {
		return nil, noPartition(o.Data, have)
	}
	if o.Hash != 0 && hash == nil {
		return nil, noPartition(o.Hash, have)
	}
	res := &VerityPartitionResult{Data: o.Data, DataStart: int64(data.Start) * SectorSize}
	dataSize := int64(data.End-data.Start+1) * SectorSize
	if res.DataStart+dataSize > st.Size() {
		return nil, fmt.Errorf("partition %d ends past the end of the image", o.Data)
	}
	if err := p.SetDataSize(dataSize); err != nil {
		return nil, fmt.Errorf("partition %d: %w", o.Data, err)
	}
	g, err := p.Geometry()
	if err != nil {
		return nil, err
	}
	hashType := strings.ToLower(o.HashType)
	typeName, verityType, _, ok := VerityTypes(string(data.Type))
	if hashType == "" {
		if !ok {
			return nil, fmt.Errorf("partition %d has type %s, not a root or usr partition type of the Discoverable Partitions Specification: give the hash partition's type", o.Data, strings.ToLower(string(data.Type)))
		}
		hashType = verityType
	}
	if _, err := uuid.Parse(hashType); err != nil {
		return nil, fmt.Errorf("invalid partition type %q: %w", o.HashType, err)
	}
	need := g.End(p.HashBlockSize)
	first, last, entries, err := gptLimits(f)
	if err != nil {
		return nil, err
	}
	alloc := &allocator{parts: t.Partitions, first: first, last: last, grow: o.Grow, sectors: uint64(st.Size()) / SectorSize}
	if hash == nil {
		index := freeEntry(have, entries)
		if index == 0 {
			return nil, fmt.Errorf("%w: the GPT has no free entry", ErrNoSpace)
		}
		start, fits := alloc.place(uint64(roundUpAlign(need) / SectorSize))
		if !fits {
			return nil, fmt.Errorf("%w: no gap of %d bytes for the hash partition", ErrNoSpace, roundUpAlign(need))
		}
		name := o.HashName
		if name == "" {
			name = "verity"
			if ok && o.HashType == "" {
				name = typeName + "-verity"
			}
		}
		if len([]rune(name)) > 36 {
			return nil, fmt.Errorf("partition name %q is longer than 36 characters", name)
		}
		size := uint64(roundUpAlign(need))
		hash = &gpt.Partition{Index: index, Start: start, End: start + size/SectorSize - 1, Size: size, Name: name}
		alloc.parts = append(alloc.parts[:len(alloc.parts):len(alloc.parts)], hash)
		res.NewHash = true
	} else if hs := int64(hash.End-hash.Start+1) * SectorSize; hs < need {
		return nil, fmt.Errorf("partition %d (%d bytes) is too small for the superblock and the tree (%d bytes)", o.Hash, hs, need)
	}
	res.Hash, res.HashStart, res.HashSize = hash.Index, int64(hash.Start)*SectorSize, int64(hash.End-hash.Start+1)*SectorSize
	if !res.NewHash && res.HashStart+res.HashSize > st.Size() {
		return nil, fmt.Errorf("partition %d ends past the end of the image", hash.Index)
	}
	var sig *gpt.Partition
	if o.Signer != nil || o.Certificate != nil {
		if _, err := signerAlgorithm(o.Signer, o.Certificate); err != nil {
			return nil, err
		}
		_, _, sigType, ok := VerityTypes(string(data.Type))
		if !ok {
			return nil, fmt.Errorf("partition %d has type %s, not a root or usr partition type of the Discoverable Partitions Specification: it has no signature partition type", o.Data, strings.ToLower(string(data.Type)))
		}
		used := have
		if res.NewHash {
			used = append(used[:len(used):len(used)], hash.Index)
		}
		index := freeEntry(used, entries)
		start, fits := alloc.place(VeritySigSize / SectorSize)
		if index == 0 || !fits {
			return nil, fmt.Errorf("%w: no room for a %d-byte signature partition", ErrNoSpace, VeritySigSize)
		}
		sig = &gpt.Partition{Index: index, Start: start, End: start + VeritySigSize/SectorSize - 1, Size: VeritySigSize,
			Type: gpt.Type(strings.ToUpper(sigType)), Name: typeName + "-verity-sig", GUID: strings.ToUpper(uuid.NewString()),
			Attributes: gptAttrReadOnly}
		res.Sig, res.SigStart, res.SigType = index, int64(start)*SectorSize, sigType
	}

	// The tree first: until the table names it, a new partition's area is
	// free space.
	dr := io.NewSectionReader(f, res.DataStart, dataSize)
	hw := &window{f: f, off: res.HashStart, size: res.HashSize}
	res.DiskSize = st.Size()
	if alloc.end != 0 {
		// Room past the old end, and the backup GPT's 33 sectors (a
		// 128-entry array and the header) after it.
		res.DiskSize = roundUpAlign(int64(alloc.end+33) * SectorSize)
		if err := f.Truncate(res.DiskSize); err != nil {
			return nil, err
		}
		// Until the table names the new end, a failure takes the growth
		// back (the old table still describes the disk either way).
		done := false
		defer func() {
			if !done {
				f.Truncate(st.Size())
			}
		}()
		defer func() { done = retErr == nil }()
	}
	// Zeros first: veritysetup leaves the bytes between the superblock
	// and the tree, and after the tree, as they were; here they are the
	// partition's, and zero, so that the same data, salt and UUID give the
	// same partition.
	if err := zeroRange(ctx, f, res.HashStart, res.HashSize); err != nil {
		return nil, err
	}
	root, err := verity.Format(ctx, dr, hw, p, o.Verity)
	if err != nil {
		return nil, err
	}
	if sig != nil {
		der, err := SignRootHash(root, o.Signer, o.Certificate)
		if err != nil {
			return nil, err
		}
		b, err := VeritySignatureContent(root, der, o.Certificate)
		if err != nil {
			return nil, err
		}
		if len(b) > VeritySigSize {
			return nil, fmt.Errorf("the signature's JSON (%d bytes) does not fit in %d bytes", len(b), VeritySigSize)
		}
		if _, err := f.WriteAt(append(b, make([]byte, VeritySigSize-len(b))...), res.SigStart); err != nil {
			return nil, err
		}
	}
	if err := f.Sync(); err != nil {
		return nil, err
	}

	res.DataUUID, res.HashUUID = RootHashUUIDs(root)
	data.GUID = strings.ToUpper(res.DataUUID)
	hash.GUID = strings.ToUpper(res.HashUUID)
	hash.Type = gpt.Type(strings.ToUpper(hashType))
	hash.Attributes |= gptAttrReadOnly
	if res.NewHash {
		t.Partitions = append(t.Partitions, hash)
	}
	if sig != nil {
		t.Partitions = append(t.Partitions, sig)
	}
	// Sector 0 stays as it is but for a grown disk's size in the
	// protective MBR, written after the GPT.
	t.ProtectiveMBR = false
	if res.DiskSize != st.Size() {
		t.Resize(uint64(res.DiskSize))
	}
	if err := t.Write(f, res.DiskSize); err != nil {
		return nil, fmt.Errorf("failed to write the GPT: %w", err)
	}
	if res.DiskSize != st.Size() {
		if err := protectiveSize(f, res.DiskSize); err != nil {
			return nil, err
		}
	}
	res.RootHash, res.Params, res.Geometry, res.HashType = root, p, g, hashType
	return res, nil
}

// zeroRange writes zeros over n bytes of f from off.
func zeroRange(ctx context.Context, f *os.File, off, n int64) error {
	z := make([]byte, min(n, 1<<20))
	for done := int64(0); done < n; done += int64(len(z)) {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := f.WriteAt(z[:min(int64(len(z)), n-done)], off+done); err != nil {
			return err
		}
	}
	return nil
}

// readRawGPT reads the GPT of the raw disk image f.
func readRawGPT(f *os.File) (*gpt.Table, error) {
	if qcow2.IsQcow2(f) {
		return nil, fmt.Errorf("%w: a qcow2 image (verity partitions are made on raw images: convert it first)", ErrNoTable)
	}
	head := make([]byte, 2*SectorSize)
	if _, err := f.ReadAt(head, 0); err != nil || !claimsGPT(head) {
		return nil, fmt.Errorf("%w: not a GPT disk", ErrNoTable)
	}
	t, err := gpt.Read(f, SectorSize, SectorSize)
	if err != nil {
		return nil, fmt.Errorf("%w: no valid GPT: %w", ErrNoTable, err)
	}
	return t, nil
}

// allocator places new partitions: in the first free gap of the table's
// usable sectors, or with grow after the end of the disk and of every
// partition, each after the one before; end is then the first sector
// after them.
type allocator struct {
	parts            []*gpt.Partition
	first, last, end uint64
	sectors          uint64
	grow             bool
}

func (a *allocator) place(n uint64) (uint64, bool) {
	align := uint64(partAlign / SectorSize)
	if a.end == 0 {
		if s, ok := freeGap(a.parts, a.first, a.last, n); ok {
			return s, true
		}
		if !a.grow {
			return 0, false
		}
		a.end = a.sectors
		for _, q := range a.parts {
			a.end = max(a.end, q.End+1)
		}
	}
	s := (a.end + align - 1) / align * align
	a.end = s + n
	return s, true
}

// protectiveSize sets the size of the 0xEE entry of a protective MBR in
// sector 0 to a disk of size bytes (UEFI 2.10 §5.2.3: the disk's last LBA,
// at most 0xFFFFFFFF) and syncs; sector 0 without the MBR signature or
// without such an entry is left alone.
func protectiveSize(f *os.File, size int64) error {
	mbr := make([]byte, SectorSize)
	if _, err := f.ReadAt(mbr, 0); err != nil {
		return err
	}
	if !hasMBRSignature(mbr) {
		return nil
	}
	for i := range 4 {
		e := mbr[mbrEntries+mbrEntrySize*i : mbrEntries+mbrEntrySize*(i+1)]
		if e[4] != 0xee {
			continue
		}
		n := uint64(size/SectorSize) - uint64(binary.LittleEndian.Uint32(e[8:12]))
		binary.LittleEndian.PutUint32(e[12:16], uint32(min(n, 0xffffffff)))
		if _, err := f.WriteAt(e, int64(mbrEntries+mbrEntrySize*i)); err != nil {
			return err
		}
	}
	return f.Sync()
}

// freeEntry returns the lowest GPT entry index (1-based, at most entries)
// that used lacks, or 0.
func freeEntry(used []int, entries int) int {
	for i := 1; i <= entries; i++ {
		free := true
		for _, q := range used {
			if q == i {
				free = false
			}
		}
		if free {
			return i
		}
	}
	return 0
}

// freeGap finds the first 1 MiB-aligned run of n free sectors between
// first and last (inclusive) that no partition covers.
func freeGap(parts []*gpt.Partition, first, last, n uint64) (uint64, bool) {
	align := uint64(partAlign / SectorSize)
	start := (first + align - 1) / align * align
	for {
		moved := false
		for _, q := range parts {
			if q.Type == gpt.Unused {
				continue
			}
			if start <= q.End && q.Start < start+n {
				start = (q.End + 1 + align - 1) / align * align
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	return start, start+n-1 <= last
}

// window is the byte range [off, off+size) of f, as a file of its own.
type window struct {
	f         *os.File
	off, size int64
}

func (w *window) ReadAt(b []byte, off int64) (int, error) {
	if off >= w.size {
		return 0, io.EOF
	}
	short := false
	if int64(len(b)) > w.size-off {
		b, short = b[:w.size-off], true
	}
	n, err := w.f.ReadAt(b, w.off+off)
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

func (w *window) WriteAt(b []byte, off int64) (int, error) {
	if off < 0 || off+int64(len(b)) > w.size {
		return 0, fmt.Errorf("write of %d bytes at %d past the end of the %d-byte partition", len(b), off, w.size)
	}
	return w.f.WriteAt(b, w.off+off)
}

// VerifyVerityPartition checks partition data of the raw GPT disk image f
// and its tree against root, as verity.Verify does. With hash 0 the hash
// partition is the one whose UUID is root's last 128 bits, and the data
// partition's UUID must be root's first 128 bits, as systemd finds them;
// a partition that does not match is a verity.ErrCorrupt. With hash given
// the UUIDs are not looked at. The parameters come from the superblock at
// the hash partition's start.
func VerifyVerityPartition(ctx context.Context, f *os.File, root []byte, data, hash int, o verity.Options) (*VerityPartitionResult, error) {
	if len(root) < 16 {
		return nil, fmt.Errorf("%w: a root hash of %d bytes", verity.ErrInvalid, len(root))
	}
	t, err := readRawGPT(f)
	if err != nil {
		return nil, err
	}
	dataUUID, hashUUID := RootHashUUIDs(root)
	var have []int
	var dp, hp *gpt.Partition
	for _, q := range t.Partitions {
		if q.Type == gpt.Unused {
			continue
		}
		have = append(have, q.Index)
		if q.Index == data {
			dp = q
		}
		if hash != 0 && q.Index == hash || hash == 0 && strings.EqualFold(q.GUID, hashUUID) {
			hp = q
		}
	}
	if dp == nil {
		return nil, noPartition(data, have)
	}
	switch {
	case hp == nil && hash != 0:
		return nil, noPartition(hash, have)
	case hp == nil:
		return nil, fmt.Errorf("%w: no partition has the UUID %s (the root hash's last 128 bits)", verity.ErrCorrupt, hashUUID)
	case hash == 0 && !strings.EqualFold(dp.GUID, dataUUID):
		return nil, fmt.Errorf("%w: partition %d has the UUID %s, not %s (the root hash's first 128 bits)", verity.ErrCorrupt, data, strings.ToLower(dp.GUID), dataUUID)
	}
	res := &VerityPartitionResult{Data: dp.Index, Hash: hp.Index, DataUUID: strings.ToLower(dp.GUID), HashUUID: strings.ToLower(hp.GUID),
		HashType: strings.ToLower(string(hp.Type)), DataStart: int64(dp.Start) * SectorSize,
		HashStart: int64(hp.Start) * SectorSize, HashSize: int64(hp.End-hp.Start+1) * SectorSize, RootHash: root}
	dr := io.NewSectionReader(f, res.DataStart, int64(dp.End-dp.Start+1)*SectorSize)
	hr := &window{f: f, off: res.HashStart, size: res.HashSize}
	p, err := verity.ReadSuperblock(hr, 0)
	if err != nil {
		return nil, fmt.Errorf("partition %d: %w", hp.Index, err)
	}
	g, err := p.Geometry()
	if err != nil {
		return nil, fmt.Errorf("partition %d: %w", hp.Index, err)
	}
	res.Params, res.Geometry = p, g
	if err := verity.Verify(ctx, dr, hr, p, root, o); err != nil {
		var ce *verity.CorruptError
		var se *verity.SizeError
		if errors.As(err, &ce) && ce.Level < 0 || errors.As(err, &se) && se.Data {
			return res, fmt.Errorf("partition %d: %w", dp.Index, err)
		}
		return res, fmt.Errorf("partition %d: %w", hp.Index, err)
	}
	return res, nil
}
