package tpm2

// Unsealing a systemd-tpm2 token through a TPM, as systemd 257 tpm2_unseal
// does (src/shared/tpm2-util.c; the PIN as
// src/cryptsetup/cryptsetup-tokens/luks2-tpm2.c salts it): the parent from
// tpm2_srk (or the legacy transient primary), TPM2_Import when the blob
// carries a seed, TPM2_Load, a policy session with PolicyPCR and
// PolicyAuthValue, the digest checked against tpm2-policy-hash, and
// TPM2_Unseal.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/cryptimg/cryptimg/header/token"
	tpm "github.com/google/go-tpm/tpm2"
	"github.com/google/go-tpm/tpm2/transport"
)

// An Unsealer unseals systemd-tpm2 tokens with a TPM.
type Unsealer struct {
	// Device names the TPM as systemd's --tpm2-device= does: a character
	// device (/dev/tpmrm0, or "device:/dev/tpmrm0"), or a TPM simulator
	// such as swtpm speaking the TCG simulator protocol: "swtpm:host=H,port=P"
	// (tpm2-tss's swtpm TCTI; "mssim:" is the same), "swtpm:path=SOCK" or
	// the path of a Unix socket. Empty: no TPM, token.ErrUnavailable.
	Device string
	// PIN is asked for when the token needs one (tpm2-pin); the caller's
	// buffer is cleared after use.
	PIN func() ([]byte, error)
}

var _ token.Unsealer = (*Unsealer)(nil)

// ErrPolicy reports a token whose policy the TPM's state does not satisfy:
// the PCRs differ from the values sealed to.
var ErrPolicy = errors.New("TPM2 policy not satisfied: the PCR values differ from those the token was sealed to")

// ErrWrongTPM reports a TPM whose parent key is not the one the token was
// sealed to.
var ErrWrongTPM = errors.New("the token was sealed to another TPM's key")

// parsed is what unsealing needs of a token (tpm2_parse_luks2_json).
type parsed struct {
	Type       string          `json:"type"`
	Blob       json.RawMessage `json:"tpm2-blob"`
	PCRs       []int           `json:"tpm2-pcrs"`
	Bank       string          `json:"tpm2-pcr-bank"`
	PrimaryAlg string          `json:"tpm2-primary-alg"`
	PolicyHash json.RawMessage `json:"tpm2-policy-hash"`
	PIN        bool            `json:"tpm2-pin"`
	Pubkey     []byte          `json:"tpm2_pubkey"`
	Salt       []byte          `json:"tpm2_salt"`
	SRK        []byte          `json:"tpm2_srk"`
	PCRLock    bool            `json:"tpm2_pcrlock"`
}

// oneShard reads a field that is a string or, sharded, an array of
// strings (tpm2_parse_shard_array); only one shard is supported here.
func oneShard(raw json.RawMessage, field string) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var a []string
	if json.Unmarshal(raw, &a) == nil && len(a) == 1 {
		return a[0], nil
	}
	return "", fmt.Errorf("systemd-tpm2 token: %s: want one shard", field)
}

// Unseal returns the keyslot passphrase of a systemd-tpm2 token (base64 of
// the unsealed secret). The caller clears it.
func (u *Unsealer) Unseal(ctx context.Context, tokenJSON []byte) ([]byte, error) {
	var t parsed
	if err := json.Unmarshal(tokenJSON, &t); err != nil {
		return nil, fmt.Errorf("systemd-tpm2 token: %v", err)
	}
	if t.Type != Type {
		return nil, fmt.Errorf("not a %s token: %q", Type, t.Type)
	}
	if t.Pubkey != nil || t.PCRLock {
		return nil, errors.New("systemd-tpm2 token: signed PCR and pcrlock policies are not supported for unlocking here")
	}
	b64, err := oneShard(t.Blob, "tpm2-blob")
	if err != nil {
		return nil, err
	}
	blob, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return nil, fmt.Errorf("systemd-tpm2 token: tpm2-blob: %v", err)
	}
	hexPolicy, err := oneShard(t.PolicyHash, "tpm2-policy-hash")
	if err != nil {
		return nil, err
	}
	policy, err := hex.DecodeString(hexPolicy)
	if err != nil {
		return nil, fmt.Errorf("systemd-tpm2 token: tpm2-policy-hash: %v", err)
	}
	bank := tpm.TPMAlgSHA256 // a missing bank: systemd picks the best; sha256 here
	if t.Bank != "" {
		var ok bool
		if bank, ok = banks[t.Bank]; !ok {
			return nil, fmt.Errorf("systemd-tpm2 token: unknown PCR bank %q", t.Bank)
		}
	}
	var mask uint32
	for _, n := range t.PCRs {
		if n < 0 || n >= 24 {
			return nil, fmt.Errorf("systemd-tpm2 token: PCR %d out of range", n)
		}
		mask |= 1 << n
	}
	priv, pub, seed, err := splitBlob(blob)
	if err != nil {
		return nil, err
	}

	var auth []byte
	if t.PIN {
		if u.PIN == nil {
			return nil, fmt.Errorf("%w: the token needs a PIN", token.ErrUnavailable)
		}
		pin, err := u.PIN()
		if err != nil {
			return nil, err
		}
		if t.Salt != nil {
			auth = pinAuth(pin, t.Salt)
		} else {
			// Before systemd 253: SHA-256 of the PIN itself.
			a := sha256.Sum256(pin)
			auth = append([]byte(nil), bytes.TrimRight(a[:], "\x00")...)
		}
		clear(pin)
		defer clear(auth)
	}

	if u.Device == "" {
		return nil, fmt.Errorf("%w: no TPM given", token.ErrUnavailable)
	}
	tp, err := Open(ctx, u.Device)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", token.ErrUnavailable, err)
	}
	defer tp.Close()

	parent, err := loadParent(tp, t)
	if err != nil {
		return nil, err
	}
	if parent.flush {
		defer flush(tp, parent.Handle)
	}
	parentAuth := tpm.AuthHandle{Handle: parent.Handle, Name: parent.Name, Auth: tpm.PasswordAuth(nil)}
	if len(seed) > 0 {
		// An object calculated offline: import it under the parent first.
		imp, err := tpm.Import{
			ParentHandle: parentAuth,
			ObjectPublic: tpm.BytesAs2B[tpm.TPMTPublic](pub),
			Duplicate:    tpm.TPM2BPrivate{Buffer: priv},
			InSymSeed:    tpm.TPM2BEncryptedSecret{Buffer: seed},
			Symmetric:    tpm.TPMTSymDef{Algorithm: tpm.TPMAlgNull},
		}.Execute(tp)
		if err != nil {
			if errors.Is(err, tpm.TPMRCIntegrity) || errors.Is(err, tpm.TPMRCValue) || errors.Is(err, tpm.TPMRCECCPoint) {
				return nil, fmt.Errorf("%w: TPM2_Import: %v", ErrWrongTPM, err)
			}
			return nil, fmt.Errorf("TPM2_Import: %w", err)
		}
		priv = imp.OutPrivate.Buffer
	}
	ld, err := tpm.Load{
		ParentHandle: parentAuth,
		InPrivate:    tpm.TPM2BPrivate{Buffer: priv},
		InPublic:     tpm.BytesAs2B[tpm.TPMTPublic](pub),
	}.Execute(tp)
	if err != nil {
		return nil, fmt.Errorf("TPM2_Load: %w", err)
	}
	defer flush(tp, ld.ObjectHandle)

	ps, closeSess, err := tpm.PolicySession(tp, tpm.TPMAlgSHA256, 16)
	if err != nil {
		return nil, fmt.Errorf("TPM2_StartAuthSession: %w", err)
	}
	defer closeSess()
	var sess tpm.Session = ps
	if auth != nil {
		sess = newAuthValueSession(ps, auth)
	}
	if mask != 0 {
		if _, err := (tpm.PolicyPCR{PolicySession: sess.Handle(), Pcrs: selection(bank, mask)}).Execute(tp); err != nil {
			return nil, fmt.Errorf("TPM2_PolicyPCR: %w", err)
		}
	}
	if t.PIN {
		if _, err := (tpm.PolicyAuthValue{PolicySession: sess.Handle()}).Execute(tp); err != nil {
			return nil, fmt.Errorf("TPM2_PolicyAuthValue: %w", err)
		}
	}
	// systemd refuses before unsealing when the session's digest is not
	// the stored one ("Current policy digest does not match stored policy
	// digest", tpm2_unseal).
	got, err := tpm.PolicyGetDigest{PolicySession: sess.Handle()}.Execute(tp)
	if err != nil {
		return nil, fmt.Errorf("TPM2_PolicyGetDigest: %w", err)
	}
	if !bytes.Equal(got.PolicyDigest.Buffer, policy) {
		return nil, ErrPolicy
	}
	us, err := tpm.Unseal{ItemHandle: tpm.AuthHandle{Handle: ld.ObjectHandle, Name: ld.Name, Auth: sess}}.Execute(tp)
	if err != nil {
		if errors.Is(err, tpm.TPMRCAuthFail) || errors.Is(err, tpm.TPMRCBadAuth) {
			return nil, fmt.Errorf("wrong TPM2 PIN: %w", err)
		}
		return nil, fmt.Errorf("TPM2_Unseal: %w", err)
	}
	secret := us.OutData.Buffer
	defer clear(secret)
	out := make([]byte, base64.StdEncoding.EncodedLen(len(secret)))
	base64.StdEncoding.Encode(out, secret)
	return out, nil
}

// splitBlob splits tpm2-blob into TPM2B_PRIVATE, TPM2B_PUBLIC and the
// optional TPM2B_ENCRYPTED_SECRET, returning their contents
// (tpm2_unmarshal_blob).
func splitBlob(b []byte) (priv, pub, seed []byte, err error) {
	var parts [3][]byte
	for i := range parts {
		if i == 2 && len(b) == 0 {
			break
		}
		if len(b) < 2 || len(b) < 2+int(binary.BigEndian.Uint16(b)) {
			return nil, nil, nil, errors.New("systemd-tpm2 token: tpm2-blob is truncated")
		}
		n := int(binary.BigEndian.Uint16(b))
		parts[i], b = b[2:2+n], b[2+n:]
	}
	if len(b) != 0 {
		return nil, nil, nil, errors.New("systemd-tpm2 token: trailing bytes in tpm2-blob")
	}
	return parts[0], parts[1], parts[2], nil
}

type parentKey struct {
	tpm.NamedHandle
	flush bool
}

// loadParent finds the key the token was sealed under: the persistent
// handle serialized in tpm2_srk, whose name must match the TPM's, or,
// without tpm2_srk, a transient primary of systemd's legacy template
// (tpm2_unseal, tpm2_get_legacy_template).
func loadParent(tp transport.TPM, t parsed) (*parentKey, error) {
	if t.SRK != nil {
		// TPM2_HANDLE || TPM2B_NAME || u32 || TPM2B_PUBLIC
		// (tpm2_calculate_serialize).
		s := t.SRK
		if len(s) < 6 || len(s) < 6+int(binary.BigEndian.Uint16(s[4:])) {
			return nil, errors.New("systemd-tpm2 token: tpm2_srk is truncated")
		}
		h := tpm.TPMHandle(binary.BigEndian.Uint32(s))
		name := s[6 : 6+binary.BigEndian.Uint16(s[4:])]
		rp, err := tpm.ReadPublic{ObjectHandle: h}.Execute(tp)
		if err != nil {
			if errors.Is(err, tpm.TPMRCHandle) {
				return nil, fmt.Errorf("%w: no key at handle %#x", ErrWrongTPM, uint32(h))
			}
			return nil, fmt.Errorf("TPM2_ReadPublic %#x: %w", uint32(h), err)
		}
		if !bytes.Equal(rp.Name.Buffer, name) {
			return nil, fmt.Errorf("%w: the key at handle %#x differs", ErrWrongTPM, uint32(h))
		}
		return &parentKey{NamedHandle: tpm.NamedHandle{Handle: h, Name: rp.Name}}, nil
	}
	alg := tpm.TPMAlgECC // before systemd 250 only ECC, and no field
	if t.PrimaryAlg == "rsa" {
		alg = tpm.TPMAlgRSA
	}
	tmpl := srkTemplate(alg)
	tmpl.ObjectAttributes.NoDA = false // the legacy template has no noDA
	cp, err := tpm.CreatePrimary{
		PrimaryHandle: tpm.AuthHandle{Handle: tpm.TPMRHOwner, Auth: tpm.PasswordAuth(nil)},
		InPublic:      tpm.New2B(tmpl),
	}.Execute(tp)
	if err != nil {
		return nil, fmt.Errorf("TPM2_CreatePrimary: %w", err)
	}
	return &parentKey{NamedHandle: tpm.NamedHandle{Handle: cp.ObjectHandle, Name: cp.Name}, flush: true}, nil
}

func flush(tp transport.TPM, h tpm.TPMHandle) {
	tpm.FlushContext{FlushHandle: h}.Execute(tp)
}

// Open connects to the TPM that device names (see Unsealer.Device).
// Commands the TPM answers with TPM_RC_RETRY, TPM_RC_YIELDED or
// TPM_RC_TESTING are sent again, as tpm2-tss's ESYS does.
func Open(ctx context.Context, device string) (transport.TPMCloser, error) {
	t, err := open(ctx, device)
	if err != nil {
		return nil, err
	}
	return retrying{t}, nil
}

type retrying struct{ transport.TPMCloser }

func (r retrying) Send(cmd []byte) ([]byte, error) {
	for try := 0; ; try++ {
		rsp, err := r.TPMCloser.Send(cmd)
		if err != nil || len(rsp) < 10 || try == 20 {
			return rsp, err
		}
		switch tpm.TPMRC(binary.BigEndian.Uint32(rsp[6:])) {
		case tpm.TPMRCRetry, tpm.TPMRCYielded, tpm.TPMRCTesting:
			time.Sleep(10 * time.Millisecond)
		default:
			return rsp, err
		}
	}
}

func open(ctx context.Context, device string) (transport.TPMCloser, error) {
	driver, conf, hasDriver := strings.Cut(device, ":")
	if !hasDriver {
		driver, conf = "device", device
	}
	switch driver {
	case "device":
		fi, err := os.Stat(conf)
		if err != nil {
			return nil, err
		}
		if fi.Mode()&os.ModeSocket != 0 {
			return dialSim(ctx, "unix", conf)
		}
		f, err := os.OpenFile(conf, os.O_RDWR, 0)
		if err != nil {
			return nil, err
		}
		return transport.FromReadWriteCloser(f), nil
	case "swtpm", "mssim":
		// tpm2-tss TCTI configuration: key=value pairs separated by
		// commas; host defaults to localhost, port to 2321.
		host, port, path := "localhost", "2321", ""
		for _, kv := range strings.Split(conf, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "host":
				host = v
			case "port":
				port = v
			case "path":
				path = v
			case "":
			default:
				return nil, fmt.Errorf("TPM device %q: unknown setting %q", device, k)
			}
		}
		if path != "" {
			return dialSim(ctx, "unix", path)
		}
		return dialSim(ctx, "tcp", net.JoinHostPort(host, port))
	}
	return nil, fmt.Errorf("TPM device %q: unknown driver %q (device, swtpm, mssim)", device, driver)
}

// sim speaks the TCG simulator protocol of the command channel (tpm2-tss
// src/tss2-tcti/tcti-mssim.c, swtpm): u32 TPM_SEND_COMMAND (8), u8
// locality, u32 size, command; answered by u32 size, response, u32 0.
type sim struct {
	c net.Conn
}

func dialSim(ctx context.Context, network, addr string) (*sim, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Now().Add(2 * time.Minute))
	}
	return &sim{c: c}, nil
}

func (s *sim) Send(cmd []byte) ([]byte, error) {
	hdr := binary.BigEndian.AppendUint32(nil, 8)
	hdr = append(hdr, 0)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(cmd)))
	if _, err := s.c.Write(append(hdr, cmd...)); err != nil {
		return nil, err
	}
	var n [4]byte
	if _, err := io.ReadFull(s.c, n[:]); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > 1<<20 {
		return nil, fmt.Errorf("TPM simulator: response of %d bytes", size)
	}
	rsp := make([]byte, size+4)
	if _, err := io.ReadFull(s.c, rsp); err != nil {
		return nil, err
	}
	return rsp[:size], nil
}

// Close ends the session (TPM_SESSION_END, 20) and the connection.
func (s *sim) Close() error {
	s.c.Write(binary.BigEndian.AppendUint32(nil, 20))
	return s.c.Close()
}
