package main

import (
	"github.com/cryptimg/cryptimg/header"
	"github.com/cryptimg/cryptimg/header/derive"
)

// volumeKey reads --volume-key-file, if given: the raw volume key, exactly
// as long as keyBytes, the key size of spec (cryptsetup luksFormat
// --volume-key-file).
func (o encryptOptions) volumeKey(g *globalOptions, spec string, keyBytes int) ([]byte, error) {
	if o.volumeKeyFile == "" {
		return nil, nil
	}
	if o.volumeKeyFile == "-" && o.key.keyFile == "-" {
		return nil, usagef("only one key can be read from stdin")
	}
	vk, err := readKeyFile(g, keyOptions{keyFile: o.volumeKeyFile})
	if err != nil {
		return nil, err
	}
	if len(vk) != keyBytes {
		clear(vk)
		return nil, usagef("--volume-key-file holds %d bytes; the %s key is %d bits (%d bytes)", len(vk), spec, keyBytes*8, keyBytes)
	}
	return vk, nil
}

// newVolumeKey sets the volume key of a new header from --volume-key-file
// or --master-key-file (with the UUID it is derived for); neither leaves
// it random.
func (o encryptOptions) newVolumeKey(g *globalOptions, p *header.Params) error {
	if o.masterKeyFile == "" {
		vk, err := o.volumeKey(g, p.Cipher, p.KeyBytes)
		p.VolumeKey = vk
		return err
	}
	if o.volumeKeyFile != "" {
		return usagef("--master-key-file and --volume-key-file exclude each other")
	}
	if o.masterKeyFile == "-" && o.key.keyFile == "-" {
		return usagef("only one key can be read from stdin")
	}
	if p.UUID == "" {
		u, err := header.RandomUUID(nil)
		if err != nil {
			return err
		}
		p.UUID = u
	}
	vk, err := deriveVolumeKey(g, o.masterKeyFile, p.UUID, p.KeyBytes)
	p.VolumeKey = vk
	return err
}

// deriveVolumeKey reads the master secret in file and derives the volume
// key of keyBytes for uuid (package derive).
func deriveVolumeKey(g *globalOptions, file, uuid string, keyBytes int) ([]byte, error) {
	u, err := header.CanonicalUUID(uuid)
	if err != nil {
		return nil, err
	}
	m, err := readMaster(g, file)
	if err != nil {
		return nil, err
	}
	defer m.Clear()
	return m.VolumeKey(u, keyBytes)
}

// readMaster reads the master secret of --master-key-file; the caller
// clears the Master.
func readMaster(g *globalOptions, file string) (*derive.Master, error) {
	mk, err := readKeyFile(g, keyOptions{keyFile: file})
	if err != nil {
		return nil, err
	}
	defer clear(mk)
	m, err := derive.New(mk)
	if err != nil {
		return nil, usagef("--master-key-file: %v", err)
	}
	return m, nil
}
