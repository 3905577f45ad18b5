// Package grpcserving runs the network side of an fnrunner service: one gRPC
// server with the standard health service, a Prometheus metrics endpoint, and a
// graceful drain when the context ends (SIGTERM in production).
package grpcserving

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/fnrunner/fnrunner/libs/intake"
	"github.com/fnrunner/fnrunner/libs/telemetry"
)

// LivenessService is the gRPC health service name for liveness probes: it is
// SERVING as long as the process serves, while the default service ("")
// reports readiness.
const LivenessService = "liveness"

// HTTP/2 flow-control windows of fnrunner's servers and of its clients
// (WindowDialOptions), in bytes. They are fixed: with grpc-go's default,
// dynamic windows, the receiver of a call's first data sends a
// WINDOW_UPDATE and a bandwidth-estimation PING, and the sender answers the
// PING: frames that wake the other side once more on every call (about
// 0.05 ms a hop on a 2-vCPU VM, README's Benchmarks). A stream may send
// 1 MiB before its receiver reads, more than the dynamic window's first
// 64 KiB and less than the 16 MiB a peer can grow it to; a larger message
// still passes, since grpc-go widens the window to a message's length once
// it has read its header. The connection's window comes back as data
// arrives, so a stream left unread does not hold up the others.
//
// A server's own stream window is smaller, ServerStreamWindow: it is what
// a stream whose request no handler has asked for yet may hold, and the
// gate (libs/intake) counts up to --max-unread-streams of those. A request
// under a quarter of it draws no WINDOW_UPDATE either; a larger one draws
// one when its handler reads it, as grpc-go then opens the window to the
// message's length.
const (
	StreamWindow       = 1 << 20
	ConnWindow         = 4 << 20
	ServerStreamWindow = 64 << 10
)

// WindowDialOptions give a client connection to an fnrunner service (or to
// a function pod's wrapper-server) the same fixed windows as its servers.
func WindowDialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(StreamWindow), grpc.WithStaticConnWindowSize(ConnWindow)}
}

// Config says how a service's servers are set up.
type Config struct {
	// Name of the service, used in logs.
	Name string
	// MaxMessageSize bounds received and sent gRPC messages, in bytes.
	MaxMessageSize int
	// MetricsAddress is where /metrics is served over HTTP; empty disables it.
	MetricsAddress string
	// HealthAddress, when set, is where the health service alone is also
	// served, in plaintext (kubelet's probes cannot present a client
	// certificate).
	HealthAddress string
	// DrainTimeout bounds how long in-flight calls may take after shutdown
	// starts before they are cancelled.
	DrainTimeout time.Duration
	// MaxCallDuration is the deadline of a call that came without one
	// (0: none).
	MaxCallDuration time.Duration
	// MaxConcurrentStreams bounds the calls of one connection in flight
	// (0: gRPC's default, unbounded).
	MaxConcurrentStreams uint32
	// MaxConnectionAge, when set, makes clients reconnect (GOAWAY) after
	// it; calls in flight on the old connection run to their end.
	MaxConnectionAge time.Duration
	// MaxHeaderListSize bounds a call's header list (its metadata),
	// counted as HPACK decodes it (0: DefaultMaxHeaderListSize).
	MaxHeaderListSize uint32
	// Intake bounds connections and requests still being received, and
	// answers not yet taken (libs/intake).
	Intake intake.Limits
	// ServerOptions are added to the gRPC server's options.
	ServerOptions []grpc.ServerOption
	// Gatherers are served on /metrics beside the service's own registry
	// (e.g. controller-runtime's).
	Gatherers []prometheus.Gatherer
	// Telemetry continues callers' traces, exports OpenTelemetry metrics
	// and gives each call a request id (nil: request ids only).
	Telemetry *telemetry.Telemetry
}

// Server is a gRPC server with health and metrics, not yet serving.
//
// Services are registered on the Server itself (it is a
// grpc.ServiceRegistrar), never on GRPC directly: registering through it
// puts every method's request read under the gate.
type Server struct {
	cfg      Config
	log      *slog.Logger
	GRPC     *grpc.Server
	Health   *health.Server
	Registry *prometheus.Registry
	gate     *intake.Gate
	gated    map[string]bool // services registered through the Server
	stopping chan struct{}
}

var _ grpc.ServiceRegistrar = (*Server)(nil)

// DefaultMaxHeaderListSize is --max-header-list-size's default.
const DefaultMaxHeaderListSize = 8 << 10

// New builds the gRPC server with the health service registered (NOT_SERVING
// until the caller says otherwise) and a metrics registry that already
// carries Go runtime, process and per-RPC metrics.
func New(log *slog.Logger, cfg Config) *Server {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m := newRPCMetrics(reg)
	if cfg.MaxHeaderListSize == 0 {
		cfg.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	gate := intake.New(log, "grpc", cfg.Intake)
	reg.MustRegister(gate.Collectors()...)
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(cfg.MaxMessageSize),
		grpc.MaxSendMsgSize(cfg.MaxMessageSize),
		grpc.MaxHeaderListSize(cfg.MaxHeaderListSize),
		grpc.InTapHandle(gate.Tap),
		grpc.ChainUnaryInterceptor(telemetry.UnaryServerInterceptor, m.unary, callLog(log), defaultDeadline(cfg.MaxCallDuration)),
		grpc.StaticStreamWindowSize(ServerStreamWindow),
		grpc.StaticConnWindowSize(ConnWindow),
	}
	opts = append(opts, cfg.Telemetry.ServerOptions()...)
	if cfg.MaxConcurrentStreams > 0 {
		opts = append(opts, grpc.MaxConcurrentStreams(cfg.MaxConcurrentStreams))
	}
	opts = append(opts, keepaliveOptions(cfg)...)
	opts = append(opts, cfg.ServerOptions...)
	s := &Server{
		cfg:      cfg,
		log:      log,
		GRPC:     grpc.NewServer(opts...),
		Health:   health.NewServer(),
		Registry: reg,
		gate:     gate,
		gated:    map[string]bool{},
		stopping: make(chan struct{}),
	}
	// "" is readiness: NOT_SERVING until the service says otherwise.
	// "liveness" is SERVING while the process serves (for liveness probes).
	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.Health.SetServingStatus(LivenessService, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(s, s.Health)
	return s
}

// RegisterService registers a service on the gRPC server with its requests
// read under the gate (intake.Gate.Wrap).
func (s *Server) RegisterService(desc *grpc.ServiceDesc, impl any) {
	s.GRPC.RegisterService(s.gate.Wrap(desc), impl)
	s.gated[desc.ServiceName] = true
}

// ungated are the services registered on GRPC directly, past the gate.
func (s *Server) ungated() []string {
	var out []string
	for name := range s.GRPC.GetServiceInfo() {
		if !s.gated[name] {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Open is how every service main starts: it builds the gRPC server with
// TLS from tls (nil for a service without TLS flags), the metrics address and
// drain timeout from the common flags, and cfg's other settings, then opens
// the listener on host:port ("" host: every interface). TLS flag errors are
// FlagErrors.
func (f *Flags) Open(log *slog.Logger, port int, tls *TLSFlags, cfg Config) (net.Listener, *Server, error) {
	if tls != nil {
		opts, err := tls.ServerOptions()
		if err != nil {
			return nil, nil, FlagError(err)
		}
		cfg.ServerOptions = append(opts, cfg.ServerOptions...)
	}
	cfg.MetricsAddress, cfg.DrainTimeout = f.MetricsAddress, f.DrainTimeout
	cfg.MaxCallDuration, cfg.MaxConcurrentStreams = f.MaxCallDuration, uint32(min(f.MaxConcurrentStreams, 1<<31))
	cfg.MaxConnectionAge = f.MaxConnectionAge
	cfg.MaxHeaderListSize = uint32(min(f.MaxHeaderListSize, 1<<31))
	cfg.Intake = f.intakeLimits(cfg.MaxMessageSize)
	if f.HealthPort > 0 {
		cfg.HealthAddress = net.JoinHostPort(f.ListenHost, strconv.Itoa(f.HealthPort))
	}
	lis, err := listen(f.ListenHost, port)
	if err != nil {
		return nil, nil, err
	}
	return lis, New(log, cfg), nil
}

// Keepalive, on every service: the server pings a client whose connection
// has been quiet and drops it when the ping goes unanswered, and allows
// clients to ping as often as every clientPingMin (fnrunner's own clients,
// sendonce.DialOptions, ping every 10 s).
const (
	serverKeepaliveTime    = 30 * time.Second
	serverKeepaliveTimeout = 10 * time.Second
	clientPingMin          = 5 * time.Second
)

func keepaliveOptions(cfg Config) []grpc.ServerOption {
	params := keepalive.ServerParameters{Time: serverKeepaliveTime, Timeout: serverKeepaliveTimeout}
	if cfg.MaxConnectionAge > 0 {
		// The grace stays gRPC's default, infinite: calls in flight end
		// by their own deadline (MaxCallDuration when the caller set
		// none), never cut by the connection's age.
		params.MaxConnectionAge = cfg.MaxConnectionAge
	}
	return []grpc.ServerOption{
		grpc.KeepaliveParams(params),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: clientPingMin, PermitWithoutStream: true}),
	}
}

// defaultDeadline gives a call that came without a deadline one of d.
func defaultDeadline(d time.Duration) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if _, ok := ctx.Deadline(); !ok && d > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, d)
			defer cancel()
		}
		return handler(ctx, req)
	}
}

// The health server for probes (--health-port) and the metrics server take
// a few small calls from the kubelet and Prometheus: their bounds are fixed.
const probeMaxMessage = 4 << 10

func probeLimits() intake.Limits {
	return intake.Limits{
		MaxConnections:        64,
		MaxConnectionsPerPeer: 16,
		MaxUnreadStreams:      64,
		MaxReading:            16,
		ReceiveTimeout:        10 * time.Second,
		SendTimeout:           10 * time.Second,
	}
}

func metricsLimits() intake.Limits {
	return intake.Limits{MaxConnections: 64, MaxConnectionsPerPeer: 16}
}

// listen opens the service's TCP listener on host:port ("" host: every interface).
func listen(host string, port int) (net.Listener, error) {
	lis, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listen on port %d: %w", port, err)
	}
	return lis, nil
}

// Serve serves gRPC on lis (and metrics, if configured) until ctx ends, then
// reports NOT_SERVING, stops accepting calls, and waits up to DrainTimeout for
// in-flight calls before cancelling them. It returns nil after a clean drain.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if names := s.ungated(); len(names) > 0 {
		_ = lis.Close()
		return fmt.Errorf("services %v were registered on the gRPC server directly, past the gate: register them on the grpcserving.Server", names)
	}
	lis = s.gate.Listener(lis)
	errc := make(chan error, 4) // gRPC, health for probes and up to two metrics servers
	go func() {
		s.log.Info("serving gRPC", "address", lis.Addr().String())
		if err := s.GRPC.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			errc <- fmt.Errorf("gRPC server: %w", err)
		}
	}()

	var probes *grpc.Server
	if s.cfg.HealthAddress != "" {
		hlis, err := net.Listen("tcp", s.cfg.HealthAddress)
		if err != nil {
			s.GRPC.Stop()
			return fmt.Errorf("health listener: %w", err)
		}
		limits := probeLimits()
		gate := intake.New(s.log, "health", limits)
		s.Registry.MustRegister(gate.Collectors()...)
		hlis = gate.Listener(hlis)
		probes = grpc.NewServer(append([]grpc.ServerOption{
			grpc.MaxRecvMsgSize(probeMaxMessage),
			grpc.MaxSendMsgSize(probeMaxMessage),
			grpc.MaxHeaderListSize(s.cfg.MaxHeaderListSize),
			grpc.MaxConcurrentStreams(uint32(limits.MaxUnreadStreams)),
			grpc.InTapHandle(gate.Tap),
			grpc.StaticStreamWindowSize(ServerStreamWindow),
			grpc.StaticConnWindowSize(ConnWindow),
		}, keepaliveOptions(Config{})...)...)
		probes.RegisterService(gate.Wrap(&healthpb.Health_ServiceDesc), s.Health)
		defer probes.Stop()
		go func() {
			s.log.Info("serving gRPC health for probes", "address", hlis.Addr().String())
			if err := probes.Serve(hlis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
				errc <- fmt.Errorf("health server: %w", err)
			}
		}()
	}

	var metrics []*http.Server
	metricsGate := intake.New(s.log, "metrics", metricsLimits())
	if len(s.metricsAddresses()) > 0 {
		s.Registry.MustRegister(metricsGate.Collectors()...)
	}
	for _, addr := range s.metricsAddresses() {
		mux := http.NewServeMux()
		gatherers := append(firstWins{s.Registry, s.cfg.Telemetry.Gatherer()}, s.cfg.Gatherers...)
		mux.Handle("/metrics", promhttp.HandlerFor(gatherers, promhttp.HandlerOpts{Registry: s.Registry}))
		m := &http.Server{
			Addr:              addr,
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       10 * time.Second,
			WriteTimeout:      time.Minute,
			IdleTimeout:       2 * time.Minute,
			MaxHeaderBytes:    int(s.cfg.MaxHeaderListSize),
		}
		mlis, err := net.Listen("tcp", addr)
		if err != nil {
			s.GRPC.Stop()
			s.shutdownMetrics(metrics)
			return fmt.Errorf("metrics listener: %w", err)
		}
		mlis = metricsGate.Listener(mlis)
		metrics = append(metrics, m)
		go func() {
			s.log.Info("serving metrics", "address", mlis.Addr().String())
			if err := m.Serve(mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("metrics server: %w", err)
			}
		}()
	}

	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	s.shutdown(metrics)
	return err
}

// Stopping is closed when the drain starts. Long-lived streams select on it
// and end, so that the drain waits only for unary calls in flight.
func (s *Server) Stopping() <-chan struct{} { return s.stopping }

// metricsAddresses are where /metrics is served: --metrics-address and,
// with OTEL_METRICS_EXPORTER=prometheus, porch's Prometheus address.
func (s *Server) metricsAddresses() []string {
	var addrs []string
	if s.cfg.MetricsAddress != "" {
		addrs = append(addrs, s.cfg.MetricsAddress)
	}
	if a := s.cfg.Telemetry; a != nil && a.PrometheusAddress != "" && a.PrometheusAddress != s.cfg.MetricsAddress {
		addrs = append(addrs, a.PrometheusAddress)
	}
	return addrs
}

func (s *Server) shutdownMetrics(metrics []*http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, m := range metrics {
		_ = m.Shutdown(ctx)
	}
}

func (s *Server) shutdown(metrics []*http.Server) {
	s.log.Info("draining", "timeout", s.cfg.DrainTimeout.String())
	close(s.stopping)
	s.Health.Shutdown()
	done := make(chan struct{})
	go func() {
		s.GRPC.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(s.cfg.DrainTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		s.log.Warn("drain timeout reached, cancelling in-flight calls")
		s.GRPC.Stop()
		<-done
	}
	s.shutdownMetrics(metrics)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.cfg.Telemetry.Shutdown(ctx); err != nil {
		s.log.Warn("flushing telemetry", "error", err)
	}
	s.log.Info("stopped")
}
