package evalwire

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

type echo struct{}

func (echo) EvaluateFunction(_ context.Context, req *Request) (*Response, error) {
	// The request's buffers go straight back out: no copy on this hop.
	return &Response{ResourceList: req.ResourceList, Log: []byte(req.Image)}, nil
}

type generatedEcho struct {
	pb.UnimplementedFunctionEvaluatorServer
}

func (generatedEcho) EvaluateFunction(_ context.Context, req *pb.EvaluateFunctionRequest) (*pb.EvaluateFunctionResponse, error) {
	return &pb.EvaluateFunctionResponse{ResourceList: req.GetResourceList(), Log: []byte(req.GetImage())}, nil
}

func serve(t *testing.T, register func(*grpc.Server), opts ...grpc.ServerOption) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts = append(opts, grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(16<<20))
	s := grpc.NewServer(opts...)
	register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
	require.NoError(t, err)
	t.Cleanup(func() { cc.Close() })
	return cc
}

// big is larger than gRPC's frames and buffers, so it arrives in many.
var big = []byte("kind: ResourceList\n" + strings.Repeat("# filler line\n", 300000))

func TestGeneratedClientToServer(t *testing.T) {
	cc := serve(t, func(s *grpc.Server) {
		Register(s, echo{})
		healthpb.RegisterHealthServer(s, health.NewServer())
	}, ServerCodec())
	resp, err := pb.NewFunctionEvaluatorClient(cc).EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{Image: "fn:v1", ResourceList: big})
	require.NoError(t, err)
	require.True(t, bytes.Equal(resp.GetResourceList(), big), "echo came back different: %d bytes", len(resp.GetResourceList()))
	require.Equal(t, "fn:v1", string(resp.GetLog()), "echoed log")
	// Other services on the same server still speak plain proto.
	_, err = healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{})
	require.NoError(t, err, "health through the codec")
}

func TestClientToGeneratedServer(t *testing.T) {
	cc := serve(t, func(s *grpc.Server) { pb.RegisterFunctionEvaluatorServer(s, generatedEcho{}) })
	req := &Request{Image: "fn:v1", ResourceList: Bytes(big)}
	for range 2 { // a request can be sent again
		resp, err := NewClient(cc).EvaluateFunction(context.Background(), req)
		require.NoError(t, err)
		got, err := io.ReadAll(NewReader(resp.ResourceList))
		require.NoError(t, err, "reading the echo")
		require.True(t, bytes.Equal(got, big), "echo came back different: %d bytes", len(got))
		require.Equal(t, "fn:v1", string(resp.Log), "echoed log")
		resp.Free()
	}
}

func TestReaderWritesBuffersOut(t *testing.T) {
	s := split([]byte("abcdefgh"), 0, 3, 3, 5)
	var w bytes.Buffer
	n, err := io.Copy(&w, NewReader(s))
	require.NoError(t, err, "io.Copy")
	require.Equal(t, int64(8), n, "io.Copy")
	require.Equal(t, "abcdefgh", w.String(), "io.Copy")
	small := make([]byte, 3)
	r := NewReader(s)
	var got []byte
	for {
		n, err := r.Read(small)
		got = append(got, small[:n]...)
		if err == io.EOF {
			break
		}
	}
	require.Equal(t, "abcdefgh", string(got), "Read")
}

// rawCodec sends a []byte as the message body as it is: a client that
// speaks no protobuf at all, as an attacker's would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { return nil }
func (rawCodec) Name() string                       { return "proto" }

// A body that does not decode is the caller's fault (InvalidArgument) and
// costs the server nothing: 6 MiB of nested start-group tags once grew a
// goroutine's stack past Go's limit, which killed the process.
func TestUndecodableBodiesAreRefused(t *testing.T) {
	cc := serve(t, func(s *grpc.Server) { Register(s, echo{}) }, ServerCodec())
	method := pb.FunctionEvaluator_EvaluateFunction_FullMethodName
	for name, body := range map[string][]byte{
		"6 MiB of nested groups":      bytes.Repeat([]byte{0x0b}, 6<<20),
		"10,002 well-formed groups":   append(bytes.Repeat([]byte{0x0b}, 10002), bytes.Repeat([]byte{0x0c}, 10002)...),
		"length past the end":         []byte("\n\x80\x80\x80\x80\x10kind"),
		"reserved wire type":          {0x0f},
		"group ends that never began": {0x0c},
	} {
		t.Run(name, func(t *testing.T) {
			var out []byte
			err := cc.Invoke(context.Background(), method, body, &out, grpc.ForceCodec(rawCodec{}))
			require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		})
	}
	// The server still answers.
	resp, err := pb.NewFunctionEvaluatorClient(cc).EvaluateFunction(context.Background(), &pb.EvaluateFunctionRequest{Image: "fn:v1", ResourceList: []byte("kind: ResourceList\n")})
	require.NoError(t, err)
	require.Equal(t, "fn:v1", string(resp.GetLog()))
}
