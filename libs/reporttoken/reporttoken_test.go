package reporttoken

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/metadata"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

func TestTokenTravelsInMetadata(t *testing.T) {
	out, _ := metadata.FromOutgoingContext(Attach(context.Background(), "tok"))
	tok, err := FromIncoming(metadata.NewIncomingContext(context.Background(), out))
	require.NoError(t, err)
	assert.Equal(t, "tok", tok)

	for name, md := range map[string]metadata.MD{
		"none":     nil,
		"no value": metadata.Pairs("authorization", "Bearer "),
		"basic":    metadata.Pairs("authorization", "Basic dTpw"),
		"two":      metadata.Pairs("authorization", "Bearer a", "authorization", "Bearer b"),
	} {
		_, err := FromIncoming(metadata.NewIncomingContext(context.Background(), md))
		assert.ErrorIs(t, err, ErrNoToken, name)
	}
}

func TestFileIsReadOnEveryUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	f := File(path)
	_, err := f.Token()
	assert.Error(t, err, "no file yet")
	require.NoError(t, os.WriteFile(path, []byte("one\n"), 0o600))
	tok, err := f.Token()
	require.NoError(t, err)
	assert.Equal(t, "one", tok)
	require.NoError(t, os.WriteFile(path, []byte("two"), 0o600)) // the kubelet rotated it
	tok, err = f.Token()
	require.NoError(t, err)
	assert.Equal(t, "two", tok)
	require.NoError(t, os.WriteFile(path, nil, 0o600))
	_, err = f.Token()
	assert.Error(t, err, "empty")
}

// reviewing answers every TokenReview with st.
func reviewing(st authenticationv1.TokenReviewStatus) client.Client {
	return fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			obj.(*authenticationv1.TokenReview).Status = st
			return nil
		},
	}).Build()
}

func TestReview(t *testing.T) {
	const aud = "fnrunner-config-reconciler"
	bound := authenticationv1.UserInfo{
		Username: "system:serviceaccount:porch-fn-system:fnrunner-binary-runner",
		Extra: map[string]authenticationv1.ExtraValue{
			"authentication.kubernetes.io/pod-name": {"fnrunner-binary-runner-x"},
			"authentication.kubernetes.io/pod-uid":  {"u-1"},
		},
	}
	p, err := Reviewer{Client: reviewing(authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud}, User: bound}), Audience: aud}.Review(context.Background(), "t")
	require.NoError(t, err)
	assert.Equal(t, Pod{Namespace: "porch-fn-system", ServiceAccount: "fnrunner-binary-runner", Name: "fnrunner-binary-runner-x", UID: "u-1"}, p)

	unbound := bound
	unbound.Extra = nil
	user := authenticationv1.UserInfo{Username: "alice", Extra: bound.Extra}
	for name, st := range map[string]authenticationv1.TokenReviewStatus{
		"not authenticated":     {Authenticated: false, Error: "token expired"},
		"another audience":      {Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"}, User: bound},
		"not bound to a pod":    {Authenticated: true, Audiences: []string{aud}, User: unbound},
		"not a service account": {Authenticated: true, Audiences: []string{aud}, User: user},
	} {
		_, err := Reviewer{Client: reviewing(st), Audience: aud}.Review(context.Background(), "t")
		assert.ErrorIs(t, err, ErrInvalid, name)
	}
}
