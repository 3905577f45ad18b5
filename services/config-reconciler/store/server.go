package store

import (
	"log/slog"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// Server serves the store over the ExecutorConfig gRPC service.
type Server struct {
	configpb.UnimplementedExecutorConfigServer
	Store *Store
	Log   *slog.Logger
}

// Watch implements configpb.ExecutorConfigServer.
func (s *Server) Watch(req *configpb.WatchRequest, stream configpb.ExecutorConfig_WatchServer) error {
	s.Log.Info("subscriber connected", "subscriber", req.GetSubscriber())
	err := s.Store.Watch(stream.Context(), func(snap *configpb.Snapshot) error {
		return stream.Send(snap)
	})
	s.Log.Info("subscriber left", "subscriber", req.GetSubscriber(), "reason", err)
	return nil
}
