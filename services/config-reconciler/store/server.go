package store

import (
	"context"
	"log/slog"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// Server serves the store over the ExecutorConfig gRPC service.
type Server struct {
	configpb.UnimplementedExecutorConfigServer
	Store *Store
	Log   *slog.Logger
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
