// Command gateway is the gRPC endpoint porch talks to: it serves porch's
// evaluator.FunctionEvaluator service and gRPC health on --port (9445).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/services/gateway/server"
)

type options struct {
	port               int
	maxRequestBodySize int
	metricsAddress     string
	drainTimeout       time.Duration
	logLevel           slog.Level
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.port, "port", 9445, "TCP port of the porch-facing gRPC service (evaluator.FunctionEvaluator and grpc.health.v1.Health). 0 picks a free port.")
	fs.IntVar(&o.maxRequestBodySize, "max-request-body-size", 6*1024*1024, "Largest gRPC message received or sent, in bytes. Must match porch-server's --max-request-body-size.")
	fs.StringVar(&o.metricsAddress, "metrics-address", ":9090", "Address of the HTTP server for Prometheus /metrics. Empty disables it.")
	fs.DurationVar(&o.drainTimeout, "drain-timeout", 30*time.Second, "How long in-flight calls may run after SIGTERM before they are cancelled.")
	fs.TextVar(&o.logLevel, "log-level", slog.LevelInfo, "Log level: DEBUG, INFO, WARN or ERROR.")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: gateway [flags]\n\nServes porch's evaluator.FunctionEvaluator/EvaluateFunction and routes each call to an executor.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return o, nil
}

// run serves until ctx ends. ready, if not nil, receives the gRPC address once
// the listener is open.
func run(ctx context.Context, args []string, stderr io.Writer, ready chan<- net.Addr) error {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: o.logLevel}))

	lis, err := net.Listen("tcp", fmt.Sprintf(":%d", o.port))
	if err != nil {
		return fmt.Errorf("listen on port %d: %w", o.port, err)
	}
	srv := grpcserving.New(log, grpcserving.Config{
		Name:           "gateway",
		MaxMessageSize: o.maxRequestBodySize,
		MetricsAddress: o.metricsAddress,
		DrainTimeout:   o.drainTimeout,
	})
	pb.RegisterFunctionEvaluatorServer(srv.GRPC, server.NewEvaluator())
	srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if ready != nil {
		ready <- lis.Addr()
	}
	return srv.Serve(ctx, lis)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stderr, nil); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "gateway: %v\n", err)
		os.Exit(1)
	}
}
