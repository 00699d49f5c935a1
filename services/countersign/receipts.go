package main

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/countersign/countersign/contracts/receipt"
)

// fileReceiptKeys is the private key file serve generates under the data
// directory on first start when no keys are configured.
const fileReceiptKeys = "receipt-keys.json"

// receiptsConfig is the receipts: section of countersign.yaml. The keys
// may also come from the environment: COUNTERSIGN_RECEIPT_KEYS holds a
// private JWKS (for the arbiter role), COUNTERSIGN_RECEIPT_PUBLIC_KEYS a
// public one (for API replicas that hold no private key); either wins over
// the file.
type receiptsConfig struct {
	// Keys is the private key file (a JWKS whose keys carry d): the first
	// key signs, the others still verify. Default: <data>/receipt-keys.json,
	// generated (mode 0600) when it does not exist.
	Keys string `yaml:"keys"`
	// PublicKeys is a public JWKS file of keys that verify but do not sign:
	// what API replicas serve when they hold no private key, and old keys
	// kept through a rotation.
	PublicKeys string `yaml:"public_keys"`
	// TTL is how long a receipt is valid (default 5m, at most 1h).
	TTL string `yaml:"ttl"`
	// Issuer is the receipts' iss (default "countersign").
	Issuer string `yaml:"issuer"`
}

// receiptKeys are what the roles of this process hold: the signer (nil
// for a process that holds no private key) and the public keys it serves.
type receiptKeys struct {
	signer *receipt.Signer
	public *receipt.KeySet
}

// loadReceiptKeys reads the configured keys. A process that runs the
// arbiter needs a private key: without one configured it uses, or
// generates, the data directory's. A process that runs only the API needs
// just public keys, and reads the private file only when nothing public is
// configured and the file is there (one host, one data directory).
func loadReceiptKeys(cfg serveConfig, log *slog.Logger) (*receiptKeys, error) {
	rc := cfg.Receipts
	var ttl time.Duration
	if rc.TTL != "" {
		d, err := time.ParseDuration(rc.TTL)
		if err != nil {
			return nil, fmt.Errorf("config: receipts.ttl: %w", err)
		}
		ttl = d
	}
	public, err := publicReceiptKeys(rc)
	if err != nil {
		return nil, err
	}
	private, source, err := privateReceiptKeys(cfg, public == nil || cfg.has(roleArbiter), log)
	if err != nil {
		return nil, err
	}
	out := &receiptKeys{public: receipt.NewKeySet(private...).Merge(public)}
	if len(private) > 0 && cfg.has(roleArbiter) {
		out.signer, err = receipt.NewSigner(receipt.SignerConfig{Key: private[0], Issuer: rc.Issuer, TTL: ttl})
		if err != nil {
			return nil, fmt.Errorf("config: receipts: %w", err)
		}
		log.Info("receipts are signed", "kid", private[0].ID, "keys", source, "verifying_keys", out.public.Len())
	}
	return out, nil
}

func publicReceiptKeys(rc receiptsConfig) (*receipt.KeySet, error) {
	data, name := []byte(os.Getenv("COUNTERSIGN_RECEIPT_PUBLIC_KEYS")), "COUNTERSIGN_RECEIPT_PUBLIC_KEYS"
	if len(data) == 0 && rc.PublicKeys != "" {
		var err error
		if data, err = os.ReadFile(rc.PublicKeys); err != nil {
			return nil, fmt.Errorf("config: receipts.public_keys: %w", err)
		}
		name = rc.PublicKeys
	}
	if len(data) == 0 {
		return nil, nil
	}
	set, err := receipt.ParseJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("config: receipt public keys (%s): %w", name, err)
	}
	return set, nil
}

// privateReceiptKeys returns the private keys and where they came from;
// none when need is false and none are configured or on disk.
func privateReceiptKeys(cfg serveConfig, need bool, log *slog.Logger) ([]receipt.PrivateKey, string, error) {
	if env := os.Getenv("COUNTERSIGN_RECEIPT_KEYS"); env != "" {
		keys, err := receipt.ParsePrivateJWKS([]byte(env))
		if err != nil {
			return nil, "", fmt.Errorf("COUNTERSIGN_RECEIPT_KEYS: %w", err)
		}
		return keys, "COUNTERSIGN_RECEIPT_KEYS", nil
	}
	path, configured := cfg.Receipts.Keys, cfg.Receipts.Keys != ""
	if !configured {
		path = filepath.Join(cfg.Data, fileReceiptKeys)
	}
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !configured && need:
		return generateReceiptKey(cfg, path, log)
	case errors.Is(err, fs.ErrNotExist) && !need:
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("receipt keys: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, "", fmt.Errorf("receipt keys %s: private keys must be readable by their owner only (chmod 600 %s)", path, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("receipt keys: %w", err)
	}
	keys, err := receipt.ParsePrivateJWKS(data)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return keys, path, nil
}

func generateReceiptKey(cfg serveConfig, path string, log *slog.Logger) ([]receipt.PrivateKey, string, error) {
	k, err := receipt.GenerateKey()
	if err != nil {
		return nil, "", err
	}
	data, err := receipt.MarshalPrivateJWKS([]receipt.PrivateKey{k})
	if err != nil {
		return nil, "", err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return nil, "", fmt.Errorf("receipt keys: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return nil, "", fmt.Errorf("receipt keys: %w", err)
	}
	if cfg.NATS.URL != "" {
		log.Warn("generated a receipt key in the data directory; with several arbiter replicas give them all the same keys (receipts.keys or COUNTERSIGN_RECEIPT_KEYS) and the API the public ones, see docs/receipts.md", "path", path, "kid", k.ID)
	} else {
		log.Info("generated a receipt key", "path", path, "kid", k.ID)
	}
	return []receipt.PrivateKey{k}, path, nil
}
