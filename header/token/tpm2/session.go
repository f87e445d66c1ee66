package tpm2

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	tpm "github.com/google/go-tpm/tpm2"
)

// authValueSession is a policy session that authorizes with an object's
// authValue (after TPM2_PolicyAuthValue) by the HMAC of TPM 2.0 Part 1,
// 19.6: key sessionKey || authValue, the authValue without its trailing
// zero bytes (19.6.5, Note 2). go-tpm v0.9.8 computes that key for its own
// policy sessions by cutting the authValue at its first zero byte wherever
// it is (hmacKeyFromAuthValue), so a PIN whose 32-byte authValue holds a
// zero byte before its end, about one in eight, would never unseal. The
// embedded session is unsalted and unbound, made without an auth value:
// its sessionKey is empty, and this type computes both HMACs itself.
type authValueSession struct {
	tpm.Session
	auth        []byte // trailing zeros removed
	nonceCaller []byte // of the last command, for its response
}

// newAuthValueSession wraps s, an unsalted, unbound policy session with no
// auth of its own, to authorize with auth.
func newAuthValueSession(s tpm.Session, auth []byte) *authValueSession {
	n := len(auth)
	for n > 0 && auth[n-1] == 0 {
		n--
	}
	return &authValueSession{Session: s, auth: auth[:n]}
}

// Authorize implements tpm.Session: the embedded session's authorization,
// with the HMAC over cpHash = H(commandCode || names || parameters),
// nonceCaller, nonceTPM, the decrypt/encrypt sessions' nonces and the
// session attributes.
func (s *authValueSession) Authorize(cc tpm.TPMCC, parms, addNonces []byte, names []tpm.TPM2BName, authIndex int) (*tpm.TPMSAuthCommand, error) {
	a, err := s.Session.Authorize(cc, parms, addNonces, names, authIndex)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(cc)))
	for _, n := range names {
		h.Write(n.Buffer)
	}
	h.Write(parms)
	s.nonceCaller = append(s.nonceCaller[:0], a.Nonce.Buffer...)
	mac := hmac.New(sha256.New, s.auth)
	mac.Write(h.Sum(nil))
	mac.Write(a.Nonce.Buffer)
	mac.Write(s.Session.NonceTPM().Buffer)
	mac.Write(addNonces)
	mac.Write([]byte{sessionAttrs(a.Attributes)})
	a.Authorization = tpm.TPM2BData{Buffer: mac.Sum(nil)}
	return a, nil
}

// Validate implements tpm.Session: the embedded session takes the new
// nonceTPM (its own HMAC check, with an empty key, is not the one that
// counts), and the response HMAC over rpHash = H(responseCode ||
// commandCode || parameters), nonceTPM, nonceCaller and the attributes is
// checked with the authValue.
func (s *authValueSession) Validate(rc tpm.TPMRC, cc tpm.TPMCC, parms []byte, names []tpm.TPM2BName, authIndex int, auth *tpm.TPMSAuthResponse) error {
	s.Session.Validate(rc, cc, parms, names, authIndex, auth)
	h := sha256.New()
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(rc)))
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(cc)))
	h.Write(parms)
	mac := hmac.New(sha256.New, s.auth)
	mac.Write(h.Sum(nil))
	mac.Write(auth.Nonce.Buffer)
	mac.Write(s.nonceCaller)
	mac.Write([]byte{sessionAttrs(auth.Attributes)})
	if !hmac.Equal(mac.Sum(nil), auth.Authorization.Buffer) {
		return fmt.Errorf("the TPM's response HMAC does not match")
	}
	return nil
}

// sessionAttrs is TPMA_SESSION as its one byte (TPM 2.0 Part 2, 8.4).
func sessionAttrs(a tpm.TPMASession) byte {
	var b byte
	for i, on := range []bool{a.ContinueSession, a.AuditExclusive, a.AuditReset, false, false, a.Decrypt, a.Encrypt, a.Audit} {
		if on {
			b |= 1 << i
		}
	}
	return b
}
