// Package evalwire carries EvaluateFunction calls between fnrunner's
// services without copying the ResourceList. A Request or Response keeps it
// in the buffers gRPC received it in (a mem.BufferSlice), and sending one
// hands the same buffers to the transport: a hop that forwards a 64 MiB
// ResourceList holds it once, not the three or four times that decoding into
// the generated types, copying the bytes field and encoding it again cost.
//
// The wire form is exactly porch's evaluator.proto, so either end of a call
// may be a plain generated client or server. Services serve with
// ServerCodec and Register; callers use NewClient.
package evalwire

import (
	"context"
	"io"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// Request is an EvaluateFunctionRequest.
type Request struct {
	// Image is the function image.
	Image string
	// Tag, from porch after April 2026 (evaluator.proto field 3), is the
	// tag or semver constraint of an Image given without one.
	Tag string
	// ResourceList is the serialized ResourceList, in the buffers it came in.
	ResourceList mem.BufferSlice
}

// Free releases the request's buffers to gRPC's pool. It is optional (the
// garbage collector reclaims them otherwise) and must be the last use.
func (r *Request) Free() {
	r.ResourceList.Free()
	r.ResourceList = nil
}

// Response is an EvaluateFunctionResponse.
type Response struct {
	// ResourceList is the serialized ResourceList the function wrote.
	ResourceList mem.BufferSlice
	// Log is what the function wrote to stderr.
	Log []byte
}

// Free releases the response's buffers, like Request.Free.
func (r *Response) Free() {
	r.ResourceList.Free()
	r.ResourceList = nil
}

// Bytes wraps b as a BufferSlice, without copying; b must not change while
// the slice is in use.
func Bytes(b []byte) mem.BufferSlice {
	if len(b) == 0 {
		return nil
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}
}

// Server is what Register serves.
type Server interface {
	EvaluateFunction(ctx context.Context, req *Request) (*Response, error)
}

// Register serves srv as evaluator.FunctionEvaluator on s, which must have
// been built with ServerCodec.
func Register(s grpc.ServiceRegistrar, srv Server) {
	s.RegisterService(&grpc.ServiceDesc{
		ServiceName: "evaluator.FunctionEvaluator",
		HandlerType: (*Server)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "EvaluateFunction",
			Handler:    handle,
		}},
		Metadata: "evaluator.proto",
	}, srv)
}

func handle(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	in := new(incoming)
	if err := dec(in); err != nil {
		return nil, err
	}
	if in.err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "the request is not an EvaluateFunctionRequest: %v", in.err)
	}
	req := &in.req
	call := func(ctx context.Context, req any) (any, error) {
		return srv.(Server).EvaluateFunction(ctx, req.(*Request))
	}
	if interceptor == nil {
		return call(ctx, req)
	}
	return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: pb.FunctionEvaluator_EvaluateFunction_FullMethodName}, call)
}

// Client calls EvaluateFunction over a connection.
type Client struct {
	cc grpc.ClientConnInterface
}

// NewClient returns a client on cc.
func NewClient(cc grpc.ClientConnInterface) *Client { return &Client{cc: cc} }

// EvaluateFunction sends req and returns the answer. req is left as it was
// (its buffers are referenced, not taken), so it can be sent again.
func (c *Client) EvaluateFunction(ctx context.Context, req *Request, opts ...grpc.CallOption) (*Response, error) {
	resp := new(Response)
	opts = append([]grpc.CallOption{grpc.ForceCodecV2(codec{})}, opts...)
	if err := c.cc.Invoke(ctx, pb.FunctionEvaluator_EvaluateFunction_FullMethodName, req, resp, opts...); err != nil {
		return nil, err
	}
	return resp, nil
}

// NewReader returns a reader of s that writes its buffers out directly
// (io.WriterTo), so that io.Copy to a pipe or a hash copies nothing. It does
// not take or release references: s must stay valid while it is read.
func NewReader(s mem.BufferSlice) io.Reader { return &reader{s: s} }

type reader struct {
	s   mem.BufferSlice
	off int // into s[0]
}

func (r *reader) Read(p []byte) (int, error) {
	n := 0
	for len(p) > 0 && len(r.s) > 0 {
		c := copy(p, r.s[0].ReadOnlyData()[r.off:])
		n += c
		p = p[c:]
		r.off += c
		if r.off == r.s[0].Len() {
			r.s, r.off = r.s[1:], 0
		}
	}
	if n == 0 && len(r.s) == 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (r *reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for len(r.s) > 0 {
		n, err := w.Write(r.s[0].ReadOnlyData()[r.off:])
		total += int64(n)
		if err != nil {
			r.off += n
			return total, err
		}
		r.s, r.off = r.s[1:], 0
	}
	return total, nil
}
