package grpcserving_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/tests/testcerts"
)

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	good := testcerts.Generate(t, dir, "fnrunner")
	other := testcerts.Generate(t, dir, "stranger")
	server := grpcserving.TLSFlags{Cert: good.Cert, Key: good.Key, CA: good.CA}
	common := grpcserving.Flags{DrainTimeout: time.Second}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, _, err := common.Open(log, "127.0.0.1", 0, &grpcserving.TLSFlags{Cert: good.Cert}, grpcserving.Config{Name: "t"}); err == nil {
		t.Fatal("Open with a partial TLS configuration succeeded")
	}
	lis, srv, err := common.Open(log, "127.0.0.1", 0, &server, grpcserving.Config{Name: "t", MaxMessageSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, lis) }()

	check := func(dial grpc.DialOption) error {
		conn, err := grpc.NewClient(lis.Addr().String(), dial)
		if err != nil {
			return err
		}
		defer conn.Close()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err = healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: grpcserving.LivenessService})
		return err
	}
	client := grpcserving.TLSFlags{Cert: good.Cert, Key: good.Key, CA: good.CA}
	mtls, err := client.DialOption()
	if err != nil {
		t.Fatal(err)
	}
	if err := check(mtls); err != nil {
		t.Errorf("mutual TLS client refused: %v", err)
	}
	if err := check(grpc.WithTransportCredentials(insecure.NewCredentials())); err == nil {
		t.Error("a plaintext client was served")
	}
	stranger := grpcserving.TLSFlags{Cert: other.Cert, Key: other.Key, CA: good.CA}
	strange, err := stranger.DialOption()
	if err != nil {
		t.Fatal(err)
	}
	if err := check(strange); err == nil {
		t.Error("a client with a certificate of another CA was served")
	}
	if _, err := (&grpcserving.TLSFlags{Cert: good.Cert}).DialOption(); err == nil {
		t.Error("a partial TLS configuration was accepted")
	}
}
