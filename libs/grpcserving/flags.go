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

	"github.com/fnrunner/fnrunner/libs/intake"
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
	MaxHeaderListSize    uint
	Intake               IntakeFlags
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
	fs.UintVar(&f.MaxHeaderListSize, "max-header-list-size", DefaultMaxHeaderListSize, "Largest header list (metadata) of a call, in bytes as HPACK decodes it (each field counts its name, value and 32); a larger one resets the stream. Porch's requests carry under 1 KiB: path, authority, content type, user agent, timeout and trace context.")
	f.Intake.register(fs)
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

// IntakeFlags bound what the gRPC server holds before a service's
// admission sees a call, and after it answered (libs/intake).
type IntakeFlags struct {
	MaxConnections        int
	MaxConnectionsPerPeer int
	MaxUnreadStreams      int
	MaxReceiveBytes       int64
	MaxReceiveDuration    time.Duration
	MinReceiveRate        int64
	MaxSendDuration       time.Duration
	MaxUnsentBytes        int64
}

func (f *IntakeFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&f.MaxConnections, "max-connections", 1024, "Most client connections open at once; a new one past it closes the one idle longest (or, with none idle, stalled longest), so a reconnecting client always gets in. 0 = unbounded.")
	fs.IntVar(&f.MaxConnectionsPerPeer, "max-connections-per-peer", 64, "Most client connections open from one IP; a new one past it closes one of that IP's idle connections, or is refused. 0 = unbounded.")
	fs.IntVar(&f.MaxUnreadStreams, "max-unread-streams", 1536, fmt.Sprintf("Most calls whose request is not being read yet, on all connections (each may hold %d KiB of its request and its header list); a new call past it takes the place of the oldest of a client IP holding more, or is refused with ResourceExhausted. 0 = unbounded.", ServerStreamWindow>>10))
	fs.Int64Var(&f.MaxReceiveBytes, "max-receive-bytes", 0, "Memory for requests being read, each counted at the largest message (--max-request-body-size): as many are read at once as fit, one client IP at most half of them, the others wait their turn. 0 = 8 largest messages.")
	fs.DurationVar(&f.MaxReceiveDuration, "max-receive-duration", 30*time.Second, "How long a call's request may take to arrive in full, from its first frame; past it the call ends and nothing is run. 0 = no bound.")
	fs.Int64Var(&f.MinReceiveRate, "min-receive-rate", 0, fmt.Sprintf("Least a client connection must send, in bytes a second over each %s and for each of its requests being read; a call on a slower connection ends and nothing is run, giving its place up before --max-receive-duration. A connection's reads also wait for the service's own writes and CPU, so a loaded service could end ordinary calls: set it only well below what clients send. 0 = no bound.", intake.DefaultReceiveRateWindow))
	fs.Int64Var(&f.MaxUnsentBytes, "max-unsent-bytes", 0, "Answers one client connection may have waiting to leave, in bytes; past it, no more of its requests are read until its client takes some. 0 = 2 largest messages.")
	fs.DurationVar(&f.MaxSendDuration, "max-send-duration", 30*time.Second, "How long answers may wait for a client that takes none of their bytes (a receive window kept shut); past it the client's connection is closed. 0 = no bound.")
}

// Held is the most the transport holds of calls before admission sees
// them, for a server whose largest message is maxMessage bytes: the
// requests being read, and the unread streams' windows and header lists.
func (f *Flags) Held(maxMessage int) int64 {
	l := f.intakeLimits(maxMessage)
	return int64(l.MaxReading)*int64(maxMessage) + int64(l.MaxUnreadStreams)*int64(ServerStreamWindow+f.MaxHeaderListSize)
}

// intakeLimits are the gate's limits for a server whose largest message is
// maxMessage bytes.
func (f *Flags) intakeLimits(maxMessage int) intake.Limits {
	in := f.Intake
	bytes := in.MaxReceiveBytes
	if bytes <= 0 {
		bytes = 8 * int64(max(maxMessage, 1))
	}
	unsent := in.MaxUnsentBytes
	if unsent <= 0 {
		unsent = 2 * int64(max(maxMessage, 1))
	}
	return intake.Limits{
		MaxUnsentBytes:        unsent,
		MaxConnections:        in.MaxConnections,
		MaxConnectionsPerPeer: in.MaxConnectionsPerPeer,
		MaxUnreadStreams:      in.MaxUnreadStreams,
		MaxReading:            int(max(bytes/int64(max(maxMessage, 1)), 1)),
		ReceiveTimeout:        in.MaxReceiveDuration,
		MinReceiveRate:        in.MinReceiveRate,
		SendTimeout:           in.MaxSendDuration,
	}
}
