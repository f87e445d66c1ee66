package main

// enroll: systemd-cryptenroll's enrollments, offline, into LUKS2 image
// files (raw, or with --header): a recovery key, a TPM2 token sealed
// offline (enroll_tpm2.go), and --wipe-slot.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cryptimg/cryptimg/asm/secmem"
	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/token"
	"github.com/cryptimg/cryptimg/header/token/clevis"
	"github.com/cryptimg/cryptimg/header/token/tpm2"
	"github.com/cryptimg/cryptimg/image"
	"github.com/spf13/cobra"
)

type enrollOptions struct {
	key         keyOptions
	keySlot     int
	recoveryKey bool
	tpm2        tpm2EnrollOptions
	clevis      clevisFlags
	wipeSlot    string
	json        bool
}

// enrollJSON is enroll's --json output.
type enrollJSON struct {
	MessageType string `json:"message_type"` // "enroll"
	Image       string `json:"image"`
	Header      string `json:"header,omitempty"`
	// The enrolled slot, its token and, for a recovery key, the key: absent
	// when only slots were wiped.
	KeySlot     *int   `json:"key_slot,omitempty"`
	TokenID     *int   `json:"token_id,omitempty"`
	TokenType   string `json:"token_type,omitempty"`
	RecoveryKey string `json:"recovery_key,omitempty"`
	WipedSlots  []int  `json:"wiped_slots"`
	WipedTokens []int  `json:"wiped_tokens"`
}

func newEnrollCommand(g *globalOptions) *cobra.Command {
	var o enrollOptions
	cmd := &cobra.Command{
		Use:   "enroll [flags] IMAGE",
		Short: "Enroll a recovery key or a TPM2 token into a LUKS2 image, or wipe key slots, as systemd-cryptenroll does",
		Long: `Add an unlocker that systemd-cryptsetup and cryptsetup understand to a LUKS2
image file (raw, or its detached header with --header), without root, a TPM
or a network, with systemd-cryptenroll's flag names. The existing key is
given as on the other commands (--key-file, or --unlock-key-file as
systemd-cryptenroll calls it; --key-slot; or a prompt).

  --recovery-key
      make a recovery key in systemd's format (32 random bytes as 8 groups
      of 8 modhex characters, joined by dashes), add it to the lowest free
      key slot with systemd's minimal KDF (pbkdf2, sha512, 1000 iterations:
      the key has 256 bits of entropy), and a systemd-recovery token naming
      that slot. The slot and the token are written in one header update, so
      that a crash leaves both or neither; the slot is then unlocked with the
      key before success is reported. The key is printed once, on stdout
      (or in the --json object), and kept nowhere else.
` + tpm2EnrollHelp + `
  --wipe-slot LIST
      remove key slots after enrolling (or alone), as systemd-cryptenroll's
      --wipe-slot: a comma-separated list of slot numbers and the words all
      (every slot), empty (slots an empty passphrase opens), password (slots
      no token names), recovery, tpm2, fido2, pkcs11 (slots a token of that
      kind names). A slot just enrolled is never wiped; a token goes with
      its slots, and a token naming a kept slot keeps all of its slots; a
      wipe that would leave no slot is refused. Slots and tokens go in one
      header update, then the slots' key material is overwritten. Wiping
      alone needs no key, as in systemd-cryptenroll.

  --tang-adv FILE --tang-url URL, --clevis-config JSON   (cryptimg's own)
      bind the image to tang servers as clevis luks bind does, offline: a
      new passphrase (40 random bytes, base64url) in the lowest free slot
      with clevis's KDF (pbkdf2, 1000 iterations), and a clevis token whose
      JWE encrypts it to the server's exchange key, from the advertisement
      saved with curl -f URL/adv (its signature is checked). --clevis-config
      takes clevis's config: tang {"url":URL,"adv":FILE or the JWS}, or sss
      {"t":N,"pins":{"tang":[...],"sss":...}} for a threshold of servers.
      Unlocking asks the servers (clevis luks unlock, or cryptimg's
      --token-only).

LUKS1 headers have no tokens: convert first (cryptimg convert --type luks2).
` + exitStatusHelp,
		Example: `  cryptimg enroll -d disk.key --recovery-key disk.img > recovery.txt
  cryptimg enroll -d disk.key --recovery-key --wipe-slot password --json disk.img
  cryptimg enroll --header disk.hdr -d disk.key --recovery-key disk.data
  cryptimg enroll -d disk.key --tpm2-device-key srk.pub --tpm2-pcrs 7:sha256=HEX disk.img
  cryptimg enroll -d disk.key --tang-adv adv.jws --tang-url http://tang.example disk.img`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runEnroll(g, o, args[0])
		},
	}
	f := cmd.Flags()
	o.key.addFlags(f)
	f.StringVar(&o.key.keyFile, "unlock-key-file", "", "alias of --key-file (systemd-cryptenroll's name)")
	f.IntVarP(&o.keySlot, "key-slot", "S", -1, "unlock with this key slot only")
	f.BoolVar(&o.recoveryKey, "recovery-key", false, "enroll a new recovery key in systemd's format and print it")
	o.tpm2.addFlags(f)
	o.clevis.addFlags(f)
	f.StringVar(&o.wipeSlot, "wipe-slot", "", "remove these key slots: numbers, all, empty, password, recovery, tpm2, fido2, pkcs11 (comma-separated)")
	f.BoolVar(&o.json, "json", false, "print the outcome, with the recovery key, as JSON on stdout")
	cmd.RegisterFlagCompletionFunc("wipe-slot", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return append([]string{"all", "empty", "password"}, slices.Sorted(maps.Keys(token.Types))...), cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// parseWipeSlot reads systemd-cryptenroll's --wipe-slot list
// (src/cryptenroll/cryptenroll.c parse_wipe_slot): "all" wins over
// "empty"; an empty list selects nothing.
func parseWipeSlot(s string) (image.Wipe, error) {
	var w image.Wipe
	if s == "" {
		return w, nil
	}
	for _, word := range strings.Split(s, ",") {
		_, kind := token.Types[word]
		switch {
		case word == "all":
			w.All, w.Empty = true, false
		case word == "empty":
			w.Empty = !w.All
		case kind || word == "password":
			w.Kinds = append(w.Kinds, word)
		default:
			n, err := strconv.ParseUint(word, 10, 31)
			if err != nil {
				return w, usagef("--wipe-slot: %q is not a slot number or one of all, empty, password, recovery, tpm2, fido2, pkcs11", word)
			}
			if n >= header.MaxSlots {
				return w, usagef("--wipe-slot: slot %d out of range (0 to %d)", n, header.MaxSlots-1)
			}
			w.Slots = append(w.Slots, int(n))
		}
	}
	return w, nil
}

func runEnroll(g *globalOptions, o enrollOptions, path string) error {
	wipe, err := parseWipeSlot(o.wipeSlot)
	if err != nil {
		return err
	}
	pin, err := o.clevis.pin()
	if err != nil {
		return err
	}
	tpm := o.tpm2.deviceKey != ""
	kinds := 0
	for _, on := range []bool{o.recoveryKey, tpm, pin != nil} {
		if on {
			kinds++
		}
	}
	if kinds == 0 && wipe.IsZero() {
		return usagef("enroll needs --recovery-key, --tpm2-device-key, --tang-adv, --clevis-config or --wipe-slot")
	}
	if kinds > 1 {
		return usagef("enroll one thing at a time: --recovery-key, --tpm2-device-key, or a clevis binding (--tang-adv, --clevis-config)")
	}
	if !tpm && (o.tpm2 != tpm2EnrollOptions{}) {
		return usagef("the --tpm2-* flags need --tpm2-device-key")
	}
	if err := checkKeySlot(o.keySlot); err != nil {
		return err
	}
	f, e, err := openImageRW(g, path)
	if err != nil {
		return err
	}
	defer f.Close()
	// Refuse a bad selection before anything is written (the slot about to
	// be enrolled will remain).
	if _, _, err := e.WipeSelection(wipe, -1); err != nil && !(kinds > 0 && errors.Is(err, image.ErrWipeAll)) {
		return fmt.Errorf("%s: %w", path, err)
	}
	out := enrollJSON{MessageType: "enroll", Image: path, Header: g.header, WipedSlots: []int{}, WipedTokens: []int{}}
	keep := -1
	var rec *image.Recovery
	if o.recoveryKey {
		k, err := unlockImage(g, e, o.key, path, passPrompt(path), o.keySlot)
		if err != nil {
			return err
		}
		rec, err = e.EnrollRecovery(k, nil)
		k.Clear()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		defer clear(rec.Key)
		keep = rec.Slot
		out.KeySlot, out.TokenID, out.TokenType = &rec.Slot, &rec.Token, token.RecoveryType
		if !o.json {
			printRecoveryKey(g, rec.Key)
		}
	}
	if tpm {
		p, err := o.tpm2.params(g)
		if err != nil {
			return err
		}
		defer secmem.Free(p.PIN)
		k, err := unlockImage(g, e, o.key, path, passPrompt(path), o.keySlot)
		if err != nil {
			return err
		}
		slot, id, err := e.EnrollTPM2(k, p, nil)
		k.Clear()
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		keep = slot
		out.KeySlot, out.TokenID, out.TokenType = &slot, &id, tpm2.Type
		if !o.json {
			info(g, "%s: TPM2 token enrolled in key slot %d, token %d", path, slot, id)
		}
	}
	if pin != nil {
		c, err := enrollClevis(g, e, o, pin, path)
		if err != nil {
			return err
		}
		keep = c.Slot
		out.KeySlot, out.TokenID, out.TokenType = &c.Slot, &c.Token, clevis.Type
	}
	slots, tokens, err := e.WipeSlots(wipe, keep, nil)
	if err != nil {
		if rec != nil {
			err = fmt.Errorf("%w (the recovery key in key slot %d was enrolled before)", err, rec.Slot)
			if o.json {
				// The key must not be lost with the error.
				out.RecoveryKey = string(rec.Key)
				json.NewEncoder(g.stdout).Encode(out)
			}
		} else if keep >= 0 {
			err = fmt.Errorf("%w (the %s token in key slot %d was enrolled before)", err, out.TokenType, keep)
		}
		return fmt.Errorf("%s: %w", path, err)
	}
	out.WipedSlots = append(out.WipedSlots, slots...)
	out.WipedTokens = append(out.WipedTokens, tokens...)
	if o.json {
		if rec != nil {
			out.RecoveryKey = string(rec.Key)
		}
		return json.NewEncoder(g.stdout).Encode(out)
	}
	if rec != nil {
		info(g, "%s: recovery key enrolled in key slot %d, token %d", path, rec.Slot, rec.Token)
	}
	if pin != nil {
		info(g, "%s: clevis %s binding enrolled in key slot %d, token %d", path, pin.Name(), *out.KeySlot, *out.TokenID)
	}
	for _, s := range slots {
		info(g, "%s: wiped key slot %d", path, s)
	}
	for _, t := range tokens {
		info(g, "%s: removed token %d", path, t)
	}
	return nil
}

// printRecoveryKey writes the key on stdout, one line; on a terminal,
// stderr also says what it is and to keep it safe, as systemd-cryptenroll
// does (without its QR code).
func printRecoveryKey(g *globalOptions, key []byte) {
	tty := g.stderrIsTerminal() && !g.quiet
	if tty {
		fmt.Fprint(g.stderr, "A secret recovery key has been generated for this image:\n\n    ")
	}
	g.stdout.Write(key)
	g.stdout.Write([]byte{'\n'})
	if tty {
		fmt.Fprint(g.stderr, "\nKeep it in a safe place: it opens the image when the other keys are lost, and\n"+
			"can be typed wherever a passphrase is asked for. It is not stored anywhere else.\n")
	}
}
