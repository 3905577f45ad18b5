// Package configclient follows the config-reconciler's executor table: it
// watches the stream, keeps the newest snapshot's lookup tables, reconnects
// with backoff, and keeps serving the last table while the reconciler is away.
// Over the same connection a runner reports what it cannot run (Report).
package configclient

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/fnrunner/fnrunner/libs/executortable"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// Client holds the newest executor table.
type Client struct {
	log        *slog.Logger
	stream     configpb.ExecutorConfigClient
	subscriber string
	tables     atomic.Pointer[executortable.Tables]
	// updated is when the newest table arrived (unix nanoseconds).
	updated   atomic.Int64
	ready     chan struct{}
	readyOnce sync.Once
	// mu guards changed, which is closed and replaced whenever tables
	// changes.
	mu      sync.Mutex
	changed chan struct{}
}

// New returns a client that watches over conn. subscriber names the caller
// in the reconciler's logs.
func New(log *slog.Logger, conn grpc.ClientConnInterface, subscriber string) *Client {
	return &Client{
		log:        log,
		stream:     configpb.NewExecutorConfigClient(conn),
		subscriber: subscriber,
		ready:      make(chan struct{}),
		changed:    make(chan struct{}),
	}
}

// Dial connects to the config-reconciler at address with the given transport
// credentials and returns a client (not yet running) and a function that
// closes the connection.
func Dial(log *slog.Logger, address, subscriber string, creds grpc.DialOption) (*Client, func(), error) {
	conn, err := grpc.NewClient(address, creds)
	if err != nil {
		return nil, nil, fmt.Errorf("config-reconciler address %q: %w", address, err)
	}
	return New(log, conn, subscriber), func() { conn.Close() }, nil
}

// WaitReady waits for the first snapshot; false if ctx ended first.
func (c *Client) WaitReady(ctx context.Context) bool {
	select {
	case <-c.ready:
		return true
	case <-ctx.Done():
		return false
	}
}

// coverWait bounds how long a call waits for the snapshot the gateway
// routed it by: snapshots reach every subscriber within milliseconds, so
// longer means this one's stream is broken, and the call goes on with the
// table it has.
const coverWait = 2 * time.Second

// Await returns the newest table, waiting up to max for the first one
// (a call that arrives just after the service started); nil if none came
// before max or ctx ended. A call the gateway routed by a snapshot this
// client has not seen yet (executortable.SnapshotOf) waits for it, up to
// two seconds: the gateway may have seen a FunctionConfig a moment before
// this service.
func (c *Client) Await(ctx context.Context, max time.Duration) *executortable.Tables {
	want, routed := executortable.SnapshotOf(ctx)
	enough := func(t *executortable.Tables) bool { return t != nil && (!routed || t.Covers(want)) }
	t, changed := c.Current()
	if enough(t) {
		return t
	}
	if t != nil {
		max = min(max, coverWait)
	}
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	for {
		select {
		case <-changed:
		case <-ctx.Done():
			return c.tables.Load()
		}
		if t, changed = c.Current(); enough(t) {
			return t
		}
	}
}

// Tables returns the newest table, or nil before the first snapshot.
func (c *Client) Tables() *executortable.Tables { return c.tables.Load() }

// Current returns the newest table (nil before the first snapshot) and a
// channel closed when a newer one arrives.
func (c *Client) Current() (*executortable.Tables, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tables.Load(), c.changed
}

// Report sends a runner's report on the snapshot it applied to the
// config-reconciler, over the connection the table comes on.
func (c *Client) Report(ctx context.Context, r *configpb.RunnerReport) error {
	_, err := c.stream.Report(ctx, r)
	return err
}

// Run watches until ctx ends.
func (c *Client) Run(ctx context.Context) {
	backoff := minBackoff
	for ctx.Err() == nil {
		received, err := c.watch(ctx)
		if ctx.Err() != nil {
			return
		}
		if received {
			backoff = minBackoff
		}
		if c.tables.Load() == nil {
			c.log.Info("waiting for the config-reconciler", "error", err, "retry_in", backoff.String())
		} else {
			c.log.Warn("config stream interrupted; serving the last table", "error", err, "retry_in", backoff.String())
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (c *Client) watch(ctx context.Context) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.stream.Watch(ctx, &configpb.WatchRequest{Subscriber: c.subscriber}, grpc.WaitForReady(false))
	if err != nil {
		return false, err
	}
	for {
		snap, err := stream.Recv()
		if err != nil {
			return received, err
		}
		received = true
		t := executortable.Build(snap)
		if old := c.tables.Load(); old == nil || old.Epoch != t.Epoch || old.Version != t.Version {
			c.store(t)
			c.log.Info("executor table updated", "epoch", t.Epoch, "version", t.Version, "functions", len(snap.GetFunctions()))
		}
		c.readyOnce.Do(func() { close(c.ready) })
	}
}

func (c *Client) store(t *executortable.Tables) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.tables.Store(t)
	c.updated.Store(time.Now().UnixNano())
	close(c.changed)
	c.changed = make(chan struct{})
}

// FunctionName names image for metrics as the newest table does
// (executortable.Tables.FunctionName); false before the first table and for
// images it does not run. It implements evalmetrics.Namer.
func (c *Client) FunctionName(image string) (string, bool) {
	return c.tables.Load().FunctionNameOf(image)
}

// Collectors are the table's metrics: its version and when it arrived
// (fnrunner_executor_table_version and
// fnrunner_executor_table_last_update_timestamp_seconds, both 0 before the
// first table).
func (c *Client) Collectors() []prometheus.Collector {
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_executor_table_version",
			Help: "Version of the executor table in use (0: none yet).",
		}, func() float64 {
			if t := c.tables.Load(); t != nil {
				return float64(t.Version)
			}
			return 0
		}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "fnrunner_executor_table_last_update_timestamp_seconds",
			Help: "When the executor table in use arrived, in Unix seconds (0: none yet); its age is time() minus this.",
		}, func() float64 {
			if n := c.updated.Load(); n != 0 {
				return float64(n) / 1e9
			}
			return 0
		}),
	}
}
