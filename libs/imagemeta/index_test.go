package imagemeta

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// plainRegistry is a registry over plain HTTP on loopback that answers
// what a test wrote: its ping's body, and manifests and blobs by path.
type plainRegistry struct {
	host      string
	ping      []byte
	answers   map[string]answer // by URL path
	manifests atomic.Int64
}

type answer struct {
	contentType string
	body        []byte
}

func newPlainRegistry(t *testing.T, pingBody int) *plainRegistry {
	reg := &plainRegistry{ping: []byte(strings.Repeat("p", pingBody)), answers: map[string]answer{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v2/" {
			_, _ = w.Write(reg.ping)
			return
		}
		if strings.Contains(r.URL.Path, "/manifests/") {
			reg.manifests.Add(1)
		}
		a, ok := reg.answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", a.contentType)
		_, _ = w.Write(a.body)
	}))
	t.Cleanup(srv.Close)
	reg.host = strings.TrimPrefix(srv.URL, "http://")
	return reg
}

// put serves body at the repository's manifests (blob false) or blobs,
// under ref ("" for its digest), and returns its digest.
func (reg *plainRegistry) put(blob bool, ref, contentType, body string) string {
	sum := sha256.Sum256([]byte(body))
	digest := "sha256:" + hex.EncodeToString(sum[:])
	kind := "manifests"
	if blob {
		kind = "blobs"
	}
	if ref == "" {
		ref = digest
	}
	reg.answers["/v2/fns/fn/"+kind+"/"+ref] = answer{contentType: contentType, body: []byte(body)}
	return digest
}

const (
	ociIndex    = "application/vnd.oci.image.index.v1+json"
	ociManifest = "application/vnd.oci.image.manifest.v1+json"
)

// image serves a config (padded by pad bytes) and a manifest (padded too)
// for it, and returns the manifest's digest and size.
func (reg *plainRegistry) image(ref string, pad int) (string, int) {
	config := fmt.Sprintf(`{"architecture":"amd64","os":"linux","config":{"Entrypoint":["/fn"],"Env":["PAD=%s"]}}`, strings.Repeat("c", pad))
	cd := reg.put(true, "", "application/octet-stream", config)
	manifest := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"config":{"mediaType":"application/vnd.oci.image.config.v1+json","size":%d,"digest":%q},"layers":[],"annotations":{"pad":%q}}`,
		ociManifest, len(config), cd, strings.Repeat("m", pad))
	return reg.put(false, ref, ociManifest, manifest), len(manifest)
}

// index serves an index of children under ref, padded by pad bytes, and
// returns its digest and size.
func (reg *plainRegistry) index(ref string, pad int, children ...string) (string, int) {
	body := fmt.Sprintf(`{"schemaVersion":2,"mediaType":%q,"manifests":[%s],"annotations":{"pad":%q}}`, ociIndex, strings.Join(children, ","), strings.Repeat("i", pad))
	return reg.put(false, ref, ociIndex, body), len(body)
}

func child(mediaType, digest string, size int, arch string) string {
	return fmt.Sprintf(`{"mediaType":%q,"digest":%q,"size":%d,"platform":{"architecture":%q,"os":"linux"}}`, mediaType, digest, size, arch)
}

// An image index is followed one level, to its image for the platform;
// an index within it is refused, whether its descriptor says so or only
// the registry's answer does: go-containerregistry alone would follow
// indexes without end, a manifest read each. All the answers of one
// lookup, its ping's too, are read within its budget, two manifests and
// a config.
func TestImageLookupIsBoundedAsAWhole(t *testing.T) {
	const bound, pad = 64 << 10, 60 << 10 // three answers of pad fit a budget of 3 × bound
	for _, tc := range []struct {
		name string
		ping int
		// serve serves fns/fn:v1, and returns the digest it resolves to
		// ("" when it fails).
		serve   func(reg *plainRegistry) string
		message string
		// tooLarge: the lookup fails with ErrTooLarge.
		tooLarge bool
		// manifests is how many manifests the registry was asked for.
		manifests int64
	}{
		{name: "an index: its image for linux/amd64", manifests: 2, serve: func(reg *plainRegistry) string {
			d, size := reg.image("", 0)
			index, _ := reg.index("v1", 0, child(ociManifest, "sha256:"+strings.Repeat("a", 64), 100, "arm64"), child(ociManifest, d, size, "amd64"))
			return index
		}},
		{name: "an index within an index, as its descriptor says", manifests: 1, tooLarge: true, message: "one level of index is followed", serve: func(reg *plainRegistry) string {
			d, size := reg.image("", 0)
			inner, innerSize := reg.index("", 0, child(ociManifest, d, size, "amd64"))
			reg.index("v1", 0, child(ociIndex, inner, innerSize, "amd64"))
			return ""
		}},
		{name: "an index within an index, as only the registry says", manifests: 2, tooLarge: true, message: "one level of index is followed", serve: func(reg *plainRegistry) string {
			d, size := reg.image("", 0)
			inner, innerSize := reg.index("", 0, child(ociManifest, d, size, "amd64"))
			for range 5 {
				inner, innerSize = reg.index("", 0, child(ociManifest, inner, innerSize, "amd64"))
			}
			reg.index("v1", 0, child(ociManifest, inner, innerSize, "amd64"))
			return ""
		}},
		{name: "an index without the platform", manifests: 1, message: "no image for linux/amd64", serve: func(reg *plainRegistry) string {
			d, size := reg.image("", 0)
			reg.index("v1", 0, child(ociManifest, d, size, "arm64"))
			return ""
		}},
		{name: "an index, its image and its config at their largest", manifests: 2, serve: func(reg *plainRegistry) string {
			d, size := reg.image("", pad)
			index, _ := reg.index("v1", pad, child(ociManifest, d, size, "amd64"))
			return index
		}},
		{name: "the same, with a ping's body past what is left", ping: 32 << 10, manifests: 2, tooLarge: true,
			message: fmt.Sprintf("image lookup: too large: more than %d bytes", 3*bound), serve: func(reg *plainRegistry) string {
				d, size := reg.image("", pad)
				reg.index("v1", pad, child(ociManifest, d, size, "amd64"))
				return ""
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := newPlainRegistry(t, tc.ping)
			want := tc.serve(reg)
			r, err := New(Options{AllowedRegistries: []string{reg.host}, MaxManifestSize: bound, MaxConfigSize: bound})
			require.NoError(t, err)
			m, err := r.Resolve(t.Context(), reg.host+"/fns/fn:v1")
			if tc.message == "" {
				require.NoError(t, err)
				assert.Equal(t, want, m.Digest, "the index's digest: pods pull what the reference names")
				assert.Equal(t, []string{"/fn"}, m.Entrypoint)
			} else {
				assert.ErrorContains(t, err, tc.message)
				if tc.tooLarge {
					assert.ErrorIs(t, err, ErrTooLarge)
				}
			}
			assert.Equal(t, tc.manifests, reg.manifests.Load(), "manifests asked for")
		})
	}
}
