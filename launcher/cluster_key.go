package launcher

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
)

// EnvClusterKey names the environment variable that holds the cluster key when --cluster-key-file
// is not given.
const EnvClusterKey = "DDP_CLUSTER_KEY"

// ParseClusterKey decodes a cluster key: base64 (as `openssl rand -base64 32` prints it) or hex,
// of 16, 24 or 32 bytes (AES-128/192/256-GCM, memberlist's keyring). Surrounding space is ignored.
func ParseClusterKey(s string) ([]byte, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, fmt.Errorf("launcher: cluster key is empty")
	}
	var key []byte
	if b, err := hex.DecodeString(s); err == nil {
		key = b
	} else if b, err := base64.StdEncoding.DecodeString(s); err == nil {
		key = b
	} else {
		return nil, fmt.Errorf("launcher: cluster key is neither hex nor base64")
	}
	switch len(key) {
	case 16, 24, 32:
		return key, nil
	}
	return nil, fmt.Errorf("launcher: cluster key has %d bytes; want 16, 24 or 32 (e.g. `openssl rand -base64 32`)", len(key))
}

// LoadClusterKey reads the key from file when it is not "", else from $DDP_CLUSTER_KEY (getenv).
// No key at all returns nil, nil: gossip in the clear, which multi-host jobs warn about.
func LoadClusterKey(file string, getenv func(string) string) ([]byte, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("launcher: --cluster-key-file: %w", err)
		}
		k, err := ParseClusterKey(string(b))
		if err != nil {
			return nil, fmt.Errorf("%w (in %s)", err, file)
		}
		return k, nil
	}
	if s := getenv(EnvClusterKey); s != "" {
		k, err := ParseClusterKey(s)
		if err != nil {
			return nil, fmt.Errorf("%w (in $%s)", err, EnvClusterKey)
		}
		return k, nil
	}
	return nil, nil
}

// DeriveToken is the DDP_TOKEN of a multi-host job: HMAC-SHA256(key, "goddp/ddp-token/v1" ‖ 0 ‖ job)
// as 64 hex digits. Every host with the cluster key computes the same token without sending it;
// a host with another key computes another one, so its workers are refused by the gRPC data plane.
// With no key the token is the same function of an empty key: it only separates jobs, it does not
// keep anyone out (hence the warning).
func DeriveToken(key []byte, job string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("goddp/ddp-token/v1\x00" + job))
	return hex.EncodeToString(m.Sum(nil))
}

// KeyID is a short public fingerprint of a key for logs ("key 3f2a9c01"): it tells two keys apart
// without revealing either. "none" for no key.
func KeyID(key []byte) string {
	if len(key) == 0 {
		return "none"
	}
	m := hmac.New(sha256.New, key)
	m.Write([]byte("goddp/key-id/v1"))
	return hex.EncodeToString(m.Sum(nil)[:4])
}
