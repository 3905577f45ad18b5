package grpcserving

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// Flags are the flags every fnrunner service has.
type Flags struct {
	ListenHost           string
	HealthPort           int
	MetricsAddress       string
	DrainTimeout         time.Duration
	LogLevel             slog.Level
	MaxCallDuration      time.Duration
	MaxConcurrentStreams uint
	MaxConnectionAge     time.Duration
	// ignored are porch's flags this service accepted without acting on them.
	ignored []porchFlag
}

// Register adds the common flags to fs; metricsAddress is this service's
// default (each service has its own, so all can run on one host).
func (f *Flags) Register(fs *flag.FlagSet, metricsAddress string) {
	fs.StringVar(&f.ListenHost, "listen-host", "", "Address the gRPC port (--port) listens on, e.g. 127.0.0.1 for this host alone. Default: every interface.")
	fs.IntVar(&f.HealthPort, "health-port", 0, "TCP port of a plaintext gRPC health service (grpc.health.v1 alone) beside --port, for kubelet's gRPC probes when --port requires client certificates (--tls-*), which they cannot present. 0 = none.")
	fs.StringVar(&f.MetricsAddress, "metrics-address", metricsAddress, "Address of the HTTP server for Prometheus /metrics. Empty disables it.")
	fs.DurationVar(&f.DrainTimeout, "drain-timeout", 30*time.Second, "How long in-flight calls may run after SIGTERM before they are cancelled.")
	fs.DurationVar(&f.MaxCallDuration, "max-call-duration", 10*time.Minute, "Deadline of a call whose caller set none (a caller's own deadline always applies); 0 = none.")
	fs.UintVar(&f.MaxConcurrentStreams, "max-concurrent-streams", 1024, "Most calls one client connection may have in flight (gRPC MaxConcurrentStreams); more wait in the client.")
	fs.DurationVar(&f.MaxConnectionAge, "max-connection-age", 5*time.Minute, "A client connection older than this is asked to go (GOAWAY) and closed once its calls end, so clients reconnect and spread over replicas as they are scaled; 0 = never.")
	f.LogLevel = slog.LevelInfo
	fs.Var(logLevel{&f.LogLevel}, "log-level", "Log level: DEBUG, INFO, WARN or ERROR, or porch's 0-5 (0 ERROR, 1 WARN, 2 INFO, 3-5 DEBUG).")
}

// Logger returns the service's structured (JSON) logger. A line logged with
// a call's context carries the call's request id and trace
// (telemetry.LogHandler).
func (f *Flags) Logger(w io.Writer, service string) *slog.Logger {
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: f.LogLevel}))).With("service", service)
}

// Usage sets a usage text that explains the command, then every flag.
func Usage(fs *flag.FlagSet, synopsis string) {
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\n%s\n\nFlags:\n", fs.Name(), synopsis)
		fs.PrintDefaults()
	}
}

// Parse parses args and refuses positional arguments.
func Parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &printedError{err} // the flag package wrote it, with the usage
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	return nil
}

// printedError is an error the flag package has already written out.
type printedError struct{ err error }

func (e *printedError) Error() string { return e.err.Error() }
func (e *printedError) Unwrap() error { return e.err }

// Main runs a service until SIGTERM or interrupt and exits with its status:
// 0 after a clean drain or --help, 2 on bad flags, 1 on any other error.
func Main(name string, run func(ctx context.Context, args []string, stderr io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, new(*flagError)):
		if !errors.As(err, new(*printedError)) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		}
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

type flagError struct{ error }

// FlagError marks an error as a usage error (exit status 2).
func FlagError(err error) error {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &flagError{err}
}
