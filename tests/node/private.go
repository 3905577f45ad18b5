package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// PrivateRegistry is a registry as a private one is: on the host end of the
// veth, behind TLS with a self-signed certificate (for HostIP) and basic
// auth. The node's containerd trusts the certificate (its certs.d) and has
// no credentials: a pull needs the pod's pull secret.
type PrivateRegistry struct {
	// Host is host:port, for image references.
	Host string
	// User and Password are the credentials it accepts.
	User, Password string
	// CA is the PEM of its certificate, its own CA.
	CA []byte

	transport http.RoundTripper
	mu        sync.Mutex
	requests  []RegistryRequest
}

// RegistryRequest is one request the private registry answered.
type RegistryRequest struct {
	Method, Path, UserAgent string
	// From is the client's address.
	From string
	// Authorized: it carried the registry's credentials.
	Authorized bool
}

// PrivateRegistry starts a private registry for the node, stopped when the
// test ends, and tells the node's containerd to trust its certificate.
func (n *Node) PrivateRegistry(t testing.TB) (*PrivateRegistry, error) {
	cert, caPEM, err := selfSigned(n.HostIP)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(n.HostIP, "0"))
	if err != nil {
		return nil, err
	}
	r := &PrivateRegistry{Host: l.Addr().String(), User: "porch", Password: "node-s3cret", CA: caPEM}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	handler := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		u, p, ok := req.BasicAuth()
		authorized := ok && u == r.User && p == r.Password
		host, _, _ := net.SplitHostPort(req.RemoteAddr)
		r.mu.Lock()
		r.requests = append(r.requests, RegistryRequest{Method: req.Method, Path: req.URL.Path, UserAgent: req.UserAgent(), From: host, Authorized: authorized})
		r.mu.Unlock()
		if !authorized {
			w.Header().Set("WWW-Authenticate", `Basic realm="fnrunner-node"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, req)
	})
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(l, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	r.transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}

	// containerd reads certs.d at each pull: the registry by HTTPS only,
	// its certificate trusted, no credentials.
	dir := filepath.Join(n.dir, "certs.d", r.Host)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		return nil, err
	}
	hosts := fmt.Sprintf("server = \"https://%[1]s\"\n\n[host.\"https://%[1]s\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = %[2]q\n", r.Host, caFile)
	if err := os.WriteFile(filepath.Join(dir, "hosts.toml"), []byte(hosts), 0o644); err != nil {
		return nil, err
	}
	return r, nil
}

// Push pushes img to ref (in this registry) with its credentials.
func (r *PrivateRegistry) Push(ref string, img v1.Image) error {
	parsed, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return err
	}
	return remote.Write(parsed, img, remote.WithTransport(r.transport), remote.WithAuth(&authn.Basic{Username: r.User, Password: r.Password}))
}

// DockerConfigJSON is a .dockerconfigjson with the registry's credentials.
func (r *PrivateRegistry) DockerConfigJSON() []byte {
	auth := base64.StdEncoding.EncodeToString([]byte(r.User + ":" + r.Password))
	out, _ := json.Marshal(map[string]any{"auths": map[string]any{r.Host: map[string]string{"auth": auth}}})
	return out
}

// Requests are the requests answered so far.
func (r *PrivateRegistry) Requests() []RegistryRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]RegistryRequest(nil), r.requests...)
}

// selfSigned makes a certificate for ip that is its own CA.
func selfSigned(ip string) (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "fnrunner node private registry"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.ParseIP(ip)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}
