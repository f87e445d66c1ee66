package clevis

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdh"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"strings"
	"time"

	"filippo.io/nistec"
	jose "github.com/go-jose/go-jose/v4"
	josecipher "github.com/go-jose/go-jose/v4/cipher"

	"github.com/cryptimg/cryptimg/header/token"
)

// Unsealer unseals clevis tokens (token.Unsealer): a tang pin asks its
// server, an sss pin its children, as clevis decrypt does. Other pins
// (tpm2, pkcs11, ...) are token.ErrUnavailable.
type Unsealer struct {
	// Client makes the requests to tang servers; nil: one with a
	// 30-second timeout and a new connection for each request, as curl
	// makes one in clevis-decrypt-tang.
	Client *http.Client
}

// Unseal returns the keyslot passphrase a clevis token holds.
func (u Unsealer) Unseal(ctx context.Context, tokenJSON []byte) ([]byte, error) {
	compact, err := tokenCompact(tokenJSON)
	if err != nil {
		return nil, err
	}
	c := u.Client
	if c == nil {
		c = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment}}
	}
	return decrypt(ctx, c, compact)
}

// Decrypt decrypts a compact clevis JWE (tang or sss pins, nested), as
// clevis decrypt does; c makes the requests to tang servers.
func Decrypt(ctx context.Context, c *http.Client, compact string) ([]byte, error) {
	return decrypt(ctx, c, compact)
}

func decrypt(ctx context.Context, c *http.Client, compact string) ([]byte, error) {
	var h struct {
		Clevis struct {
			Pin string `json:"pin"`
		} `json:"clevis"`
	}
	if err := protectedHeader(compact, &h); err != nil {
		return nil, err
	}
	switch h.Clevis.Pin {
	case "tang":
		return decryptTang(ctx, c, compact)
	case "sss":
		return decryptSSS(ctx, c, compact)
	case "":
		return nil, errors.New("not a clevis JWE: no clevis.pin")
	}
	return nil, fmt.Errorf("%w: clevis pin %q (cryptimg unseals tang and sss)", token.ErrUnavailable, h.Clevis.Pin)
}

// tangHeader is what clevis-decrypt-tang reads of the protected header.
type tangHeader struct {
	Epk    json.RawMessage `json:"epk"`
	Kid    string          `json:"kid"`
	Enc    string          `json:"enc"`
	Apu    string          `json:"apu"`
	Apv    string          `json:"apv"`
	Clevis struct {
		Tang struct {
			Adv json.RawMessage `json:"adv"`
			URL string          `json:"url"`
		} `json:"tang"`
	} `json:"clevis"`
}

// ecJWK is an EC public key as JWK members.
type ecJWK struct {
	Alg string `json:"alg,omitempty"`
	Crv string `json:"crv"`
	Kty string `json:"kty"`
	X   string `json:"x"`
	Y   string `json:"y"`
}

// curves holds, per JWK curve name, the ECDH curve (ephemeral keys) and
// the point arithmetic the McCallum-Relyea exchange needs, which neither
// crypto/ecdh (no addition) nor go-jose offers: filippo.io/nistec is the
// standard library's own constant-time P-256/384/521 code, exported, with
// point addition and negation (crypto/elliptic's big.Int arithmetic is
// deprecated and not constant-time).
var curves = map[string]struct {
	ecdh   ecdh.Curve
	size   int
	add    func(a, b []byte) ([]byte, error)
	subMul func(y, s, e []byte) ([]byte, error)
}{
	"P-256": {ecdh.P256(), 32, add(nistec.NewP256Point), subMul(nistec.NewP256Point)},
	"P-384": {ecdh.P384(), 48, add(nistec.NewP384Point), subMul(nistec.NewP384Point)},
	"P-521": {ecdh.P521(), 66, add(nistec.NewP521Point), subMul(nistec.NewP521Point)},
}

type point[P any] interface {
	SetBytes([]byte) (P, error)
	Bytes() []byte
	BytesX() ([]byte, error)
	Add(P, P) P
	Negate(P) P
	ScalarMult(P, []byte) (P, error)
}

// add returns a + b, points in SEC 1 uncompressed form.
func add[P point[P]](newPoint func() P) func(a, b []byte) ([]byte, error) {
	return func(a, b []byte) ([]byte, error) {
		pa, err := newPoint().SetBytes(a)
		if err != nil {
			return nil, err
		}
		pb, err := newPoint().SetBytes(b)
		if err != nil {
			return nil, err
		}
		return newPoint().Add(pa, pb).Bytes(), nil
	}
}

// subMul returns the x coordinate of y − e·s.
func subMul[P point[P]](newPoint func() P) func(y, s, e []byte) ([]byte, error) {
	return func(y, s, e []byte) ([]byte, error) {
		py, err := newPoint().SetBytes(y)
		if err != nil {
			return nil, err
		}
		ps, err := newPoint().SetBytes(s)
		if err != nil {
			return nil, err
		}
		es, err := newPoint().ScalarMult(ps, e)
		if err != nil {
			return nil, err
		}
		return newPoint().Add(py, newPoint().Negate(es)).BytesX()
	}
}

// uncompressed is the SEC 1 form of a JWK EC public key.
func (k ecJWK) uncompressed(size int) ([]byte, error) {
	x, errx := base64.RawURLEncoding.DecodeString(k.X)
	y, erry := base64.RawURLEncoding.DecodeString(k.Y)
	if k.Kty != "EC" || errx != nil || erry != nil || len(x) != size || len(y) != size {
		return nil, fmt.Errorf("not an EC %s public key", k.Crv)
	}
	return append(append([]byte{4}, x...), y...), nil
}

func jwkOf(crv string, size int, pt []byte) ecJWK {
	return ecJWK{Alg: "ECMR", Crv: crv, Kty: "EC",
		X: base64.RawURLEncoding.EncodeToString(pt[1 : 1+size]),
		Y: base64.RawURLEncoding.EncodeToString(pt[1+size:])}
}

// decryptTang recovers the ECDH-ES key of a tang pin's JWE with the
// server's help, as clevis-decrypt-tang does (McCallum-Relyea; tang
// src/tangd.c rec): C is the JWE's epk, S the server key the kid names in
// the advertisement in the header. The client sends X = C + E for a fresh
// E = e·G to POST URL/rec/KID; the server answers Y = s·X; then
// Y − e·S = s·C, the ECDH-ES shared point, and the content key follows
// from its x coordinate by the Concat KDF (RFC 7518 4.6).
func decryptTang(ctx context.Context, c *http.Client, compact string) ([]byte, error) {
	var h tangHeader
	if err := protectedHeader(compact, &h); err != nil {
		return nil, err
	}
	var epk ecJWK
	if err := json.Unmarshal(h.Epk, &epk); err != nil || h.Kid == "" || h.Clevis.Tang.URL == "" {
		return nil, errors.New("tang JWE: missing epk, kid or clevis.tang.url")
	}
	url := h.Clevis.Tang.URL
	cv, ok := curves[epk.Crv]
	if !ok {
		return nil, fmt.Errorf("tang JWE: curve %q", epk.Crv)
	}
	C, err := epk.uncompressed(cv.size)
	if err != nil {
		return nil, fmt.Errorf("tang JWE epk: %v", err)
	}
	S, err := serverKey(h.Clevis.Tang.Adv, h.Kid, epk.Crv, cv.size)
	if err != nil {
		return nil, err
	}
	eph, err := cv.ecdh.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	e := eph.Bytes()
	defer clear(e)
	X, err := cv.add(C, eph.PublicKey().Bytes())
	if err != nil {
		return nil, fmt.Errorf("tang JWE epk: %v", err)
	}
	Y, err := recoverPoint(ctx, c, url, h.Kid, jwkOf(epk.Crv, cv.size, X), cv.size)
	if err != nil {
		return nil, err
	}
	z, err := cv.subMul(Y, S, e)
	if err != nil {
		return nil, fmt.Errorf("tang server %s: %v", url, err)
	}
	defer clear(z)
	cek := concatKDF(z, h.Enc, h.Apu, h.Apv)
	defer clear(cek)
	return openJWE(compact, jose.ECDH_ES, opaqueCEK(cek))
}

// serverKey is the key of the advertisement whose SHA-256 (or SHA-1)
// thumbprint is kid (clevis-decrypt-tang).
func serverKey(adv json.RawMessage, kid, crv string, size int) ([]byte, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(adv, &set); err != nil {
		return nil, errors.New("tang JWE: missing clevis.tang.adv")
	}
	for _, raw := range set.Keys {
		var k jose.JSONWebKey
		if k.UnmarshalJSON(raw) != nil || !hasThumbprint(k, kid) {
			continue
		}
		var ek ecJWK
		if json.Unmarshal(raw, &ek) != nil || ek.Crv != crv {
			break
		}
		return ek.uncompressed(size)
	}
	return nil, errors.New("tang JWE: the advertisement in the header has no key " + kid)
}

// recoverPoint asks the tang server at url for s·X, with POST URL/rec/KID
// (Content-Type application/jwk+json), as clevis-decrypt-tang does with
// curl. A server not reached is token.ErrUnavailable.
func recoverPoint(ctx context.Context, c *http.Client, url, kid string, x ecJWK, size int) ([]byte, error) {
	body, err := json.Marshal(x)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/rec/"+kid, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("tang server %s: %v", url, err)
	}
	req.Header.Set("Content-Type", "application/jwk+json")
	resp, err := c.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: tang server %s: %v", token.ErrUnavailable, url, unwrapURLError(err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return nil, fmt.Errorf("%w: tang server %s: %v", token.ErrUnavailable, url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("tang server %s refused the recovery: %s", url, resp.Status)
	}
	var y ecJWK
	if err := json.Unmarshal(b, &y); err != nil || y.Crv != x.Crv {
		return nil, fmt.Errorf("tang server %s: received invalid server reply", url)
	}
	Y, err := y.uncompressed(size)
	if err != nil {
		return nil, fmt.Errorf("tang server %s: received invalid server reply: %v", url, err)
	}
	return Y, nil
}

// unwrapURLError drops net/http's "Post \"URL\":" prefix, which repeats
// the URL.
func unwrapURLError(err error) error {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) && strings.HasPrefix(err.Error(), "Post ") {
		return ue.Unwrap()
	}
	return err
}

// concatKDF derives the content key of ECDH-ES in direct mode from the
// shared secret z (RFC 7518 4.6.2; jose lib/openssl/ecdhes.c): AlgorithmID
// is the enc value; apu and apv are base64url, empty when absent.
func concatKDF(z []byte, enc, apu, apv string) []byte {
	size := 32 // A256GCM
	switch enc {
	case "A128GCM":
		size = 16
	case "A192GCM":
		size = 24
	}
	u, _ := base64.RawURLEncoding.DecodeString(apu)
	v, _ := base64.RawURLEncoding.DecodeString(apv)
	pub := binary.BigEndian.AppendUint32(nil, uint32(size*8))
	r := josecipher.NewConcatKDF(crypto.SHA256, z, prefixed([]byte(enc)), prefixed(u), prefixed(v), pub, nil)
	out := make([]byte, size)
	io.ReadFull(r, out)
	return out
}

func prefixed(b []byte) []byte {
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// opaqueCEK hands a content key to go-jose's decryption as the result of
// the key agreement (jose.OpaqueKeyDecrypter): go-jose then checks the
// header and the tag and decrypts.
type opaqueCEK []byte

func (k opaqueCEK) DecryptKey([]byte, jose.Header) ([]byte, error) {
	return bytes.Clone(k), nil
}

// openJWE decrypts a compact JWE with go-jose.
func openJWE(compact string, alg jose.KeyAlgorithm, key any) ([]byte, error) {
	obj, err := jose.ParseEncryptedCompact(compact, []jose.KeyAlgorithm{alg}, []jose.ContentEncryption{jose.A256GCM, jose.A192GCM, jose.A128GCM})
	if err != nil {
		return nil, fmt.Errorf("clevis JWE: %v", err)
	}
	pt, err := obj.Decrypt(key)
	if err != nil {
		return nil, fmt.Errorf("clevis JWE: %v", err)
	}
	return pt, nil
}

// decryptSSS decrypts t of an sss pin's child JWEs, all at once as
// clevis-decrypt-sss.c does, interpolates the key from their shares and
// opens the outer JWE ("dir", A256GCM). When fewer than t children open
// and every failure is a child whose unlocker is not at hand, the error
// is token.ErrUnavailable.
func decryptSSS(ctx context.Context, c *http.Client, compact string) ([]byte, error) {
	var h struct {
		Clevis struct {
			SSS struct {
				JWE []string `json:"jwe"`
				P   string   `json:"p"`
				T   int      `json:"t"`
			} `json:"sss"`
		} `json:"clevis"`
	}
	if err := protectedHeader(compact, &h); err != nil {
		return nil, err
	}
	s := h.Clevis.SSS
	pb, err := base64.RawURLEncoding.DecodeString(s.P)
	if err != nil || len(pb) == 0 || s.T < 1 {
		return nil, errors.New("sss JWE: bad p or t")
	}
	p := new(big.Int).SetBytes(pb)
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		pt  []byte
		err error
	}
	results := make(chan result, len(s.JWE))
	for _, child := range s.JWE {
		go func() {
			pt, err := decrypt(ctx, c, child)
			results <- result{pt, err}
		}()
	}
	var shares [][]byte
	defer func() {
		for _, sh := range shares {
			clear(sh)
		}
	}()
	var errs []error
	unavailable := true
	got := 0
	for range s.JWE {
		got++
		r := <-results
		switch {
		case r.err != nil:
			errs = append(errs, r.err)
			unavailable = unavailable && errors.Is(r.err, token.ErrUnavailable)
		case len(r.pt) != 2*len(pb):
			clear(r.pt)
			errs = append(errs, errors.New("sss: a share of the wrong size"))
			unavailable = false
		case len(shares) < s.T:
			shares = append(shares, r.pt)
		default:
			clear(r.pt)
		}
		if len(shares) == s.T {
			break
		}
	}
	go func(n int) { // the children still running, cancelled
		for range n {
			clear((<-results).pt)
		}
	}(len(s.JWE) - got)
	if len(shares) < s.T {
		if parent.Err() != nil {
			return nil, parent.Err()
		}
		err := fmt.Errorf("sss: %d of the %d pins needed unsealed: %w", len(shares), s.T, errors.Join(errs...))
		if unavailable {
			err = fmt.Errorf("%w: %w", token.ErrUnavailable, err)
		}
		return nil, err
	}
	cancel()
	key, err := recoverKey(p, len(pb), shares)
	if err != nil {
		return nil, err
	}
	defer clear(key)
	return openJWE(compact, jose.DIRECT, key)
}
