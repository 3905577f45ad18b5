package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// The floor of a hop: plain grpc-go servers, default options, none of
// fnrunner's code, each in a process of its own (this binary started as
// "bench floor-exec" or "bench floor-proxy"). A bare exec behind one of
// them, then behind a proxy in front of that, is what the binary
// executor's two hops (gateway, binary-runner) cost here before any of
// fnrunner's work.

// floorExec answers EvaluateFunction with a bare exec (os/exec) of its
// binary on the request's ResourceList.
type floorExec struct {
	pb.UnimplementedFunctionEvaluatorServer
	binary string
}

func (s floorExec) EvaluateFunction(ctx context.Context, req *pb.EvaluateFunctionRequest) (*pb.EvaluateFunctionResponse, error) {
	cmd := exec.CommandContext(ctx, s.binary)
	cmd.Stdin = bytes.NewReader(req.GetResourceList())
	out, err := cmd.Output()
	if err != nil {
		return nil, status.Errorf(codes.Internal, "%s: %v", s.binary, err)
	}
	return &pb.EvaluateFunctionResponse{ResourceList: out}, nil
}

// floorProxy passes each call on to the next server.
type floorProxy struct {
	pb.UnimplementedFunctionEvaluatorServer
	next pb.FunctionEvaluatorClient
}

func (s floorProxy) EvaluateFunction(ctx context.Context, req *pb.EvaluateFunctionRequest) (*pb.EvaluateFunctionResponse, error) {
	return s.next.EvaluateFunction(ctx, req)
}

// floorCmd serves one floor server on a free loopback port, which it
// prints on its first line, until stdin closes or SIGTERM.
func floorCmd(kind string, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bench "+kind, flag.ContinueOnError)
	binary := fs.String("binary", "", "floor-exec: the function binary to run for each call.")
	target := fs.String("target", "", "floor-proxy: the address calls are passed on to.")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var srv pb.FunctionEvaluatorServer
	switch kind {
	case "floor-exec":
		srv = floorExec{binary: *binary}
	case "floor-proxy":
		conn, err := dial(*target)
		if err != nil {
			return err
		}
		defer conn.Close()
		srv = floorProxy{next: pb.NewFunctionEvaluatorClient(conn)}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(64<<20), grpc.MaxSendMsgSize(64<<20))
	pb.RegisterFunctionEvaluatorServer(s, srv)
	go func() {
		// The bench holds our stdin: when it ends, so do we.
		_, _ = io.Copy(io.Discard, os.Stdin)
		s.Stop()
	}()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; s.Stop() }()
	fmt.Fprintln(out, lis.Addr())
	return s.Serve(lis)
}

// startFloor starts this binary as a floor server and returns its address
// and the function that stops it.
func startFloor(args ...string) (string, func(), error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, args...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() {
		stdin.Close()
		_ = cmd.Wait()
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("bench %s: no address: %w", args[0], err)
	}
	return strings.TrimSpace(line), stop, nil
}
