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
// private JWKS (for the arbiter role), COUNTERSIGN_RECEIPT_API_KEYS one for
// the API role, COUNTERSIGN_RECEIPT_PUBLIC_KEYS a public one (for API
// replicas that hold none of the arbiter's private keys); each wins over
// its file.
type receiptsConfig struct {
	// Keys is the private key file (a JWKS whose keys carry d): the first
	// key signs, the others still verify. Default: <data>/receipt-keys.json,
	// generated (mode 0600) when it does not exist.
	Keys string `yaml:"keys"`
	// PublicKeys is a public JWKS file of keys that verify but do not sign:
	// what API replicas serve when they hold no private key, and old keys
	// kept through a rotation.
	PublicKeys string `yaml:"public_keys"`
	// APIKeys is the API's own private key file: the API signs the receipts
	// of calls allowed without an approval (under a standing grant, or by a
	// rule with receipt: true) with its first key. Only the API role reads
	// it. Without it, an API in the same process as the arbiter (or on the
	// same data directory) signs with the arbiter's keys, and one that holds
	// neither signs none.
	APIKeys string `yaml:"api_keys"`
	// TTL is how long a receipt is valid (default 5m, at most 1h).
	TTL string `yaml:"ttl"`
	// Issuer is the receipts' iss (default "countersign").
	Issuer string `yaml:"issuer"`
}

// receiptKeys are what the roles of this process hold: the arbiter's
// signer (nil for a process that runs no arbiter or holds no private key),
// the API's signer (nil when the API holds no key) and the public keys the
// API serves.
type receiptKeys struct {
	signer    *receipt.Signer
	apiSigner *receipt.Signer
	public    *receipt.KeySet
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
	var apiKeys []receipt.PrivateKey
	var apiSource string
	if cfg.has(roleAPI) {
		if apiKeys, apiSource, err = apiReceiptKeys(rc); err != nil {
			return nil, err
		}
	}
	// An API given keys of its own or public ones needs none of the arbiter's.
	private, source, err := privateReceiptKeys(cfg, cfg.has(roleArbiter) || (public == nil && apiKeys == nil), log)
	if err != nil {
		return nil, err
	}
	out := &receiptKeys{public: receipt.NewKeySet(private...).Merge(public)}
	signer := func(k receipt.PrivateKey) (*receipt.Signer, error) {
		s, err := receipt.NewSigner(receipt.SignerConfig{Key: k, Issuer: rc.Issuer, TTL: ttl})
		if err != nil {
			return nil, fmt.Errorf("config: receipts: %w", err)
		}
		return s, nil
	}
	if len(private) > 0 && cfg.has(roleArbiter) {
		if out.signer, err = signer(private[0]); err != nil {
			return nil, err
		}
		log.Info("receipts are signed", "kid", private[0].ID, "keys", source, "verifying_keys", out.public.Len())
	}
	if !cfg.has(roleAPI) {
		return out, nil
	}
	switch {
	case len(apiKeys) > 0:
		// The API publishes its own keys with the arbiter's.
		out.public = out.public.Merge(receipt.NewKeySet(apiKeys...))
		if out.apiSigner, err = signer(apiKeys[0]); err != nil {
			return nil, err
		}
		log.Info("the API signs receipts of grants and policy rules", "kid", apiKeys[0].ID, "keys", apiSource)
	case len(private) > 0:
		// One host: the API signs with the arbiter's keys.
		if out.apiSigner, err = signer(private[0]); err != nil {
			return nil, err
		}
	default:
		log.Info("the API holds no receipt signing key: calls allowed under a standing grant or by a rule with receipt: true get no receipt (receipts.api_keys, see docs/receipts.md)")
	}
	return out, nil
}

// apiReceiptKeys are the API's own private keys and where they came from;
// none when none are configured.
func apiReceiptKeys(rc receiptsConfig) ([]receipt.PrivateKey, string, error) {
	if env := os.Getenv("COUNTERSIGN_RECEIPT_API_KEYS"); env != "" {
		keys, err := receipt.ParsePrivateJWKS([]byte(env))
		if err != nil {
			return nil, "", fmt.Errorf("COUNTERSIGN_RECEIPT_API_KEYS: %w", err)
		}
		return keys, "COUNTERSIGN_RECEIPT_API_KEYS", nil
	}
	if rc.APIKeys == "" {
		return nil, "", nil
	}
	keys, err := readPrivateKeyFile(rc.APIKeys)
	if err != nil {
		return nil, "", fmt.Errorf("config: receipts.api_keys: %w", err)
	}
	return keys, rc.APIKeys, nil
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
	_, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && !configured && need:
		return generateReceiptKey(cfg, path, log)
	case errors.Is(err, fs.ErrNotExist) && !need:
		return nil, "", nil
	case err != nil:
		return nil, "", fmt.Errorf("receipt keys: %w", err)
	}
	keys, err := readPrivateKeyFile(path)
	if err != nil {
		return nil, "", err
	}
	return keys, path, nil
}

// readPrivateKeyFile reads a private key file, which only its owner may read.
func readPrivateKeyFile(path string) ([]receipt.PrivateKey, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("receipt keys: %w", err)
	}
	if info.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("receipt keys %s: private keys must be readable by their owner only (chmod 600 %s)", path, path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("receipt keys: %w", err)
	}
	keys, err := receipt.ParsePrivateJWKS(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
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
