package evalwire

import (
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

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
	if err != nil {
		t.Fatal(err)
	}
	opts = append(opts, grpc.MaxRecvMsgSize(16<<20), grpc.MaxSendMsgSize(16<<20))
	s := grpc.NewServer(opts...)
	register(s)
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(16<<20), grpc.MaxCallSendMsgSize(16<<20)))
	if err != nil {
		t.Fatal(err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(resp.GetResourceList(), big) || string(resp.GetLog()) != "fn:v1" {
		t.Fatalf("echo came back different: %d bytes, log %q", len(resp.GetResourceList()), resp.GetLog())
	}
	// Other services on the same server still speak plain proto.
	if _, err := healthpb.NewHealthClient(cc).Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatalf("health through the codec: %v", err)
	}
}

func TestClientToGeneratedServer(t *testing.T) {
	cc := serve(t, func(s *grpc.Server) { pb.RegisterFunctionEvaluatorServer(s, generatedEcho{}) })
	req := &Request{Image: "fn:v1", ResourceList: Bytes(big)}
	for range 2 { // a request can be sent again
		resp, err := NewClient(cc).EvaluateFunction(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(NewReader(resp.ResourceList))
		if err != nil || !bytes.Equal(got, big) || string(resp.Log) != "fn:v1" {
			t.Fatalf("echo came back different: %d bytes (%v), log %q", len(got), err, resp.Log)
		}
		resp.Free()
	}
}

func TestReaderWritesBuffersOut(t *testing.T) {
	s := split([]byte("abcdefgh"), 0, 3, 3, 5)
	var w bytes.Buffer
	if n, err := io.Copy(&w, NewReader(s)); err != nil || n != 8 || w.String() != "abcdefgh" {
		t.Fatalf("io.Copy: %d %v %q", n, err, w.String())
	}
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
	if string(got) != "abcdefgh" {
		t.Fatalf("Read: %q", got)
	}
}
