package clevis

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	_ "crypto/sha1" // SHA-1 thumbprints, which clevis still accepts
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	jose "github.com/go-jose/go-jose/v4"
)

// Tang is the tang pin of one server, from its saved advertisement.
type Tang struct {
	url  string
	jwks json.RawMessage // the advertisement's payload, {"keys":[...]}
	exc  jose.JSONWebKey // the exchange key (deriveKey)
	kid  string          // its RFC 7638 SHA-256 thumbprint
}

// advKey is what clevis reads of a key in an advertisement besides the
// key itself.
type advKey struct {
	Use    string   `json:"use"`
	KeyOps []string `json:"key_ops"`
}

// allows reports whether k may be used for op when permission is
// required, as `jose jwk use -r -u OP` decides (latchset/jose lib/jwk.c
// jose_jwk_prm): op is in key_ops, or use "sig" names verify and sign, use
// "enc" encrypt, decrypt, wrapKey and unwrapKey; deriveKey has no use.
func (k advKey) allows(op string) bool {
	if slices.Contains(k.KeyOps, op) {
		return true
	}
	switch k.Use {
	case "sig":
		return op == "verify" || op == "sign"
	case "enc":
		return op == "encrypt" || op == "decrypt" || op == "wrapKey" || op == "unwrapKey"
	}
	return false
}

// ErrAdvertisement reports a tang advertisement that is malformed or whose
// signature does not hold.
var ErrAdvertisement = errors.New("tang advertisement")

// advSigAlgs are the JWS algorithms an advertisement may be signed with
// (tangd-keygen makes ES512 keys).
var advSigAlgs = []jose.SignatureAlgorithm{jose.ES256, jose.ES384, jose.ES512, jose.EdDSA,
	jose.RS256, jose.RS384, jose.RS512, jose.PS256, jose.PS384, jose.PS512}

// NewTang checks a tang server's advertisement (the JWS its /adv serves)
// as clevis-encrypt-tang does with "adv" in its config: every key the
// advertisement allows to verify must verify its signature; with thp
// (not "" or "any"), one of them must have that thumbprint (SHA-256, or
// SHA-1). The exchange key is the first key allowed to deriveKey.
func NewTang(url string, adv []byte, thp string) (*Tang, error) {
	jws, err := jose.ParseSignedJSON(string(adv), advSigAlgs)
	if err != nil {
		return nil, fmt.Errorf("%w of %s: %v", ErrAdvertisement, url, err)
	}
	payload := jws.UnsafePayloadWithoutVerification()
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(payload, &set); err != nil || len(set.Keys) == 0 {
		return nil, fmt.Errorf("%w of %s: the payload is no key set", ErrAdvertisement, url)
	}
	t := &Tang{url: url}
	var verify []jose.JSONWebKey
	found := false
	for _, raw := range set.Keys {
		var k advKey
		if err := json.Unmarshal(raw, &k); err != nil {
			return nil, fmt.Errorf("%w of %s: %v", ErrAdvertisement, url, err)
		}
		if k.allows("verify") {
			var jwk jose.JSONWebKey
			if err := jwk.UnmarshalJSON(raw); err != nil {
				return nil, fmt.Errorf("%w of %s: signing key: %v", ErrAdvertisement, url, err)
			}
			verify = append(verify, jwk)
		}
		if !found && k.allows("deriveKey") {
			// key_ops and alg are dropped before the thumbprint and
			// the encryption (clevis-encrypt-tang); JSONWebKey keeps
			// neither key_ops nor, once cleared, alg.
			if err := t.exc.UnmarshalJSON(raw); err != nil {
				return nil, fmt.Errorf("%w of %s: exchange key: %v", ErrAdvertisement, url, err)
			}
			t.exc.Algorithm, t.exc.Use = "", ""
			found = true
		}
	}
	if len(verify) == 0 {
		return nil, fmt.Errorf("%w of %s: no signing key", ErrAdvertisement, url)
	}
	for _, k := range verify {
		if _, _, _, err := jws.VerifyMulti(k.Key); err != nil {
			return nil, fmt.Errorf("%w of %s: a signing key did not sign it: %v", ErrAdvertisement, url, err)
		}
	}
	if thp != "" && thp != "any" && !slices.ContainsFunc(verify, func(k jose.JSONWebKey) bool { return hasThumbprint(k, thp) }) {
		return nil, fmt.Errorf("%w of %s: trusted key %s did not sign it", ErrAdvertisement, url, thp)
	}
	if !found {
		return nil, fmt.Errorf("%w of %s: no exchange (deriveKey) key", ErrAdvertisement, url)
	}
	if _, ok := t.exc.Key.(*ecdsa.PublicKey); !ok {
		return nil, fmt.Errorf("%w of %s: the exchange key is not an EC public key", ErrAdvertisement, url)
	}
	if t.kid, err = thumbprint(t.exc, crypto.SHA256); err != nil {
		return nil, fmt.Errorf("%w of %s: %v", ErrAdvertisement, url, err)
	}
	var compact []byte
	if compact, err = compactJSON(payload); err != nil {
		return nil, fmt.Errorf("%w of %s: %v", ErrAdvertisement, url, err)
	}
	t.jwks = compact
	return t, nil
}

func compactJSON(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// thumbprint is the RFC 7638 thumbprint of k, base64url (clevis's "S256"
// and "S1").
func thumbprint(k jose.JSONWebKey, h crypto.Hash) (string, error) {
	b, err := k.Thumbprint(h)
	if err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// hasThumbprint reports whether thp is k's SHA-256 or SHA-1 thumbprint
// (CLEVIS_DEFAULT_THP_ALG and CLEVIS_ALTERNATIVE_THP_ALGS).
func hasThumbprint(k jose.JSONWebKey, thp string) bool {
	for _, h := range []crypto.Hash{crypto.SHA256, crypto.SHA1} {
		if s, err := thumbprint(k, h); err == nil && s == thp {
			return true
		}
	}
	return false
}

// Name is "tang".
func (t *Tang) Name() string { return "tang" }

// KeyID is the thumbprint of the exchange key, the JWE's "kid".
func (t *Tang) KeyID() string { return t.kid }

// tangClevis is the "clevis" member of a tang pin's protected header:
// {"pin":"tang","tang":{"adv":JWKS,"url":URL}} (clevis-encrypt-tang).
type tangClevis struct {
	Pin  string `json:"pin"`
	Tang struct {
		Adv json.RawMessage `json:"adv"`
		URL string          `json:"url"`
	} `json:"tang"`
}

// Encrypt encrypts plaintext to the server's exchange key as
// clevis-encrypt-tang does: ECDH-ES (direct key agreement, RFC 7518 4.6)
// with A256GCM, the protected header holding alg, enc, epk, kid and
// clevis.{pin,tang.{adv,url}}. rnd is unused: go-jose draws the ephemeral
// key and the IV from crypto/rand.
func (t *Tang) Encrypt(plaintext []byte, _ io.Reader) (string, error) {
	var c tangClevis
	c.Pin, c.Tang.Adv, c.Tang.URL = "tang", t.jwks, t.url
	cj, err := json.Marshal(c)
	if err != nil {
		return "", err
	}
	opts := (&jose.EncrypterOptions{}).WithHeader("clevis", json.RawMessage(cj))
	enc, err := jose.NewEncrypter(jose.A256GCM, jose.Recipient{Algorithm: jose.ECDH_ES, Key: t.exc.Key, KeyID: t.kid}, opts)
	if err != nil {
		return "", err
	}
	obj, err := enc.Encrypt(plaintext)
	if err != nil {
		return "", err
	}
	return obj.CompactSerialize()
}
