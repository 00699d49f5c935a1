package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"

	"github.com/countersign/countersign/contracts/receipt"
)

// cmdReceipts runs 'receipts keygen' and 'receipts public': key files for
// operators, so a rotation needs no hand-written JSON.
func cmdReceipts(args []string, out io.Writer) error {
	if len(args) > 0 && isHelp(args[0]) {
		fmt.Fprint(out, usageText("receipts"))
		return flag.ErrHelp
	}
	if len(args) == 0 {
		return errors.New("receipts: want 'receipts keygen' or 'receipts public'")
	}
	switch args[0] {
	case "keygen":
		return cmdReceiptsKeygen(args[1:], out)
	case "public":
		return cmdReceiptsPublic(args[1:], out)
	}
	return fmt.Errorf("receipts: unknown command %q (keygen, public)", args[0])
}

// cmdReceiptsKeygen makes a signing key. Alone it prints a private key file
// holding just that key; with --into it puts the key first in that file
// (created if need be), so it signs from the next start while the older
// keys still verify, and with --public it puts its public half first in a
// public key file too.
func cmdReceiptsKeygen(args []string, out io.Writer) error {
	flags := newFlagSet("receipts keygen", out)
	into := flags.String("into", "", "private key file to put the new key first in (created with mode 0600)")
	public := flags.String("public", "", "public key file (JWKS) to put the new key's public half first in")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("receipts keygen: unexpected argument %q", flags.Arg(0))
	}
	if *public != "" && *into == "" {
		return errors.New("receipts keygen: --public needs --into (the private key must be kept somewhere)")
	}
	k, err := receipt.GenerateKey()
	if err != nil {
		return err
	}
	if *into == "" {
		data, err := receipt.MarshalPrivateJWKS([]receipt.PrivateKey{k})
		if err != nil {
			return err
		}
		_, err = out.Write(append(data, '\n'))
		return err
	}
	keys, err := existingPrivateKeys(*into)
	if err != nil {
		return err
	}
	data, err := receipt.MarshalPrivateJWKS(append([]receipt.PrivateKey{k}, keys...))
	if err != nil {
		return err
	}
	if err := writeFileAtomic(*into, data, 0o600); err != nil {
		return err
	}
	if *public != "" {
		set := receipt.NewKeySet()
		if old, err := os.ReadFile(*public); err == nil {
			if set, err = receipt.ParseJWKS(old); err != nil {
				return fmt.Errorf("receipts keygen: %s: %w", *public, err)
			}
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("receipts keygen: %w", err)
		}
		pub, err := json.MarshalIndent(receipt.NewKeySet(k).Merge(set).JWKS(), "", "  ")
		if err != nil {
			return err
		}
		if err := writeFileAtomic(*public, pub, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "New receipt key %s signs from the next start; %d older key(s) in %s still verify.\n", k.ID, len(keys), *into)
	fmt.Fprintf(out, "Remove an old key from the files once the receipts it signed have expired (receipts.ttl, 5m by default).\n")
	return nil
}

// cmdReceiptsPublic prints the public key file (JWKS) of a private one:
// what API replicas that hold no private key serve (receipts.public_keys).
func cmdReceiptsPublic(args []string, out io.Writer) error {
	fs := newFlagSet("receipts public", out)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("receipts public: want one private key file")
	}
	keys, err := readPrivateKeyFile(fs.Arg(0))
	if err != nil {
		return err
	}
	data, err := json.MarshalIndent(receipt.NewKeySet(keys...).JWKS(), "", "  ")
	if err != nil {
		return err
	}
	_, err = out.Write(append(data, '\n'))
	return err
}

// existingPrivateKeys are the keys of a private key file, none when it does
// not exist yet.
func existingPrivateKeys(path string) ([]receipt.PrivateKey, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return readPrivateKeyFile(path)
}

// writeFileAtomic replaces path with data: written beside it, then renamed.
func writeFileAtomic(path string, data []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), mode); err != nil {
		return err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
