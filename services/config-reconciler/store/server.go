package store

import (
	"context"
	"errors"
	"log/slog"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/reporttoken"
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

// ErrBusy is why a Recorder refuses a report it has no room to check now.
// Report answers it with ResourceExhausted.
var ErrBusy = errors.New("too many reports being checked")

// Recorder keeps the binary-runners' reports (reports.ConfigMaps in a
// cluster, reports.Memory with --config-dir).
type Recorder interface {
	// Record keeps r as its runner's report, replacing the last one.
	// token is the service account token the report came with ("" for
	// none). An error wrapping ErrUnauthenticated or ErrUnknownRunner
	// refuses this report (a runner tries again with its next report);
	// ErrBusy, or any other, may pass on a retry.
	Record(ctx context.Context, token string, r *configpb.RunnerReport) error
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
	token, err := reporttoken.FromIncoming(ctx)
	switch {
	case errors.Is(err, reporttoken.ErrTooLarge):
		return nil, status.Errorf(codes.InvalidArgument, "report refused: %v", err)
	case err != nil:
		token = "" // a Recorder that needs one says so
	}
	if err := s.Reports.Record(ctx, token, req); err != nil {
		// What the caller is told stays short of the apiserver's words
		// (a caller may be anyone who reaches the port); the log has
		// them. Refusals are routine for a misconfigured runner and
		// cheap to send: logged at debug.
		switch {
		case errors.Is(err, ErrUnauthenticated):
			s.Log.Debug("runner report refused", "runner", req.GetRunner(), "error", err)
			return nil, status.Error(codes.Unauthenticated, "report refused: no service account token valid for this config-reconciler's audience, bound to a pod (binary-runner --report-token-file)")
		case errors.Is(err, ErrUnknownRunner):
			s.Log.Debug("runner report refused", "runner", req.GetRunner(), "error", err)
			return nil, status.Errorf(codes.PermissionDenied, "report refused: %v", err)
		case errors.Is(err, ErrBusy):
			return nil, status.Errorf(codes.ResourceExhausted, "report not checked: %v; try again", err)
		}
		s.Log.Warn("keeping a runner report", "runner", req.GetRunner(), "error", err)
		return nil, status.Error(codes.Unavailable, "keeping the report failed (the config-reconciler logs why); try again")
	}
	return &configpb.ReportAck{}, nil
}
