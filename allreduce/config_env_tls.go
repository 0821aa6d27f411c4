package allreduce

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// Environment variables ddplaunch sets from --tls-cert/--tls-key/--tls-ca (multi-host jobs).
const (
	EnvTLSCert = "DDP_TLS_CERT" // PEM certificate of this rank's data plane
	EnvTLSKey  = "DDP_TLS_KEY"  // its private key
	EnvTLSCA   = "DDP_TLS_CA"   // PEM CA bundle every peer's certificate must chain to
)

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
