package store

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// ErrUnknownRunner is why a Recorder refuses a report: its runner is not
// one the config-reconciler knows (in a cluster: no binary-runner pod of
// its namespace by that name, one with another UID, or not the pod whose
// token the report came with). Report answers it with PermissionDenied.
var ErrUnknownRunner = errors.New("unknown runner")

// ErrUnauthenticated is why a Recorder refuses a report that came without
// proof of its sender (in a cluster: a service account token bound to the
// runner's pod, for the config-reconciler's audience). Report answers it
// with Unauthenticated.
var ErrUnauthenticated = errors.New("report sender not authenticated")

// Recorder keeps the binary-runners' reports (reports.ConfigMaps in a
// cluster, reports.Memory with --config-dir).
type Recorder interface {
	// Record keeps r as its runner's report, replacing the last one. An
	// error wrapping ErrUnauthenticated or ErrUnknownRunner refuses the
	// report for good; any other may pass on a retry. ctx is the call's:
	// its metadata carries the sender's proof.
	Record(ctx context.Context, r *configpb.RunnerReport) error
}

// Server serves the store over the ExecutorConfig gRPC service.
type Server struct {
	configpb.UnimplementedExecutorConfigServer
	Store *Store
	// Reports keeps what Report receives; nil: Report is Unimplemented.
	Reports Recorder
	Log     *slog.Logger
	// Stopping, when closed, ends every stream (the server is draining);
	// subscribers reconnect to another replica.
	Stopping <-chan struct{}
}

// Watch implements configpb.ExecutorConfigServer.
func (s *Server) Watch(req *configpb.WatchRequest, stream configpb.ExecutorConfig_WatchServer) error {
	s.Log.Info("subscriber connected", "subscriber", req.GetSubscriber())
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-s.Stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := s.Store.Watch(ctx, func(snap *configpb.Snapshot) error {
		return stream.Send(snap)
	})
	s.Log.Info("subscriber left", "subscriber", req.GetSubscriber(), "reason", err)
	return nil
}

// Report implements configpb.ExecutorConfigServer.
func (s *Server) Report(ctx context.Context, req *configpb.RunnerReport) (*configpb.ReportAck, error) {
	if s.Reports == nil {
		return nil, status.Error(codes.Unimplemented, "this config-reconciler keeps no runner reports")
	}
	if req.GetRunner() == "" {
		return nil, status.Error(codes.InvalidArgument, "a runner report must name its runner")
	}
	if err := s.Reports.Record(ctx, req); err != nil {
		s.Log.Warn("keeping a runner report", "runner", req.GetRunner(), "error", err)
		switch {
		case errors.Is(err, ErrUnauthenticated):
			return nil, status.Errorf(codes.Unauthenticated, "report refused: %v", err)
		case errors.Is(err, ErrUnknownRunner):
			return nil, status.Errorf(codes.PermissionDenied, "report refused: %v", err)
		}
		return nil, status.Errorf(codes.Unavailable, "keeping the report: %v", err)
	}
	return &configpb.ReportAck{}, nil
}
