package grpcserving

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

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

// ServerOptions are the gRPC server options of an internal service. The
// files are read again when they change (cert-manager or a Secret mount
// rotating them): each new connection is served with the current ones.
func (f *TLSFlags) ServerOptions() ([]grpc.ServerOption, error) {
	on, err := f.Enabled()
	if err != nil || !on {
		return nil, err
	}
	files := &tlsFiles{flags: *f}
	if _, err := files.current(); err != nil {
		return nil, err
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(&tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m, err := files.current()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				Certificates: []tls.Certificate{m.cert},
				ClientCAs:    m.pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				MinVersion:   tls.VersionTLS13,
			}, nil
		},
	}))}, nil
}

// DialOption is the transport credentials for calling another fnrunner
// service; each new connection uses the files as they are then.
func (f *TLSFlags) DialOption() (grpc.DialOption, error) {
	on, err := f.Enabled()
	if err != nil {
		return nil, err
	}
	if !on {
		return grpc.WithTransportCredentials(insecure.NewCredentials()), nil
	}
	files := &tlsFiles{flags: *f}
	if _, err := files.current(); err != nil {
		return nil, err
	}
	return grpc.WithTransportCredentials(&reloadingCreds{files: files}), nil
}

// tlsFiles are the key pair and CA as the files hold them now: read again
// when a file's size, modification time or inode changed (a Secret mount
// swaps them through a symlink, which os.Stat follows).
type tlsFiles struct {
	flags TLSFlags

	mu     sync.Mutex
	stamps [3]fileStamp
	mat    *tlsMaterial
}

type fileStamp struct {
	size int64
	mod  time.Time
	ino  uint64
}

type tlsMaterial struct {
	cert tls.Certificate
	pool *x509.CertPool
}

func (t *tlsFiles) current() (*tlsMaterial, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var stamps [3]fileStamp
	for i, p := range []string{t.flags.Cert, t.flags.Key, t.flags.CA} {
		st, err := os.Stat(p)
		if err != nil {
			if t.mat != nil {
				return t.mat, nil // a file mid-swap: the last good ones
			}
			return nil, fmt.Errorf("TLS file: %w", err)
		}
		stamps[i] = fileStamp{size: st.Size(), mod: st.ModTime()}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			stamps[i].ino = sys.Ino
		}
	}
	if t.mat != nil && stamps == t.stamps {
		return t.mat, nil
	}
	mat, err := t.load()
	if err != nil {
		if t.mat != nil {
			// Mid-rotation (the certificate replaced, its key not yet):
			// the last good files serve until the new ones load.
			return t.mat, nil
		}
		return nil, err
	}
	t.stamps, t.mat = stamps, mat
	return t.mat, nil
}

func (t *tlsFiles) load() (*tlsMaterial, error) {
	cert, err := tls.LoadX509KeyPair(t.flags.Cert, t.flags.Key)
	if err != nil {
		return nil, fmt.Errorf("TLS key pair: %w", err)
	}
	ca, err := os.ReadFile(t.flags.CA)
	if err != nil {
		return nil, fmt.Errorf("TLS CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("TLS CA %s: no certificates", t.flags.CA)
	}
	return &tlsMaterial{cert: cert, pool: pool}, nil
}

// reloadingCreds are TLS client credentials built from the current files for
// each handshake.
type reloadingCreds struct {
	files *tlsFiles
	// server is the name to verify (OverrideServerName); "" takes the
	// dialled authority.
	server string
}

var _ credentials.TransportCredentials = (*reloadingCreds)(nil)

func (c *reloadingCreds) creds() (credentials.TransportCredentials, error) {
	m, err := c.files.current()
	if err != nil {
		return nil, err
	}
	return credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{m.cert},
		RootCAs:      m.pool,
		ServerName:   c.server,
		MinVersion:   tls.VersionTLS13,
	}), nil
}

func (c *reloadingCreds) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cr, err := c.creds()
	if err != nil {
		return nil, nil, err
	}
	return cr.ClientHandshake(ctx, authority, conn)
}

func (c *reloadingCreds) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("client credentials: no server handshake")
}

func (c *reloadingCreds) Info() credentials.ProtocolInfo {
	//lint:ignore SA1019 grpc-go still reads both (a channel's authority comes from ServerName when none is set)
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.3", ServerName: c.server}
}

func (c *reloadingCreds) Clone() credentials.TransportCredentials {
	return &reloadingCreds{files: c.files, server: c.server}
}

// OverrideServerName implements the deprecated part of
// credentials.TransportCredentials, as gRPC's own TLS credentials do.
func (c *reloadingCreds) OverrideServerName(name string) error {
	c.server = name
	return nil
}
