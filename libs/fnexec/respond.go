package fnexec

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/resourcelist"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// maxMessageLog bounds how much stderr goes into a status message.
const maxMessageLog = 4096

// Respond turns the outcome of running function image into the answer of
// EvaluateFunction: the response on success, else a gRPC status error.
//
//   - the caller's deadline or cancellation: DeadlineExceeded / Canceled
//   - output over the limit: ResourceExhausted
//   - the binary cannot be started: FailedPrecondition
//   - non-zero exit: Internal, with the error results (or the end of stderr)
//     in the message and the function's ResourceList and log kept in the
//     status details as an EvaluateFunctionResponse (porch drops them)
//   - exit 0 with output that is not a ResourceList: Internal
func Respond(image string, res *Result, err error) (*pb.EvaluateFunctionResponse, error) {
	if err == nil {
		if _, perr := resourcelist.Parse(res.ResourceList); perr != nil {
			return nil, withDetails(status.New(codes.Internal, fmt.Sprintf("function %q wrote invalid output: %v%s", image, perr, logTail(res.Log))), res)
		}
		return &pb.EvaluateFunctionResponse{ResourceList: res.ResourceList, Log: res.Log}, nil
	}
	var xe *ExitError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, status.Errorf(codes.DeadlineExceeded, "function %q did not finish before the deadline and was killed", image)
	case errors.Is(err, context.Canceled):
		return nil, status.Errorf(codes.Canceled, "function %q cancelled by the caller", image)
	case errors.Is(err, ErrOutputTooLarge):
		return nil, status.Errorf(codes.ResourceExhausted, "function %q: %v", image, err)
	case errors.Is(err, ErrStart):
		return nil, status.Errorf(codes.FailedPrecondition, "function %q: %v", image, err)
	case errors.As(err, &xe):
		msg := fmt.Sprintf("function %q failed: %v", image, xe)
		if results, perr := resourcelist.Results(res.ResourceList); perr == nil && resourcelist.ErrorSummary(results) != "" {
			msg += ": " + resourcelist.ErrorSummary(results)
		} else {
			msg += logTail(res.Log)
		}
		return nil, withDetails(status.New(codes.Internal, msg), res)
	default:
		return nil, status.Errorf(codes.Internal, "function %q: %v", image, err)
	}
}

// FailureDetails returns the function's output carried in a status error
// from Respond, if any.
func FailureDetails(err error) (*pb.EvaluateFunctionResponse, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return nil, false
	}
	for _, d := range st.Details() {
		if r, ok := d.(*pb.EvaluateFunctionResponse); ok {
			return r, true
		}
	}
	return nil, false
}

func withDetails(st *status.Status, res *Result) error {
	if res == nil {
		return st.Err()
	}
	d := &pb.EvaluateFunctionResponse{Log: res.Log}
	if _, err := resourcelist.Parse(res.ResourceList); err == nil {
		d.ResourceList = res.ResourceList
	}
	if wd, err := st.WithDetails(d); err == nil {
		return wd.Err()
	}
	return st.Err()
}

func logTail(log []byte) string {
	s := strings.TrimSpace(string(log))
	if s == "" {
		return ""
	}
	if len(s) > maxMessageLog {
		s = "…" + s[len(s)-maxMessageLog:]
	}
	return ": " + s
}
