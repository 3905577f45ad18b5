package admission

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/intake"
)

// Evaluator admits each EvaluateFunction call to Next by weight: its input
// bytes times Factor. A call refused (queue full) or whose context ends while
// it waits is answered here and never reaches Next.
//
// A call keeps its weight until its answer has left the connection
// (intake.Sent), not only until Next returns: grpc-go holds an answer its
// client does not take. An answer larger than what the weight kept for it
// (all of it but the input) is weighed again at its size plus the input's,
// so that answers a function made many times larger than its input count in
// full.
type Evaluator struct {
	Next   evalwire.Server
	Limit  *Weighted
	Factor int64
	// Service names the service in answers ("gateway").
	Service string
}

var _ evalwire.Server = (*Evaluator)(nil)

// EvaluateFunction implements evalwire.Server.
func (e *Evaluator) EvaluateFunction(ctx context.Context, req *evalwire.Request) (*evalwire.Response, error) {
	size := int64(req.ResourceList.Len())
	release, err := e.Limit.Acquire(ctx, size*e.Factor, size)
	if err != nil {
		req.Free()
		if errors.Is(err, ErrQueueFull) {
			return nil, status.Errorf(codes.ResourceExhausted, "function %q: %s queue full: %s; the function was not run", req.Image, e.Service, e.Limit.QueueState())
		}
		return nil, status.FromContextError(err).Err()
	}
	resp, err := e.Next.EvaluateFunction(ctx, req)
	if err != nil || resp == nil {
		release()
		return resp, err
	}
	// The answer's share of the weight is all of it but the input.
	if err := HoldAnswer(ctx, e.Limit, release, req.Image, size*e.Factor, size, resp); err != nil {
		return nil, err
	}
	return resp, nil
}

// HoldAnswer keeps the weight of a call admitted by limit (nil: none) at
// weight, for an input of size bytes, until its answer resp has left the
// connection (intake.Sent): grpc-go holds an answer its client does not
// take. An answer larger than its share of the weight (all of it but the
// input) is weighed again at its size plus the input's (Weighted.Grow).
// When that cannot be held, resp is freed and the call's answer is
// ResourceExhausted (queue full) or its context's status.
func HoldAnswer(ctx context.Context, limit *Weighted, release func(), image string, weight, size int64, resp *evalwire.Response) error {
	out := int64(resp.ResourceList.Len() + len(resp.Log))
	if limit != nil {
		var err error
		if release, err = limit.Grow(ctx, release, weight, size+out, out); err != nil {
			resp.Free()
			if errors.Is(err, ErrQueueFull) {
				return status.Errorf(codes.ResourceExhausted, "function %q: its answer of %d bytes (from %d) does not fit beside the calls running, and %s; the function ran, its answer was dropped", image, out, size, limit.QueueState())
			}
			return status.FromContextError(err).Err()
		}
	}
	intake.Sent(ctx, out, release)
	return nil
}
