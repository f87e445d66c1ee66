// Package token makes what LUKS2 tokens of other programs hold, offline: the
// token's JSON and the secret of the keyslot it unlocks. It knows no LUKS
// layout; header stores the token with its keyslot in one update.
//
// Token types so far: systemd-recovery (systemd's recovery key,
// src/shared/recovery-key.c and src/cryptenroll/cryptenroll-recovery.c);
// clevis's in the subpackage clevis.
package token

import (
	"context"
	"errors"
)

// Types maps systemd-cryptenroll's names of enrollment kinds (the words of
// its --wipe-slot) to the LUKS2 token type each writes (systemd
// src/cryptenroll/cryptenroll.c luks2_token_type_table). "password" has
// no token: a password slot is one that no token names.
var Types = map[string]string{
	"recovery": RecoveryType,
	"pkcs11":   "systemd-pkcs11",
	"fido2":    "systemd-fido2",
	"tpm2":     "systemd-tpm2",
}

// An Unsealer recovers the passphrase of a token's key slots from the
// token's JSON, as the program that wrote the token does at unlock: clevis
// asks a tang server, systemd-cryptsetup asks a TPM. It is registered by
// token type (the CLI's unsealerTypes; image.UnlockToken takes them by
// type). The caller clears the passphrase.
type Unsealer interface {
	Unseal(ctx context.Context, tokenJSON []byte) ([]byte, error)
}

// ErrUnavailable reports that what a token needs to unseal is not at hand
// (no TPM given, no tang server reachable), as opposed to a token that was
// tried and refused.
var ErrUnavailable = errors.New("token unlocker not available")
