// Package reporttoken proves which pod sent a binary-runner's report: the
// runner sends a service account token that Kubernetes bound to its pod and
// to the config-reconciler's audience (a projected volume, rotated by the
// kubelet), and the config-reconciler asks the apiserver (TokenReview) whose
// it is. A report's runner name alone is a claim anyone who reaches :9447
// could make; the token is what only that pod holds.
package reporttoken

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"google.golang.org/grpc/metadata"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultAudience is the audience deploy/ binds the runners' tokens to:
// the apiserver itself refuses a token of this audience, so the token is
// good for reports and nothing else.
const DefaultAudience = "fnrunner-config-reconciler"

// header is the gRPC metadata key the token travels in (as "Bearer <token>").
const header = "authorization"

// Bound pod claims a TokenReview returns for a token bound to a pod.
const (
	extraPodName = "authentication.kubernetes.io/pod-name"
	extraPodUID  = "authentication.kubernetes.io/pod-uid"
)

// ErrNoToken: the call carried no token.
var ErrNoToken = errors.New("no service account token (authorization: Bearer) sent")

// ErrInvalid: the apiserver did not authenticate the token for the
// audience, or it is not a service account token bound to a pod.
var ErrInvalid = errors.New("service account token not valid")

// File is the path of a token file, read on every use: the kubelet
// replaces a projected token before it expires.
type File string

// Token returns the file's token.
func (f File) Token() (string, error) {
	data, err := os.ReadFile(string(f))
	if err != nil {
		return "", fmt.Errorf("reading the report token: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("report token file %s is empty", string(f))
	}
	return tok, nil
}

// Attach returns ctx with token in its outgoing gRPC metadata.
func Attach(ctx context.Context, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, header, "Bearer "+token)
}

// FromIncoming returns the token a gRPC call carried, or ErrNoToken.
func FromIncoming(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(header)
	if len(vals) != 1 {
		return "", ErrNoToken
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	if !ok || strings.TrimSpace(tok) == "" {
		return "", ErrNoToken
	}
	return strings.TrimSpace(tok), nil
}

// Pod is who a token speaks for.
type Pod struct {
	Namespace, ServiceAccount, Name string
	UID                             types.UID
}

// Reviewer asks the apiserver whose a token is.
type Reviewer struct {
	// Client creates TokenReviews (authentication.k8s.io/v1, create: the
	// system:auth-delegator ClusterRole grants it).
	Client client.Client
	// Audience the token must have been issued for.
	Audience string
}

// Review returns the pod token is bound to. A token the apiserver does not
// authenticate for r.Audience, or one not bound to a pod, wraps ErrInvalid;
// any other error is the apiserver's (try again).
func (r Reviewer) Review(ctx context.Context, token string) (Pod, error) {
	tr := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: []string{r.Audience}}}
	if err := r.Client.Create(ctx, tr); err != nil {
		return Pod{}, fmt.Errorf("reviewing a report token: %w", err)
	}
	st := tr.Status
	if !st.Authenticated {
		why := st.Error
		if why == "" {
			why = "not authenticated"
		}
		return Pod{}, fmt.Errorf("%w for audience %s: %s", ErrInvalid, r.Audience, why)
	}
	if !slices.Contains(st.Audiences, r.Audience) {
		return Pod{}, fmt.Errorf("%w: not issued for audience %s", ErrInvalid, r.Audience)
	}
	ns, sa, ok := serviceAccount(st.User.Username)
	name, uid := st.User.Extra[extraPodName], st.User.Extra[extraPodUID]
	if !ok || len(name) != 1 || len(uid) != 1 {
		return Pod{}, fmt.Errorf("%w: user %q is not a service account token bound to a pod", ErrInvalid, st.User.Username)
	}
	return Pod{Namespace: ns, ServiceAccount: sa, Name: name[0], UID: types.UID(uid[0])}, nil
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
