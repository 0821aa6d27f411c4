package allreduce

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"strconv"

	"github.com/goddp/goddp/allreduce/link"
)

// The environment, read here and nowhere else in the package: ConfigFromEnv turns it into a
// Config, and everything else takes its settings from the Config.

// Environment variables ddplaunch sets from --tls-cert/--tls-key/--tls-ca (multi-host jobs).
const (
	EnvTLSCert = "DDP_TLS_CERT" // PEM certificate of this rank's data plane
	EnvTLSKey  = "DDP_TLS_KEY"  // its private key
	EnvTLSCA   = "DDP_TLS_CA"   // PEM CA bundle every peer's certificate must chain to
)

const (
	// EnvTransport selects Config.TransportKind in ConfigFromEnv.
	EnvTransport = "DDP_TRANSPORT"
	// EnvSharedMem sets Config.SharedMemBytes in ConfigFromEnv (0: no shared memory).
	EnvSharedMem = "DDP_SHM_BYTES"
)

// envKnobs are the developer knobs of the data planes (Config's last fields). A byte count of
// 0 in the environment means "none" (the field's negative value) where the field has one.
var envKnobs = []struct {
	name  string
	field func(*Config) *int  // a byte count
	flag  func(*Config) *bool // or a switch, set by the variable being 0
	zero  bool                // 0 is allowed (a field's "none")
}{
	{name: "DDP_GRPC_UNIX", flag: func(c *Config) *bool { return &c.GRPCNoUnix }},
	{name: "DDP_GRPC_RX", flag: func(c *Config) *bool { return &c.GRPCNoRxInPlace }},
	{name: "DDP_GRPC_UNIX_SNDBUF", field: func(c *Config) *int { return &c.GRPCUnixSendBuf }, zero: true},
	{name: "DDP_UNIX_SNDBUF", field: func(c *Config) *int { return &c.TCPUnixSendBuf }, zero: true},
	{name: "DDP_GRPC_WINDOW", field: func(c *Config) *int { return &c.GRPCWindow }},
	{name: "DDP_GRPC_WBUF", field: func(c *Config) *int { return &c.GRPCWriteBuf }, zero: true},
	{name: "DDP_GRPC_RBUF", field: func(c *Config) *int { return &c.GRPCReadBuf }, zero: true},
	{name: "DDP_GRPC_SLAB", field: func(c *Config) *int { return &c.GRPCSlabBytes }},
}

// knobsFromEnv sets cfg's developer knobs from the variables that are set.
func knobsFromEnv(cfg *Config) error {
	for _, k := range envKnobs {
		v, ok := os.LookupEnv(k.name)
		if !ok || v == "" {
			continue
		}
		if k.flag != nil {
			on, err := strconv.ParseBool(v)
			if err != nil {
				return fmt.Errorf("allreduce: environment variable %s=%q is not 0 or 1", k.name, v)
			}
			*k.flag(cfg) = !on
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 || (n == 0 && !k.zero) {
			least := "1"
			if k.zero {
				least = "0"
			}
			return fmt.Errorf("allreduce: environment variable %s=%q is not a byte count (at least %s)", k.name, v, least)
		}
		if n == 0 {
			n = -1
		}
		*k.field(cfg) = n
	}
	return nil
}

// ConfigFromEnv reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and DDP_TOKEN, as torchrun
// and ddplaunch set them, and DDP_TRANSPORT, DDP_SHM_BYTES, the TLS files (TLSFromEnv) and the
// data planes' developer knobs (DDP_GRPC_*, DDP_UNIX_SNDBUF: Config's last fields) where set.
// A variable with a bad value is an error naming it. WORLD_SIZE 1 needs neither MASTER_ADDR
// nor MASTER_PORT.
func ConfigFromEnv() (Config, error) {
	var cfg Config
	atoi := func(name string) (int, error) {
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return 0, fmt.Errorf("allreduce: environment variable %s is not set", name)
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("allreduce: environment variable %s=%q is not an integer", name, v)
		}
		return n, nil
	}
	var err error
	if cfg.Rank, err = atoi("RANK"); err != nil {
		return cfg, err
	}
	if cfg.WorldSize, err = atoi("WORLD_SIZE"); err != nil {
		return cfg, err
	}
	if cfg.WorldSize < 1 {
		return cfg, fmt.Errorf("allreduce: environment variable WORLD_SIZE=%d must be at least 1", cfg.WorldSize)
	}
	if cfg.Rank < 0 || cfg.Rank >= cfg.WorldSize {
		return cfg, fmt.Errorf("allreduce: environment variable RANK=%d is outside [0,%d) (WORLD_SIZE)", cfg.Rank, cfg.WorldSize)
	}
	cfg.Token = os.Getenv("DDP_TOKEN")
	cfg.TransportKind = os.Getenv(EnvTransport)
	if _, err := link.ParseTransportKind(cfg.TransportKind); err != nil {
		return cfg, fmt.Errorf("%w (environment variable %s)", err, EnvTransport)
	}
	if v, ok := os.LookupEnv(EnvSharedMem); ok && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return cfg, fmt.Errorf("allreduce: environment variable %s=%q is not a byte count (0 turns shared memory off)", EnvSharedMem, v)
		}
		cfg.SharedMemBytes = n
		if n == 0 {
			cfg.SharedMemBytes = -1
		}
	}
	if err := knobsFromEnv(&cfg); err != nil {
		return cfg, err
	}
	if cfg.TLS, err = TLSFromEnv(); err != nil { // multi-host
		return cfg, err
	}
	if cfg.WorldSize == 1 {
		return cfg, nil
	}
	host := os.Getenv("MASTER_ADDR")
	if host == "" {
		return cfg, fmt.Errorf("allreduce: environment variable MASTER_ADDR is not set")
	}
	port, err := atoi("MASTER_PORT")
	if err != nil {
		return cfg, err
	}
	if port <= 0 || port > 65535 {
		return cfg, fmt.Errorf("allreduce: environment variable MASTER_PORT=%d is not a port", port)
	}
	cfg.MasterAddr = net.JoinHostPort(host, strconv.Itoa(port))
	return cfg, nil
}

// TLSFromEnv builds the data plane's mutual-TLS config from DDP_TLS_CERT, DDP_TLS_KEY and
// DDP_TLS_CA; nil, nil when none is set. Both sides present a certificate and verify the other's
// against the CA. Host names are not checked (ranks dial each other by IP); the CA is the trust.
func TLSFromEnv() (*tls.Config, error) {
	cert, key, ca := os.Getenv(EnvTLSCert), os.Getenv(EnvTLSKey), os.Getenv(EnvTLSCA)
	if cert == "" && key == "" && ca == "" {
		return nil, nil
	}
	if cert == "" || key == "" || ca == "" {
		return nil, fmt.Errorf("allreduce: %s, %s and %s go together", EnvTLSCert, EnvTLSKey, EnvTLSCA)
	}
	pair, err := tls.LoadX509KeyPair(cert, key)
	if err != nil {
		return nil, fmt.Errorf("allreduce: TLS key pair: %w", err)
	}
	pem, err := os.ReadFile(ca)
	if err != nil {
		return nil, fmt.Errorf("allreduce: TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("allreduce: TLS CA %s: no PEM certificate in it", ca)
	}
	verify := func(raw [][]byte, _ [][]*x509.Certificate) error {
		if len(raw) == 0 {
			return fmt.Errorf("allreduce: TLS: peer sent no certificate")
		}
		certs := make([]*x509.Certificate, len(raw))
		for i, r := range raw {
			c, err := x509.ParseCertificate(r)
			if err != nil {
				return fmt.Errorf("allreduce: TLS: peer certificate: %w", err)
			}
			certs[i] = c
		}
		inter := x509.NewCertPool()
		for _, c := range certs[1:] {
			inter.AddCert(c)
		}
		_, err := certs[0].Verify(x509.VerifyOptions{Roots: pool, Intermediates: inter,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		if err != nil {
			return fmt.Errorf("allreduce: TLS: peer certificate not signed by %s: %w", ca, err)
		}
		return nil
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{pair},
		ClientAuth:   tls.RequireAnyClientCert, // verified below, against the CA
		// Chains are checked by VerifyPeerCertificate, without host names.
		InsecureSkipVerify:    true, //nolint:gosec // verification is done in VerifyPeerCertificate
		VerifyPeerCertificate: verify,
	}, nil
}
