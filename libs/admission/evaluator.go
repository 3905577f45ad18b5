package admission

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
)

// Evaluator admits each EvaluateFunction call to Next by weight: its input
// bytes times Factor. A call refused (queue full) or whose context ends while
// it waits is answered here and never reaches Next.
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
	defer release()
	return e.Next.EvaluateFunction(ctx, req)
}
