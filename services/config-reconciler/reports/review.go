package reports

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Sender is the pod a report's token is bound to.
type Sender struct {
	Namespace, ServiceAccount, Name string
	UID                             types.UID
}

// ErrTokenInvalid: the apiserver did not authenticate a token for the
// audience, or it is not a service account token bound to a pod.
var ErrTokenInvalid = errors.New("service account token not valid")

// Bound pod claims a TokenReview returns for a token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// TokenReview asks the apiserver whose a token is.
type TokenReview struct {
	// Client creates TokenReviews (authentication.k8s.io/v1, create:
	// deploy/ grants it with a ClusterRole of its own).
	Client client.Writer
	// Audience the token must have been issued for.
	Audience string
}

var _ TokenReviewer = TokenReview{}

// Review returns the pod token is bound to. A token the apiserver does not
// authenticate for r.Audience, or one not bound to a pod, wraps
// ErrTokenInvalid; any other error is the apiserver's (try again).
func (r TokenReview) Review(ctx context.Context, token string) (Sender, error) {
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{r.Audience}}}
	if err := r.Client.Create(ctx, tr); err != nil {
		return Sender{}, fmt.Errorf("reviewing a report token: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		why := st.Error
		if why == "" {
			why = "not authenticated"
		}
		return Sender{}, fmt.Errorf("%w for audience %s: %s", ErrTokenInvalid, r.Audience, why)
	}
	// An apiserver without implicit audiences authenticates a token
	// whose audiences miss the ones asked for; its answer says so.
	if !slices.Contains(st.Audiences, r.Audience) {
		return Sender{}, fmt.Errorf("%w: not issued for audience %s", ErrTokenInvalid, r.Audience)
	}
	ns, sa, ok := serviceAccount(st.User.Username)
	name, uid := st.User.Extra[extraPodName], st.User.Extra[extraPodUID]
	if !ok || len(name) != 1 || len(uid) != 1 {
		return Sender{}, fmt.Errorf("%w: user %q is not a service account token bound to a pod", ErrTokenInvalid, st.User.Username)
	}
	return Sender{Namespace: ns, ServiceAccount: sa, Name: name[0], UID: types.UID(uid[0])}, nil
}

// serviceAccount splits "system:serviceaccount:<namespace>:<name>".
func serviceAccount(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	if !ok {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != ""
}
