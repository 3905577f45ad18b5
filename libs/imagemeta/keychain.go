package imagemeta

import (
	"os"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
)

// fileKeychain answers from a dockerconfigjson file and reads it again when
// it changes (Kubernetes updates a mounted Secret in place). A file that
// cannot be read any more keeps the credentials last read.
type fileKeychain struct {
	path string

	mu      sync.Mutex
	modTime time.Time
	size    int64
	kc      authn.Keychain
}

var _ authn.Keychain = (*fileKeychain)(nil)

func newFileKeychain(path string) (*fileKeychain, error) {
	k := &fileKeychain{path: path}
	if err := k.reload(); err != nil {
		return nil, err
	}
	return k, nil
}

// reload reads the file when it changed since it was last read.
func (k *fileKeychain) reload() error {
	fi, err := os.Stat(k.path)
	if err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.kc != nil && fi.ModTime().Equal(k.modTime) && fi.Size() == k.size {
		return nil
	}
	kc, err := LoadDockerConfig(k.path)
	if err != nil {
		return err
	}
	k.kc, k.modTime, k.size = kc, fi.ModTime(), fi.Size()
	return nil
}

// Resolve implements authn.Keychain.
func (k *fileKeychain) Resolve(res authn.Resource) (authn.Authenticator, error) {
	_ = k.reload() // on error: the credentials last read
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.kc.Resolve(res)
}
