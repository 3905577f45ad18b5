// Package server is the gateway's implementation of porch's
// evaluator.FunctionEvaluator service: it hands each call to the executors in
// a fixed order and returns the first answer that is not NotFound.
package server

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// Executor runs the functions it knows. It answers codes.NotFound for an image
// it does not run, which lets the gateway ask the next executor.
type Executor interface {
	Name() string
	EvaluateFunction(ctx context.Context, req *pb.EvaluateFunctionRequest) (*pb.EvaluateFunctionResponse, error)
}

// Evaluator serves EvaluateFunction by asking executors in order.
type Evaluator struct {
	pb.UnimplementedFunctionEvaluatorServer
	executors []Executor
}

// NewEvaluator returns an Evaluator that tries executors in the order given.
func NewEvaluator(executors ...Executor) *Evaluator {
	return &Evaluator{executors: executors}
}

// EvaluateFunction implements pb.FunctionEvaluatorServer. Only NotFound falls
// through to the next executor; every other answer is returned as it is.
func (e *Evaluator) EvaluateFunction(ctx context.Context, req *pb.EvaluateFunctionRequest) (*pb.EvaluateFunctionResponse, error) {
	if req.GetImage() == "" {
		return nil, status.Error(codes.InvalidArgument, "image must not be empty")
	}
	for _, ex := range e.executors {
		resp, err := ex.EvaluateFunction(ctx, req)
		if status.Code(err) == codes.NotFound {
			continue
		}
		return resp, err
	}
	return nil, status.Errorf(codes.NotFound, "function %q not found", req.GetImage())
}
