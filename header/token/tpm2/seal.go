// Package tpm2 seals a secret offline to a target TPM's storage root key and
// writes the systemd-tpm2 LUKS2 token that systemd 255 and later unseal with
// it, as systemd-cryptenroll --tpm2-device-key= does; it also unseals such
// tokens through a TPM (Unsealer).
//
// Format facts come from systemd 257: src/shared/tpm2-util.c (sealing,
// policy, blob and token JSON), src/cryptenroll/cryptenroll-tpm2.c
// (enroll_tpm2), src/shared/cryptsetup-tpm2.c and
// src/cryptsetup/cryptsetup-tokens/luks2-tpm2.c (unlock). The TPM
// duplication math is go-tpm's (TPM 2.0 Library Part 1, "Duplication").
package tpm2

import (
	"bytes"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/pbkdf2"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	tpm "github.com/google/go-tpm/tpm2"
)

// Type is the LUKS2 token type systemd-cryptenroll writes.
const Type = "systemd-tpm2"

// SRKHandle is the persistent handle of the shared storage root key that
// systemd 254 and later seal under (src/shared/tpm2-util.h
// TPM2_SRK_HANDLE), the default parent.
const SRKHandle = 0x81000001

// The keyslot of a TPM2 token uses the minimal KDF: its passphrase carries
// 256 bits of entropy (src/shared/cryptsetup-util.c
// cryptsetup_set_minimal_pbkdf, called from enroll_tpm2).
const (
	PBKDF      = "pbkdf2"
	Hash       = "sha512"
	Iterations = 1000
)

// secretSize is the size of the sealed secret: a SHA-256 digest's
// (tpm2_calculate_seal).
const secretSize = 32

// pinIterations is the PBKDF2-HMAC-SHA256 count that salts a PIN
// (tpm2-util.c PBKDF2_HMAC_SHA256_ITERATIONS).
const pinIterations = 10000

// A PCRValue is one literal PCR value of a policy.
type PCRValue struct {
	Index int
	Bank  string // sha1, sha256, sha384 or sha512
	Value []byte
}

// pcrNames are the PCR names systemd accepts for numbers
// (tpm2-util.c tpm2_pcr_index_table).
var pcrNames = []string{
	"platform-code", "platform-config", "external-code", "external-config",
	"boot-loader-code", "boot-loader-config", "host-platform", "secure-boot-policy",
	"kernel-initrd", "ima", "kernel-boot", "kernel-config", "sysexts",
	"shim-policy", "system-identity", "debug", "application-support",
}

// banks are the PCR banks by systemd's names and their TPM algorithms
// (tpm2-util.c tpm2_hash_alg_to_string).
var banks = map[string]tpm.TPMIAlgHash{
	"sha1":   tpm.TPMAlgSHA1,
	"sha256": tpm.TPMAlgSHA256,
	"sha384": tpm.TPMAlgSHA384,
	"sha512": tpm.TPMAlgSHA512,
}

// ErrPCRs reports a PCR list that cannot be sealed to offline.
var ErrPCRs = errors.New("bad PCR list")

// ParsePCRs reads systemd-cryptenroll's --tpm2-pcrs list of literal values
// (tpm2-util.c tpm2_pcr_values_from_string, tpm2_pcr_value_from_string):
// entries separated by "+" or ",", each INDEX:BANK=HEX, the index a number
// or one of systemd's PCR names, the hex optionally with 0x. Sealing offline
// needs every value ("Must provide all PCR values when using TPM2 device
// key", enroll_tpm2) and one bank ("Multiple PCR banks selected"). The
// result is sorted by index, as systemd sorts it (tpm2_sort_pcr_values).
func ParsePCRs(s string) ([]PCRValue, error) {
	var out []PCRValue
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == '+' || r == ',' }) {
		idx, rest, ok := strings.Cut(e, ":")
		n := slices.Index(pcrNames, idx)
		if n < 0 {
			v, err := strconv.ParseUint(idx, 10, 8)
			if err != nil || v >= 24 {
				return nil, fmt.Errorf("%w: %q: PCR index must be 0 to 23 or a PCR name", ErrPCRs, e)
			}
			n = int(v)
		}
		bank, hexv, hasValue := strings.Cut(rest, "=")
		if !ok || !hasValue {
			return nil, fmt.Errorf("%w: %q: offline sealing needs the PCR's value (INDEX:BANK=HEX)", ErrPCRs, e)
		}
		alg, known := banks[bank]
		if !known {
			return nil, fmt.Errorf("%w: %q: unknown PCR bank %q (sha1, sha256, sha384, sha512)", ErrPCRs, e, bank)
		}
		if len(hexv) > 2 && strings.EqualFold(hexv[:2], "0x") {
			hexv = hexv[2:]
		}
		v, err := hex.DecodeString(hexv)
		h, _ := alg.Hash()
		if err != nil || len(v) != h.Size() {
			return nil, fmt.Errorf("%w: %q: value must be %d hex bytes", ErrPCRs, e, h.Size())
		}
		out = append(out, PCRValue{Index: n, Bank: bank, Value: v})
	}
	slices.SortFunc(out, func(a, b PCRValue) int { return a.Index - b.Index })
	for i := range out {
		if out[i].Bank != out[0].Bank {
			return nil, fmt.Errorf("%w: multiple PCR banks selected", ErrPCRs)
		}
		if i > 0 && out[i].Index == out[i-1].Index {
			return nil, fmt.Errorf("%w: PCR %d given twice", ErrPCRs, out[i].Index)
		}
	}
	return out, nil
}

// pcrMask is the bitmap of the PCR indexes in v.
func pcrMask(v []PCRValue) uint32 {
	var m uint32
	for _, p := range v {
		m |= 1 << p.Index
	}
	return m
}

// selection is the TPML_PCR_SELECTION of mask in bank: one entry, 3 bytes of
// bitmap, PCR n in byte n/8, bit n%8 (tpm2_tpms_pcr_selection_from_mask).
func selection(bank tpm.TPMIAlgHash, mask uint32) tpm.TPMLPCRSelection {
	return tpm.TPMLPCRSelection{PCRSelections: []tpm.TPMSPCRSelection{{
		Hash:      bank,
		PCRSelect: []byte{byte(mask), byte(mask >> 8), byte(mask >> 16)},
	}}}
}

// ErrParent reports a --tpm2-device-key that is no usable storage key.
var ErrParent = errors.New("not a TPM storage key")

// ParseParent reads the public area of the key to seal to: the marshalled
// TPM2B_PUBLIC that systemd-analyze srk and tpm2_readpublic -o write, and
// that systemd-cryptenroll --tpm2-device-key= takes (tpm2-util.c
// tpm2_load_public_key_file: no trailing bytes), or a PEM public key (ECC
// P-256 or RSA-2048, as systemd-tpm2-setup writes next to it) of an SRK made
// from systemd's template (tpm2_get_srk_template), whose public area is
// that template with the key as its unique field.
func ParseParent(data []byte) (*tpm.TPMTPublic, error) {
	var pub *tpm.TPMTPublic
	if blk, _ := pem.Decode(data); blk != nil {
		p, err := srkFromPEM(blk)
		if err != nil {
			return nil, err
		}
		pub = p
	} else {
		b, err := tpm.Unmarshal[tpm.TPM2BPublic](data)
		if err != nil {
			return nil, fmt.Errorf("%w: not a TPM2B_PUBLIC: %v", ErrParent, err)
		}
		if !bytes.Equal(tpm.Marshal(b), data) {
			return nil, fmt.Errorf("%w: trailing bytes after the TPM2B_PUBLIC", ErrParent)
		}
		if pub, err = b.Contents(); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrParent, err)
		}
	}
	// systemd names keys with SHA-256 only (tpm2_calculate_pubkey_name), and
	// the parent must be a storage key with an AES-CFB symmetric wrapper.
	a := pub.ObjectAttributes
	if pub.NameAlg != tpm.TPMAlgSHA256 || !a.Restricted || !a.Decrypt || a.SignEncrypt {
		return nil, fmt.Errorf("%w: want a restricted decryption key with a SHA-256 name", ErrParent)
	}
	if _, err := tpm.ImportEncapsulationKey(pub); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrParent, err)
	}
	return pub, nil
}

// srkTemplate is systemd's SRK template for alg (tpm2_get_srk_template:
// TCG EK Credential Profile "L-2" ECC and "L-1" RSA with userWithAuth and
// noDA, without adminWithPolicy), unique left empty.
func srkTemplate(alg tpm.TPMAlgID) tpm.TPMTPublic {
	sym := tpm.TPMTSymDefObject{
		Algorithm: tpm.TPMAlgAES,
		KeyBits:   tpm.NewTPMUSymKeyBits(tpm.TPMAlgAES, tpm.TPMKeyBits(128)),
		Mode:      tpm.NewTPMUSymMode(tpm.TPMAlgAES, tpm.TPMAlgCFB),
	}
	t := tpm.TPMTPublic{
		Type:    alg,
		NameAlg: tpm.TPMAlgSHA256,
		ObjectAttributes: tpm.TPMAObject{
			FixedTPM: true, FixedParent: true, SensitiveDataOrigin: true,
			UserWithAuth: true, NoDA: true, Restricted: true, Decrypt: true,
		},
	}
	if alg == tpm.TPMAlgECC {
		t.Parameters = tpm.NewTPMUPublicParms(tpm.TPMAlgECC, &tpm.TPMSECCParms{
			Symmetric: sym,
			Scheme:    tpm.TPMTECCScheme{Scheme: tpm.TPMAlgNull},
			CurveID:   tpm.TPMECCNistP256,
			KDF:       tpm.TPMTKDFScheme{Scheme: tpm.TPMAlgNull},
		})
	} else {
		t.Parameters = tpm.NewTPMUPublicParms(tpm.TPMAlgRSA, &tpm.TPMSRSAParms{
			Symmetric: sym,
			Scheme:    tpm.TPMTRSAScheme{Scheme: tpm.TPMAlgNull},
			KeyBits:   2048,
		})
	}
	return t
}

func srkFromPEM(blk *pem.Block) (*tpm.TPMTPublic, error) {
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("%w: PEM: %v", ErrParent, err)
	}
	switch k := k.(type) {
	case *ecdsa.PublicKey:
		e, err := k.ECDH()
		if err != nil || e.Curve() != ecdh.P256() {
			return nil, fmt.Errorf("%w: PEM: an ECC SRK is on NIST P-256", ErrParent)
		}
		raw := e.Bytes()[1:]
		t := srkTemplate(tpm.TPMAlgECC)
		t.Unique = tpm.NewTPMUPublicID(tpm.TPMAlgECC, &tpm.TPMSECCPoint{
			X: tpm.TPM2BECCParameter{Buffer: raw[:32]},
			Y: tpm.TPM2BECCParameter{Buffer: raw[32:]},
		})
		return &t, nil
	case *rsa.PublicKey:
		if k.N.BitLen() != 2048 || k.E != 65537 {
			return nil, fmt.Errorf("%w: PEM: an RSA SRK has 2048 bits and exponent 65537", ErrParent)
		}
		t := srkTemplate(tpm.TPMAlgRSA)
		t.Unique = tpm.NewTPMUPublicID(tpm.TPMAlgRSA, &tpm.TPM2BPublicKeyRSA{Buffer: k.N.FillBytes(make([]byte, 256))})
		return &t, nil
	}
	return nil, fmt.Errorf("%w: PEM: not an ECC or RSA public key", ErrParent)
}

// Params says what to seal to.
type Params struct {
	// Parent is the public area of the target TPM's key (ParseParent).
	Parent *tpm.TPMTPublic
	// Handle is the parent's persistent handle on the target (0: SRKHandle,
	// systemd-cryptenroll's --tpm2-seal-key-handle).
	Handle uint32
	// PCRs are the literal PCR values of the policy, all in one bank (none:
	// no PCR policy).
	PCRs []PCRValue
	// PIN, when not nil, is also required to unseal (--tpm2-with-pin). It
	// is salted as systemd 253 and later do.
	PIN []byte
	// PublicKey, a PEM public key, makes the policy a signed PCR policy over
	// PublicKeyPCRs (--tpm2-public-key, --tpm2-public-key-pcrs).
	PublicKey     []byte
	PublicKeyPCRs []int
}

// A Sealed secret: the keyslot's passphrase and what the token holds.
type Sealed struct {
	// Passphrase is the keyslot's passphrase: standard base64, with
	// padding, of the sealed secret ("for compat with homed",
	// enroll_tpm2). The caller clears it.
	Passphrase []byte

	blob, policy, salt, srk, pubkey []byte
	pcrs, pubkeyPCRs                []int
	bank, primaryAlg                string
}

// Seal makes a random secret and seals it to p's parent key, offline, as
// systemd 257 tpm2_calculate_seal does: a KEYEDHASH object with no
// attributes set (TPM2_Import refuses fixedTPM and fixedParent), authPolicy
// the policy digest, wrapped for the parent with an outer duplication
// wrapper. rnd (nil: crypto/rand) gives the secret, the seed and the salt.
func Seal(rnd io.Reader, p *Params) (*Sealed, error) {
	if rnd == nil {
		rnd = rand.Reader
	}
	if p.Parent == nil {
		return nil, fmt.Errorf("%w: no parent key", ErrParent)
	}
	handle := p.Handle
	if handle == 0 {
		handle = SRKHandle
	}
	if handle>>24 != 0x81 {
		return nil, fmt.Errorf("%w: handle %#x is not persistent", ErrParent, handle)
	}
	s := &Sealed{pcrs: []int{}}
	var bank tpm.TPMIAlgHash
	if len(p.PCRs) > 0 {
		s.bank = p.PCRs[0].Bank
		bank = banks[s.bank]
		for _, v := range p.PCRs {
			s.pcrs = append(s.pcrs, v.Index)
		}
	}
	var signer *tpm.TPMTPublic
	if p.PublicKey != nil {
		var err error
		if signer, err = pcrSigner(p.PublicKey); err != nil {
			return nil, err
		}
		s.pubkey = p.PublicKey
		s.pubkeyPCRs = slices.Sorted(slices.Values(p.PublicKeyPCRs))
		// A signed policy alone leaves the bank unset offline, and the
		// token without tpm2-pcr-bank: systemd picks the best bank at
		// unlock (enroll_tpm2 asks the TPM only without a device key).
	}

	// The PIN: PBKDF2-HMAC-SHA256 with a random salt, base64, then the
	// object's authValue is SHA-256 of that without trailing zero bytes
	// (enroll_tpm2, tpm2_util_pbkdf2_hmac_sha256, tpm2_auth_value_from_pin,
	// tpm2_trim_auth_value).
	var auth []byte
	if p.PIN != nil {
		s.salt = make([]byte, 32)
		if _, err := io.ReadFull(rnd, s.salt); err != nil {
			return nil, err
		}
		auth = pinAuth(p.PIN, s.salt)
		defer clear(auth)
	}
	s.policy = policyDigest(signer, bank, p.PCRs, p.PIN != nil)

	key, err := tpm.ImportEncapsulationKey(p.Parent)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrParent, err)
	}
	secret := make([]byte, secretSize)
	defer clear(secret)
	seedValue := make([]byte, secretSize)
	defer clear(seedValue)
	if _, err := io.ReadFull(rnd, secret); err != nil {
		return nil, err
	}
	// systemd reuses the duplication seed as the object's seedValue; go-tpm
	// keeps that seed inside CreateDuplicate, and any random digest-sized
	// value serves (TPM 2.0 Part 1, "Sensitive Area": the obfuscation value).
	if _, err := io.ReadFull(rnd, seedValue); err != nil {
		return nil, err
	}
	// unique = H_nameAlg(seedValue || secret) (tpm2_calculate_seal_public).
	h, _ := p.Parent.NameAlg.Hash()
	uh := h.New()
	uh.Write(seedValue)
	uh.Write(secret)
	pub := tpm.TPMTPublic{
		Type:       tpm.TPMAlgKeyedHash,
		NameAlg:    p.Parent.NameAlg,
		AuthPolicy: tpm.TPM2BDigest{Buffer: s.policy},
		Parameters: tpm.NewTPMUPublicParms(tpm.TPMAlgKeyedHash, &tpm.TPMSKeyedHashParms{
			Scheme: tpm.TPMTKeyedHashScheme{Scheme: tpm.TPMAlgNull},
		}),
		Unique: tpm.NewTPMUPublicID(tpm.TPMAlgKeyedHash, &tpm.TPM2BDigest{Buffer: uh.Sum(nil)}),
	}
	name, err := tpm.ObjectName(&pub)
	if err != nil {
		return nil, err
	}
	sens := tpm.Marshal(tpm.TPMTSensitive{
		SensitiveType: tpm.TPMAlgKeyedHash,
		AuthValue:     tpm.TPM2BAuth{Buffer: auth},
		SeedValue:     tpm.TPM2BDigest{Buffer: seedValue},
		Sensitive:     tpm.NewTPMUSensitiveComposite(tpm.TPMAlgKeyedHash, &tpm.TPM2BSensitiveData{Buffer: secret}),
	})
	defer clear(sens)
	dup, seed, err := tpm.CreateDuplicate(rnd, key, name.Buffer, sens)
	if err != nil {
		return nil, err
	}
	// The blob: TPM2B_PRIVATE, TPM2B_PUBLIC, TPM2B_ENCRYPTED_SECRET; the
	// third part makes systemd TPM2_Import it under the parent first
	// (tpm2_marshal_blob, tpm2_unseal). go-tpm returns the first and third
	// without their sizes.
	s.blob = appendSized(nil, dup)
	s.blob = append(s.blob, tpm.Marshal(tpm.New2B(pub))...)
	s.blob = appendSized(s.blob, seed)

	// tpm2_srk: the parent as ESYS serializes a handle: TPM2_HANDLE,
	// TPM2B_NAME, u32 1 (IESYSC_KEY_RSRC), TPM2B_PUBLIC
	// (tpm2_calculate_serialize). Without it systemd imports under a
	// transient primary of the legacy template, and the import fails.
	pname, err := tpm.ObjectName(p.Parent)
	if err != nil {
		return nil, err
	}
	s.srk = binary.BigEndian.AppendUint32(nil, handle)
	s.srk = appendSized(s.srk, pname.Buffer)
	s.srk = binary.BigEndian.AppendUint32(s.srk, 1)
	s.srk = append(s.srk, tpm.Marshal(tpm.New2B(*p.Parent))...)
	// tpm2-primary-alg is the parent's type (enroll_tpm2: primary_alg =
	// device_key_public.publicArea.type; tpm2_asym_alg_to_string).
	if p.Parent.Type == tpm.TPMAlgECC {
		s.primaryAlg = "ecc"
	} else {
		s.primaryAlg = "rsa"
	}
	s.Passphrase = make([]byte, base64.StdEncoding.EncodedLen(len(secret)))
	base64.StdEncoding.Encode(s.Passphrase, secret)
	return s, nil
}

func appendSized(b, v []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
	return append(b, v...)
}

// pinAuth is the authValue of a salted PIN (see Seal).
func pinAuth(pin, salt []byte) []byte {
	k, err := pbkdf2.Key(sha256.New, string(pin), salt, pinIterations, 32)
	if err != nil {
		panic(err)
	}
	b := make([]byte, base64.StdEncoding.EncodedLen(len(k)))
	base64.StdEncoding.Encode(b, k)
	clear(k)
	a := sha256.Sum256(b)
	clear(b)
	out := bytes.TrimRight(a[:], "\x00")
	return append([]byte(nil), out...)
}

// TPM command codes that policy digests include (TPM 2.0 Part 2, TPM_CC).
const (
	ccPolicyAuthorize = 0x16A
	ccPolicyAuthValue = 0x16B
	ccPolicyPCR       = 0x17F
)

// policyDigest is the SHA-256 policy digest systemd computes and stores as
// tpm2-policy-hash (tpm2_calculate_sealing_policy): PolicyAuthorize for a
// signed policy, then PolicyPCR over the literal values, then PolicyAuthValue
// with a PIN, from 32 zero bytes.
func policyDigest(signer *tpm.TPMTPublic, bank tpm.TPMIAlgHash, pcrs []PCRValue, pin bool) []byte {
	d := make([]byte, sha256.Size)
	extend := func(parts ...[]byte) {
		h := sha256.New()
		h.Write(d)
		for _, p := range parts {
			h.Write(p)
		}
		d = h.Sum(d[:0])
	}
	u32 := func(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
	if signer != nil {
		// D = H(H(0 || CC || signer name) || policyRef), policyRef empty
		// (tpm2_calculate_policy_authorize).
		name, err := tpm.ObjectName(signer)
		if err != nil {
			panic(err)
		}
		clear(d)
		extend(u32(ccPolicyAuthorize), name.Buffer)
		extend()
	}
	if len(pcrs) > 0 {
		// D = H(D || CC || TPML_PCR_SELECTION || H(values in index order)),
		// the values hashed with SHA-256 in every bank
		// (tpm2_calculate_policy_pcr).
		vh := sha256.New()
		for _, v := range pcrs {
			vh.Write(v.Value)
		}
		extend(u32(ccPolicyPCR), tpm.Marshal(selection(bank, pcrMask(pcrs))), vh.Sum(nil))
	}
	if pin {
		extend(u32(ccPolicyAuthValue)) // tpm2_calculate_policy_auth_value
	}
	return d
}

// pcrSigner is the public area systemd makes of a PCR-signing PEM key, whose
// name PolicyAuthorize names (tpm2_tpm2b_public_from_openssl_pkey: nameAlg
// SHA-256, decrypt|sign|userWithAuth, no symmetric or scheme, an RSA
// exponent written out even when it is 65537).
func pcrSigner(pemBytes []byte) (*tpm.TPMTPublic, error) {
	blk, _ := pem.Decode(pemBytes)
	if blk == nil {
		return nil, errors.New("PCR public key: not PEM")
	}
	k, err := x509.ParsePKIXPublicKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("PCR public key: %v", err)
	}
	t := tpm.TPMTPublic{
		NameAlg:          tpm.TPMAlgSHA256,
		ObjectAttributes: tpm.TPMAObject{Decrypt: true, SignEncrypt: true, UserWithAuth: true},
	}
	switch k := k.(type) {
	case *rsa.PublicKey:
		n := k.N.Bytes()
		t.Type = tpm.TPMAlgRSA
		t.Parameters = tpm.NewTPMUPublicParms(tpm.TPMAlgRSA, &tpm.TPMSRSAParms{
			Symmetric: tpm.TPMTSymDefObject{Algorithm: tpm.TPMAlgNull},
			Scheme:    tpm.TPMTRSAScheme{Scheme: tpm.TPMAlgNull},
			KeyBits:   tpm.TPMKeyBits(8 * len(n)),
			Exponent:  uint32(k.E),
		})
		t.Unique = tpm.NewTPMUPublicID(tpm.TPMAlgRSA, &tpm.TPM2BPublicKeyRSA{Buffer: n})
	case *ecdsa.PublicKey:
		e, err := k.ECDH()
		if err != nil {
			return nil, fmt.Errorf("PCR public key: %v", err)
		}
		curves := map[ecdh.Curve]tpm.TPMECCCurve{ecdh.P256(): tpm.TPMECCNistP256, ecdh.P384(): tpm.TPMECCNistP384, ecdh.P521(): tpm.TPMECCNistP521}
		raw := e.Bytes()[1:]
		t.Type = tpm.TPMAlgECC
		t.Parameters = tpm.NewTPMUPublicParms(tpm.TPMAlgECC, &tpm.TPMSECCParms{
			Symmetric: tpm.TPMTSymDefObject{Algorithm: tpm.TPMAlgNull},
			Scheme:    tpm.TPMTECCScheme{Scheme: tpm.TPMAlgNull},
			CurveID:   curves[e.Curve()],
			KDF:       tpm.TPMTKDFScheme{Scheme: tpm.TPMAlgNull},
		})
		// systemd takes the coordinates as OpenSSL gives them (BN_num_bytes:
		// no leading zeros), so the name does too.
		t.Unique = tpm.NewTPMUPublicID(tpm.TPMAlgECC, &tpm.TPMSECCPoint{
			X: tpm.TPM2BECCParameter{Buffer: bytes.TrimLeft(raw[:len(raw)/2], "\x00")},
			Y: tpm.TPM2BECCParameter{Buffer: bytes.TrimLeft(raw[len(raw)/2:], "\x00")},
		})
	default:
		return nil, errors.New("PCR public key: not an RSA or ECC key")
	}
	return &t, nil
}

// tokenJSON is the token as systemd 257 writes it, fields in its order
// (tpm2_make_luks2_json). tpm2-pin is written only when true, the fields
// with "_" only when set; tpm2-pcr-bank is absent without PCRs.
type tokenJSON struct {
	Type       string   `json:"type"`
	Keyslots   []string `json:"keyslots"`
	Blob       string   `json:"tpm2-blob"`
	PCRs       []int    `json:"tpm2-pcrs"`
	Bank       string   `json:"tpm2-pcr-bank,omitempty"`
	PrimaryAlg string   `json:"tpm2-primary-alg,omitempty"`
	PolicyHash string   `json:"tpm2-policy-hash"`
	PIN        bool     `json:"tpm2-pin,omitempty"`
	PubkeyPCRs []int    `json:"tpm2_pubkey_pcrs,omitempty"`
	Pubkey     []byte   `json:"tpm2_pubkey,omitempty"`
	Salt       []byte   `json:"tpm2_salt,omitempty"`
	SRK        []byte   `json:"tpm2_srk,omitempty"`
}

// JSON is the token naming keyslot slot. Binary fields are standard base64
// with padding and the policy digest lowercase hex, as sd_json writes them.
func (s *Sealed) JSON(slot int) []byte {
	js, err := json.Marshal(tokenJSON{
		Type:       Type,
		Keyslots:   []string{strconv.Itoa(slot)},
		Blob:       base64.StdEncoding.EncodeToString(s.blob),
		PCRs:       s.pcrs,
		Bank:       s.bank,
		PrimaryAlg: s.primaryAlg,
		PolicyHash: fmt.Sprintf("%x", s.policy),
		PIN:        s.salt != nil,
		PubkeyPCRs: s.pubkeyPCRs,
		Pubkey:     s.pubkey,
		Salt:       s.salt,
		SRK:        s.srk,
	})
	if err != nil {
		panic(err)
	}
	return js
}

// ParsePCRIndexes reads a list of PCRs without values, numbers or systemd's
// names joined by "+" or "," (tpm2_parse_pcr_argument_to_mask), as
// --tpm2-public-key-pcrs takes them.
func ParsePCRIndexes(s string) ([]int, error) {
	var out []int
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == '+' || r == ',' }) {
		n := slices.Index(pcrNames, e)
		if n < 0 {
			v, err := strconv.ParseUint(e, 10, 8)
			if err != nil || v >= 24 {
				return nil, fmt.Errorf("%w: %q: PCR index must be 0 to 23 or a PCR name", ErrPCRs, e)
			}
			n = int(v)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}
