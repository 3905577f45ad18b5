package imagemeta

import (
	"context"
	"encoding/base64"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const user, pass = "porch", "s3cret"

// privateRegistry is go-containerregistry's registry on loopback, behind
// basic auth and TLS with a self-signed certificate.
func privateRegistry(t *testing.T) (*httptest.Server, string) {
	t.Helper()
	reg := registry.New()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pass {
			w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.crt")
	pemData := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(ca, pemData, 0o644); err != nil {
		t.Fatal(err)
	}
	return srv, ca
}

func push(t *testing.T, srv *httptest.Server, ref string, cfg v1.Config) v1.Hash {
	t.Helper()
	img, err := random.Image(256, 1)
	if err != nil {
		t.Fatal(err)
	}
	img, err = mutate.Config(img, cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := name.ParseReference(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(r, img, remote.WithAuth(&authn.Basic{Username: user, Password: pass}), remote.WithTransport(srv.Client().Transport)); err != nil {
		t.Fatal(err)
	}
	d, err := img.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func writeDockerConfig(t *testing.T, host string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), ".dockerconfigjson")
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + pass))
	if err := os.WriteFile(p, []byte(`{"auths":{"https://`+host+`/v1/":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPrivateRegistryWithCustomCA(t *testing.T) {
	srv, ca := privateRegistry(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	image := host + "/fns/set-namespace:v1"
	digest := push(t, srv, image, v1.Config{Entrypoint: []string{"/usr/local/bin/function"}})
	cmdOnly := push(t, srv, host+"/fns/cmd-only:v1", v1.Config{Cmd: []string{"/fn", "--serve"}})

	r, err := New(Options{DockerConfigPath: writeDockerConfig(t, host), CAPaths: []string{filepath.Dir(ca)}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	meta, err := r.Resolve(ctx, image)
	if err != nil {
		t.Fatal(err)
	}
	if meta.Digest != digest.String() || !reflect.DeepEqual(meta.Entrypoint, []string{"/usr/local/bin/function"}) {
		t.Errorf("meta = %+v, want digest %s", meta, digest)
	}
	if meta, err := r.Resolve(ctx, host+"/fns/cmd-only:v1"); err != nil || meta.Digest != cmdOnly.String() || meta.Entrypoint[0] != "/fn" {
		t.Errorf("Cmd fallback: %+v %v", meta, err)
	}

	// Without credentials: refused, saying so.
	anon, err := New(Options{CAPaths: []string{ca}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := anon.Resolve(ctx, image); err == nil || !strings.Contains(strings.ToLower(err.Error()), "unauthorized") {
		t.Errorf("anonymous resolve: %v", err)
	}
	// Without the CA: the certificate is not trusted.
	noCA, err := New(Options{DockerConfigPath: writeDockerConfig(t, host)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noCA.Resolve(ctx, image); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("resolve without the CA: %v", err)
	}
}

func TestTagsExpireDigestsDoNot(t *testing.T) {
	srv, ca := privateRegistry(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	image := host + "/fns/fn:v1"
	first := push(t, srv, image, v1.Config{Entrypoint: []string{"/one"}})
	r, err := New(Options{DockerConfigPath: writeDockerConfig(t, host), CAPaths: []string{ca}, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	r.now = func() time.Time { return now }
	ctx := context.Background()
	if m, _ := r.Resolve(ctx, image); m.Digest != first.String() {
		t.Fatalf("first = %+v", m)
	}
	pinned := host + "/fns/fn@" + first.String()
	if m, err := r.Resolve(ctx, pinned); err != nil || m.Digest != first.String() {
		t.Fatalf("pinned: %+v %v", m, err)
	}

	second := push(t, srv, image, v1.Config{Entrypoint: []string{"/two"}}) // the tag moves
	if m, _ := r.Resolve(ctx, image); m.Digest != first.String() {
		t.Errorf("within the TTL: %+v, want the cached %s", m, first)
	}
	now = now.Add(2 * time.Minute)
	if m, _ := r.Resolve(ctx, image); m.Digest != second.String() || m.Entrypoint[0] != "/two" {
		t.Errorf("after the TTL: %+v, want %s", m, second)
	}
	srv.Close() // a digest never needs the registry again
	if m, err := r.Resolve(ctx, pinned); err != nil || m.Digest != first.String() {
		t.Errorf("pinned after the TTL, registry gone: %+v %v", m, err)
	}
}
