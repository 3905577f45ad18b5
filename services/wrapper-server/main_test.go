package main

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/admission"
	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/fnexec"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

const rl = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

func TestServesTheEntrypoint(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	var logs bytes.Buffer
	go func() {
		done <- serve(ctx, []string{"--port=0", "--", "/bin/sh", "-c", "cat; echo ran >&2"}, &logs, ready)
	}()
	addr := <-ready
	conn, err := grpc.NewClient(addr.String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "fn", ResourceList: []byte(rl)})
	if err != nil || string(resp.GetResourceList()) != rl || strings.TrimSpace(string(resp.GetLog())) != "ran" {
		t.Fatalf("EvaluateFunction = %v, %v", resp, err)
	}
	_, err = pb.NewFunctionEvaluatorClient(conn).EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: "fn", ResourceList: []byte("not: [yaml")})
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("bad input: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestNeedsEntrypoint(t *testing.T) {
	if err := run(context.Background(), []string{"--port=0"}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "entrypoint") {
		t.Errorf("run without entrypoint = %v", err)
	}
}

func TestBoundedConcurrency(t *testing.T) {
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	w := &wrapper{
		entrypoint: []string{"/bin/sh", "-c", "while [ ! -e " + release + " ]; do sleep 0.02; done; cat"},
		limit:      admission.New(1, 1),
		concurrent: 1, queue: 1,
		exec: fnexec.Options{},
	}
	ctx := context.Background()
	results := make(chan error, 2)
	call := func() {
		_, err := w.EvaluateFunction(ctx, &evalwire.Request{Image: "fn", ResourceList: evalwire.Bytes([]byte(rl))})
		results <- err
	}
	go call()
	waitUntil(t, func() bool { return w.limit.InFlight() == 1 })
	go call()
	waitUntil(t, func() bool { return w.limit.Queued() == 1 })
	_, err := w.EvaluateFunction(ctx, &evalwire.Request{Image: "fn", ResourceList: evalwire.Bytes([]byte(rl))})
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "--max-queue 1") {
		t.Errorf("third call = %v, want ResourceExhausted", err)
	}
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := <-results; err != nil {
			t.Errorf("admitted call: %v", err)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; !cond(); i++ {
		if i == 1000 {
			t.Fatal("condition not reached")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestCopyTo(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tools")
	if err := run(context.Background(), []string{"--copy-to=" + dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, "wrapper-server"))
	if err != nil || st.Mode()&0o111 == 0 || st.Size() == 0 {
		t.Errorf("copied binary: %v %v", st, err)
	}
}
