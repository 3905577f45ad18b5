// Package reporttoken carries the proof of which pod sent a binary-runner's
// report: a service account token that Kubernetes bound to the runner's pod
// and to the config-reconciler's audience (a projected volume, rotated by
// the kubelet), sent as gRPC metadata. The config-reconciler asks the
// apiserver whose it is (TokenReview). A report's runner name alone is a
// claim anyone who reaches :9447 could make; the token is held by that
// pod's containers (and by whoever may request tokens for its service
// account).
package reporttoken

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/metadata"
)

// DefaultAudience is the audience deploy/ binds the runners' tokens to:
// the apiserver itself refuses a token of this audience, so the token is
// good for reports and nothing else.
const DefaultAudience = "fnrunner-config-reconciler"

// MaxBytes bounds a token taken from a call: a projected service account
// token is 1–2 KiB; anything much larger is not one, and is not sent on to
// the apiserver.
const MaxBytes = 16 << 10

// header is the gRPC metadata key the token travels in (as "Bearer <token>").
const header = "authorization"

// ErrNoToken: the call carried no token, or more than one.
var ErrNoToken = errors.New("no service account token (authorization: Bearer) sent")

// ErrTooLarge: the call carried a token larger than MaxBytes.
var ErrTooLarge = errors.New("service account token too large")

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

// FromIncoming returns the token a gRPC call carried, or ErrNoToken or
// ErrTooLarge.
func FromIncoming(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get(header)
	if len(vals) != 1 {
		return "", ErrNoToken
	}
	tok, ok := strings.CutPrefix(vals[0], "Bearer ")
	tok = strings.TrimSpace(tok)
	if !ok || tok == "" {
		return "", ErrNoToken
	}
	if len(tok) > MaxBytes {
		return "", fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, len(tok), MaxBytes)
	}
	return tok, nil
}
