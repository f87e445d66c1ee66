package image

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
)

// The signature partition of the Discoverable Partitions Specification
// (UAPI group; systemd 252 src/partition/repart.c, sign_verity_roothash and
// partition_format_verity_sig): compact JSON {"rootHash", "certificateFingerprint",
// "signature"} padded with NULs to a multiple of 4096 bytes, in a 16 KiB
// partition. "signature" is the base64 of a DER PKCS#7 SignedData (RFC 2315)
// over the root hash in lower-case hex, without newline: detached (no
// content), sha256, the signer's certificate embedded, no authenticated
// attributes, as OpenSSL's PKCS7_sign with PKCS7_DETACHED|PKCS7_NOATTR|
// PKCS7_BINARY makes it; the kernel's dm-verity root_hash_sig_key_desc
// checks the same signature over the same hex string.

// VeritySigSize is the size systemd-repart gives a signature partition
// (VERITY_SIG_SIZE).
const VeritySigSize = 16 << 10

var (
	oidData            = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 1}
	oidSignedData      = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 7, 2}
	oidSHA256          = asn1.ObjectIdentifier{2, 16, 840, 1, 101, 3, 4, 2, 1}
	oidRSAEncryption   = asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1}
	oidECDSAWithSHA256 = asn1.ObjectIdentifier{1, 2, 840, 10045, 4, 3, 2}
)

type pkcs7IssuerAndSerial struct {
	Issuer asn1.RawValue
	Serial *big.Int
}

type pkcs7SignerInfo struct {
	Version                   int
	IssuerAndSerial           pkcs7IssuerAndSerial
	DigestAlgorithm           pkix.AlgorithmIdentifier
	DigestEncryptionAlgorithm pkix.AlgorithmIdentifier
	EncryptedDigest           []byte
}

type pkcs7Detached struct {
	ContentType asn1.ObjectIdentifier
}

type pkcs7SignedData struct {
	Version          int
	DigestAlgorithms []pkix.AlgorithmIdentifier `asn1:"set"`
	ContentInfo      pkcs7Detached
	Certificates     asn1.RawValue
	SignerInfos      []pkcs7SignerInfo `asn1:"set"`
}

type pkcs7ContentInfo struct {
	ContentType asn1.ObjectIdentifier
	Content     asn1.RawValue
}

// ErrSignerKey reports a key that cannot make the signature: not RSA or
// ECDSA, or not the certificate's.
var ErrSignerKey = errors.New("unsupported signing key")

// SignRootHash returns the DER PKCS#7 signature systemd expects of a root
// hash: detached, over the lower-case hex of root, sha256, cert embedded,
// no authenticated attributes. key must be cert's RSA or ECDSA key.
func SignRootHash(root []byte, key crypto.Signer, cert *x509.Certificate) ([]byte, error) {
	alg, err := signerAlgorithm(key, cert)
	if err != nil {
		return nil, err
	}
	digest := sha256.Sum256([]byte(hex.EncodeToString(root)))
	sig, err := key.Sign(rand.Reader, digest[:], crypto.SHA256)
	if err != nil {
		return nil, err
	}
	sha := pkix.AlgorithmIdentifier{Algorithm: oidSHA256}
	sd, err := asn1.Marshal(pkcs7SignedData{
		Version:          1,
		DigestAlgorithms: []pkix.AlgorithmIdentifier{sha},
		ContentInfo:      pkcs7Detached{ContentType: oidData},
		Certificates:     asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: cert.Raw},
		SignerInfos: []pkcs7SignerInfo{{
			Version:                   1,
			IssuerAndSerial:           pkcs7IssuerAndSerial{Issuer: asn1.RawValue{FullBytes: cert.RawIssuer}, Serial: cert.SerialNumber},
			DigestAlgorithm:           sha,
			DigestEncryptionAlgorithm: alg,
			EncryptedDigest:           sig,
		}},
	})
	if err != nil {
		return nil, err
	}
	return asn1.Marshal(pkcs7ContentInfo{
		ContentType: oidSignedData,
		Content:     asn1.RawValue{Class: asn1.ClassContextSpecific, Tag: 0, IsCompound: true, Bytes: sd},
	})
}

// signerAlgorithm returns the PKCS#7 digestEncryptionAlgorithm of key
// (rsaEncryption, RFC 3370; ecdsa-with-SHA256, RFC 5753), and checks that
// key is cert's.
func signerAlgorithm(key crypto.Signer, cert *x509.Certificate) (pkix.AlgorithmIdentifier, error) {
	if key == nil || cert == nil {
		return pkix.AlgorithmIdentifier{}, fmt.Errorf("%w: a signature needs both a key and its certificate", ErrSignerKey)
	}
	var alg pkix.AlgorithmIdentifier
	switch pub := key.Public().(type) {
	case *rsa.PublicKey:
		if !pub.Equal(cert.PublicKey) {
			return alg, fmt.Errorf("%w: the key is not the certificate's", ErrSignerKey)
		}
		return pkix.AlgorithmIdentifier{Algorithm: oidRSAEncryption, Parameters: asn1.NullRawValue}, nil
	case *ecdsa.PublicKey:
		if !pub.Equal(cert.PublicKey) {
			return alg, fmt.Errorf("%w: the key is not the certificate's", ErrSignerKey)
		}
		return pkix.AlgorithmIdentifier{Algorithm: oidECDSAWithSHA256}, nil
	default:
		return alg, fmt.Errorf("%w: %T (RSA or ECDSA)", ErrSignerKey, pub)
	}
}

// veritySigJSON is the signature partition's JSON, in systemd-repart's
// key order.
type veritySigJSON struct {
	RootHash               string `json:"rootHash"`
	CertificateFingerprint string `json:"certificateFingerprint"`
	Signature              string `json:"signature"`
}

// VeritySignatureContent returns what a signature partition holds: the
// JSON, NUL-padded to a multiple of 4096 bytes.
func VeritySignatureContent(root, sig []byte, cert *x509.Certificate) ([]byte, error) {
	fp := sha256.Sum256(cert.Raw)
	j, err := json.Marshal(veritySigJSON{
		RootHash:               hex.EncodeToString(root),
		CertificateFingerprint: hex.EncodeToString(fp[:]),
		Signature:              base64.StdEncoding.EncodeToString(sig),
	})
	if err != nil {
		return nil, err
	}
	out := make([]byte, (len(j)+4095)/4096*4096)
	copy(out, j)
	return out, nil
}
