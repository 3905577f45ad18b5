package reports

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
)

// reviewing answers every TokenReview with st.
func reviewing(st authenticationv1.TokenReviewStatus) client.Client {
	return fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Create: func(_ context.Context, _ client.WithWatch, obj client.Object, _ ...client.CreateOption) error {
			obj.(*authenticationv1.TokenReview).Status = st
			return nil
		},
	}).Build()
}

func TestTokenReview(t *testing.T) {
	const aud = "fnrunner-config-reconciler"
	bound := authenticationv1.UserInfo{
		Username: "system:serviceaccount:porch-fn-system:fnrunner-binary-runner",
		Extra: map[string]authenticationv1.ExtraValue{
			"authentication.kubernetes.io/pod-name": {"fnrunner-binary-runner-x"},
			"authentication.kubernetes.io/pod-uid":  {"u-1"},
		},
	}
	p, err := TokenReview{Client: reviewing(authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{aud}, User: bound}), Audience: aud}.Review(context.Background(), "t")
	require.NoError(t, err)
	assert.Equal(t, Sender{Namespace: "porch-fn-system", ServiceAccount: "fnrunner-binary-runner", Name: "fnrunner-binary-runner-x", UID: "u-1"}, p)

	unbound := bound
	unbound.Extra = nil
	user := authenticationv1.UserInfo{Username: "alice", Extra: bound.Extra}
	for name, st := range map[string]authenticationv1.TokenReviewStatus{
		"not authenticated":     {Authenticated: false, Error: "token expired"},
		"another audience":      {Authenticated: true, Audiences: []string{"https://kubernetes.default.svc"}, User: bound},
		"not bound to a pod":    {Authenticated: true, Audiences: []string{aud}, User: unbound},
		"not a service account": {Authenticated: true, Audiences: []string{aud}, User: user},
	} {
		_, err := TokenReview{Client: reviewing(st), Audience: aud}.Review(context.Background(), "t")
		assert.ErrorIs(t, err, ErrTokenInvalid, name)
	}
}
