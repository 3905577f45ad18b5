// Package store holds the config-reconciler's executor table and streams it:
// every subscriber gets the whole table at once and again after each change.
package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// Store is the current table. It is safe for concurrent use.
type Store struct {
	mu       sync.Mutex
	snapshot *configpb.Snapshot
	// changed is closed and replaced on every change: a subscriber waits on
	// the channel it saw with the snapshot it last sent.
	changed chan struct{}
	// loaded is closed on the first Replace.
	loaded chan struct{}
	// published is when the current version was made (unix nanoseconds).
	published atomic.Int64
	// subscribers are the Watch calls in progress.
	subscribers atomic.Int64
}

// New returns an empty store; subscribers wait until the first Replace.
func New(defaultPrefix string) *Store {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return &Store{
		snapshot: &configpb.Snapshot{Epoch: hex.EncodeToString(b), DefaultImagePrefix: defaultPrefix},
		changed:  make(chan struct{}),
		loaded:   make(chan struct{}),
	}
}

// Replace sets the whole table. It bumps the version only when the content
// changed, and reports whether it did.
func (s *Store) Replace(functions []*configpb.FunctionConfig) bool {
	sorted := make([]*configpb.FunctionConfig, len(functions))
	copy(sorted, functions)
	sort.Slice(sorted, func(i, j int) bool {
		if sorted[i].GetNamespace() != sorted[j].GetNamespace() {
			return sorted[i].GetNamespace() < sorted[j].GetNamespace()
		}
		return sorted[i].GetName() < sorted[j].GetName()
	})
	next := &configpb.Snapshot{
		Epoch:              s.snapshot.GetEpoch(),
		DefaultImagePrefix: s.snapshot.GetDefaultImagePrefix(),
		Functions:          sorted,
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	first := s.snapshot.GetVersion() == 0
	next.Version = s.snapshot.GetVersion()
	if !first && proto.Equal(next, s.snapshot) {
		return false
	}
	next.Version++
	s.snapshot = next
	s.published.Store(time.Now().UnixNano())
	close(s.changed)
	s.changed = make(chan struct{})
	if first {
		close(s.loaded)
	}
	return true
}

// Current returns the current snapshot and a channel closed at the next change.
// The snapshot must not be modified.
func (s *Store) Current() (*configpb.Snapshot, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshot, s.changed
}

// Loaded is closed once the store holds its first table.
func (s *Store) Loaded() <-chan struct{} { return s.loaded }

// Watch calls send with the current table (after the first load), then with
// every newer one, until ctx ends or send fails. Snapshots that follow each
// other faster than send returns are coalesced: a subscriber always ends up
// with the newest.
func (s *Store) Watch(ctx context.Context, send func(*configpb.Snapshot) error) error {
	s.subscribers.Add(1)
	defer s.subscribers.Add(-1)
	select {
	case <-s.loaded:
	case <-ctx.Done():
		return ctx.Err()
	}
	for {
		snap, changed := s.Current()
		if err := send(snap); err != nil {
			return err
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Collectors export the table as published and its subscribers:
// fnrunner_executor_table_version and
// fnrunner_executor_table_last_update_timestamp_seconds (0 before the first
// table), and fnrunner_config_subscribers.
func (s *Store) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_executor_table_version",
			Help: "Version of the executor table published (0: none yet).",
		}, func() float64 {
			snap, _ := s.Current()
			return float64(snap.GetVersion())
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_executor_table_last_update_timestamp_seconds",
			Help: "When the executor table published was made, in Unix seconds (0: none yet); its age is time() minus this.",
		}, func() float64 {
			if n := s.published.Load(); n != 0 {
				return float64(n) / 1e9
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_config_subscribers",
			Help: "Executor table streams open (gateways, binary-runners and pod-managers watching).",
		}, func() float64 { return float64(s.subscribers.Load()) }),
	}
}
