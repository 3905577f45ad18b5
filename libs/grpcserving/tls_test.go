package grpcserving_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/tests/testcerts"
)

// checkLiveness asks the server at address for its liveness over a new
// connection made with dial.
func checkLiveness(ctx context.Context, address string, dial grpc.DialOption) error {
	conn, err := grpc.NewClient(address, dial)
	if err != nil {
		return err
	}
	defer conn.Close()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = healthpb.NewHealthClient(conn).Check(cctx, &healthpb.HealthCheckRequest{Service: grpcserving.LivenessService})
	return err
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	good := testcerts.Generate(t, dir, "fnrunner")
	other := testcerts.Generate(t, dir, "stranger")
	server := grpcserving.TLSFlags{Cert: good.Cert, Key: good.Key, CA: good.CA}
	common := grpcserving.Flags{ListenHost: "127.0.0.1", DrainTimeout: time.Second}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	_, _, err := common.Open(log, 0, &grpcserving.TLSFlags{Cert: good.Cert}, grpcserving.Config{Name: "t"})
	require.Error(t, err, "Open with a partial TLS configuration succeeded")
	lis, srv, err := common.Open(log, 0, &server, grpcserving.Config{Name: "t", MaxMessageSize: 1 << 20})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, lis) }()

	check := func(dial grpc.DialOption) error { return checkLiveness(ctx, lis.Addr().String(), dial) }
	client := grpcserving.TLSFlags{Cert: good.Cert, Key: good.Key, CA: good.CA}
	mtls, err := client.DialOption()
	require.NoError(t, err)
	stranger := grpcserving.TLSFlags{Cert: other.Cert, Key: other.Key, CA: good.CA}
	strange, err := stranger.DialOption()
	require.NoError(t, err)
	for _, tc := range []struct {
		name   string
		dial   grpc.DialOption
		served bool
	}{
		{"mutual TLS client", mtls, true},
		{"plaintext client", grpc.WithTransportCredentials(insecure.NewCredentials()), false},
		{"client with a certificate of another CA", strange, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := check(tc.dial); tc.served {
				assert.NoError(t, err, "refused")
			} else {
				assert.Error(t, err, "served")
			}
		})
	}
	_, err = (&grpcserving.TLSFlags{Cert: good.Cert}).DialOption()
	assert.Error(t, err, "a partial TLS configuration was accepted")
}

// Certificates rotated on disk (as cert-manager or a Secret mount does, by
// swapping files) are used for the next connection on both sides, without a
// restart.
func TestTLSFilesReloaded(t *testing.T) {
	serverDir, clientDir := t.TempDir(), t.TempDir()
	install := func(dir string, from testcerts.Files) grpcserving.TLSFlags {
		f := grpcserving.TLSFlags{Cert: filepath.Join(dir, "tls.crt"), Key: filepath.Join(dir, "tls.key"), CA: filepath.Join(dir, "ca.crt")}
		for src, dst := range map[string]string{from.Cert: f.Cert, from.Key: f.Key, from.CA: f.CA} {
			data, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(dst+".new", data, 0o600))
			require.NoError(t, os.Rename(dst+".new", dst))
		}
		return f
	}
	first := testcerts.Generate(t, t.TempDir(), "fnrunner")
	server, client := install(serverDir, first), install(clientDir, first)
	common := grpcserving.Flags{ListenHost: "127.0.0.1", DrainTimeout: time.Second}
	lis, srv, err := common.Open(slog.New(slog.NewTextHandler(io.Discard, nil)), 0, &server, grpcserving.Config{Name: "t", MaxMessageSize: 1 << 20})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, lis) }()
	dial, err := client.DialOption()
	require.NoError(t, err)
	// Each check is a new connection: a handshake with the files as they are.
	check := func() error { return checkLiveness(ctx, lis.Addr().String(), dial) }
	require.NoError(t, check(), "before the rotation")

	rotated := testcerts.Generate(t, t.TempDir(), "fnrunner-rotated")
	// Mid-rotation the server's new certificate is there, its key not yet:
	// the last good pair serves meanwhile.
	data, err := os.ReadFile(rotated.Cert)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(server.Cert, data, 0o600))
	assert.NoError(t, check(), "a half-rotated server refused connections")
	install(serverDir, rotated)
	assert.Error(t, check(), "the server still took the old CA's client after its files were rotated")
	install(clientDir, rotated)
	assert.NoError(t, check(), "both sides rotated")
}

// Kubelet's gRPC probes cannot present a client certificate: with
// --health-port they reach the same health states, in plaintext, on a port
// of their own, while --port still requires one.
func TestHealthPortForProbesBesideMutualTLS(t *testing.T) {
	certs := testcerts.Generate(t, t.TempDir(), "fnrunner")
	server := grpcserving.TLSFlags{Cert: certs.Cert, Key: certs.Key, CA: certs.CA}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	healthPort := free.Addr().(*net.TCPAddr).Port
	require.NoError(t, free.Close())
	common := grpcserving.Flags{ListenHost: "127.0.0.1", HealthPort: healthPort, DrainTimeout: time.Second}
	lis, srv, err := common.Open(slog.New(slog.NewTextHandler(io.Discard, nil)), 0, &server, grpcserving.Config{Name: "t", MaxMessageSize: 1 << 20})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = srv.Serve(ctx, lis) }()

	plain := grpc.WithTransportCredentials(insecure.NewCredentials())
	probe := net.JoinHostPort("127.0.0.1", strconv.Itoa(healthPort))
	require.Eventually(t, func() bool { return checkLiveness(ctx, probe, plain) == nil }, 10*time.Second, 20*time.Millisecond, "liveness on the health port")
	assert.Error(t, checkLiveness(ctx, lis.Addr().String(), plain), "--port served a plaintext client")

	readiness := func() healthpb.HealthCheckResponse_ServingStatus {
		conn, err := grpc.NewClient(probe, plain)
		require.NoError(t, err)
		defer conn.Close()
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		require.NoError(t, err)
		return resp.GetStatus()
	}
	assert.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, readiness())
	srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	assert.Equal(t, healthpb.HealthCheckResponse_SERVING, readiness(), "the service's own readiness")
}
