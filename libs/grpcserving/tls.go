package grpcserving

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// TLSFlags configure mutual TLS between fnrunner's internal services. All
// three set: internal servers require and verify client certificates signed
// by the CA, and clients verify servers against it. None set: plaintext (the
// default). The porch-facing gateway port always stays plaintext, as porch
// speaks it.
type TLSFlags struct {
	Cert, Key, CA string
}

// Register adds --tls-cert, --tls-key and --tls-ca to fs.
func (f *TLSFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Cert, "tls-cert", "", "PEM certificate for mutual TLS with the other fnrunner services (with --tls-key and --tls-ca).")
	fs.StringVar(&f.Key, "tls-key", "", "PEM private key of --tls-cert.")
	fs.StringVar(&f.CA, "tls-ca", "", "PEM CA bundle that signs every fnrunner service's certificate.")
}

// Enabled reports whether mutual TLS is configured; it fails on a partial
// configuration.
func (f *TLSFlags) Enabled() (bool, error) {
	n := 0
	for _, v := range []string{f.Cert, f.Key, f.CA} {
		if v != "" {
			n++
		}
	}
	switch n {
	case 0:
		return false, nil
	case 3:
		return true, nil
	}
	return false, errors.New("--tls-cert, --tls-key and --tls-ca go together")
}

func (f *TLSFlags) load() (tls.Certificate, *x509.CertPool, error) {
	cert, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("TLS key pair: %w", err)
	}
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return tls.Certificate{}, nil, fmt.Errorf("TLS CA %s: no certificates", f.CA)
	}
	return cert, pool, nil
}

// ServerOptions are the gRPC server options of an internal service.
func (f *TLSFlags) ServerOptions() ([]grpc.ServerOption, error) {
	on, err := f.Enabled()
	if err != nil || !on {
		return nil, err
	}
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}))}, nil
}

// DialOption is the transport credentials for calling another fnrunner service.
func (f *TLSFlags) DialOption() (grpc.DialOption, error) {
	on, err := f.Enabled()
	if err != nil {
		return nil, err
	}
	if !on {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	cert, pool, err := f.load()
	if err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert},
		RootCAs:      pool,
		MinVersion:   tls.VersionTLS13,
	})), nil
}
