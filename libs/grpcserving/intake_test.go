package grpcserving_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
	"github.com/fnrunner/fnrunner/libs/intake"
	"github.com/fnrunner/fnrunner/tests/h2raw"
	"github.com/fnrunner/fnrunner/tests/harness"
)

// The attacks below gRPC: a raw HTTP/2 client (tests/h2raw) beside a porch
// client (grpc-go's, defaults) on one server with small bounds. Each
// asserts what the attacker got, that the porch client's calls were
// answered meanwhile, and what the gate counted. The waits are bounds for a
// broken server, never what is asserted.

const (
	echoMethod = "/test.Echo/Echo"
	patience   = 20 * time.Second
)

// bigAnswerService answers a call with as many bytes as the call sends,
// times ten, and tells sent when the gate counts its answer out; with
// untilEnd, its handler returns only once its stream has ended.
func bigAnswerService(sent chan<- int, untilEnd bool) *grpc.ServiceDesc {
	return &grpc.ServiceDesc{
		ServiceName: "test.Echo",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Echo",
			Handler: func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
				var in wrapperspb.BytesValue
				if err := dec(&in); err != nil {
					return nil, err
				}
				out := bytes.Repeat(in.GetValue(), 10)
				intake.Sent(ctx, int64(len(out)), func() {
					if sent != nil {
						sent <- len(out)
					}
				})
				if untilEnd {
					<-ctx.Done()
				}
				return wrapperspb.Bytes(out), nil
			},
		}},
	}
}

// blockingService answers as bigAnswerService does, but a call that sends
// "block" tells entered its handler runs, and ends only with its stream.
func blockingService(entered chan<- struct{}) *grpc.ServiceDesc {
	desc := bigAnswerService(nil, false)
	answer := desc.Methods[0].Handler
	desc.Methods[0].Handler = func(srv any, ctx context.Context, dec func(any) error, in grpc.UnaryServerInterceptor) (any, error) {
		var req wrapperspb.BytesValue
		if err := dec(&req); err != nil {
			return nil, err
		}
		if string(req.GetValue()) == "block" {
			entered <- struct{}{}
			<-ctx.Done()
		}
		return answer(srv, ctx, func(v any) error { v.(*wrapperspb.BytesValue).Value = req.GetValue(); return nil }, in)
	}
	return desc
}

type gated struct {
	srv  *grpcserving.Server
	addr string
}

func startGated(t *testing.T, limits intake.Limits, sent chan<- int) gated {
	t.Helper()
	srv := grpcserving.New(slog.New(slog.NewTextHandler(io.Discard, nil)), grpcserving.Config{
		Name: "test", MaxMessageSize: 4 << 20, MaxConcurrentStreams: 1024, Intake: limits,
	})
	srv.RegisterService(bigAnswerService(sent, false), struct{}{})
	return gated{srv: srv, addr: serve(t, srv)}
}

// porch calls the server as porch's generated client would, and fails the
// test unless every call is answered.
func (g gated) porch(t *testing.T, calls int) {
	t.Helper()
	cc, err := grpc.NewClient(g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	require.NoError(t, err)
	defer cc.Close()
	for i := range calls {
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		var out wrapperspb.BytesValue
		err := cc.Invoke(ctx, echoMethod, wrapperspb.Bytes([]byte("porch")), &out)
		cancel()
		require.NoError(t, err, "porch's call %d", i)
		require.Len(t, out.GetValue(), 50)
	}
}

func (g gated) refused(t *testing.T, reason string) float64 {
	t.Helper()
	mfs, err := g.srv.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "fnrunner_intake_refused_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var server, r string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "server":
					server = l.GetValue()
				case "reason":
					r = l.GetValue()
				}
			}
			if server == "grpc" && r == reason {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no fnrunner_intake_refused_total{server=grpc,reason=%s}", reason)
	return 0
}

func (g gated) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := g.srv.Registry.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				if m.GetLabel()[0].GetValue() == "grpc" {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no %s", name)
	return 0
}

// A header list that HPACK decodes to megabytes from a few bytes on the
// wire (one large field inserted once, then referenced by one-byte indexes)
// is reset before any handler runs; porch's calls go on.
func TestHPACKAmplifiedHeadersAreReset(t *testing.T) {
	g := startGated(t, intake.Limits{}, nil)
	raw := h2raw.Dial(t, g.addr, "")
	field := hpack.HeaderField{Name: "x-pad-bin", Value: strings.Repeat("QUFB", 1000)} // 4 KB
	var refs []hpack.HeaderField
	for range 3000 { // decodes to about 12 MB a stream
		refs = append(refs, field)
	}
	var ids []uint32
	for range 128 {
		ids = append(ids, raw.Open(echoMethod, refs...))
	}
	for _, id := range ids {
		e, ok := raw.Wait(id, patience)
		if !ok && raw.Closed() {
			break // a connection error ends them all
		}
		require.True(t, ok, "stream %d not ended", id)
		assert.True(t, e.WasReset || e.Status() != 0, "stream %d: %+v", id, e)
	}
	g.porch(t, 3)
}

// Streams that send headers and no body hold a place each; past
// MaxUnreadStreams the attacker's next streams are refused, while a porch
// call (another peer) takes the place of the attacker's oldest; the
// attacker's streams end at the receive timeout, and every place is given
// back.
func TestUnreadStreamsAreBoundedFairlyAndTimeOut(t *testing.T) {
	g := startGated(t, intake.Limits{MaxUnreadStreams: 8, MaxReading: 2, ReceiveTimeout: time.Second}, nil)
	raw := h2raw.Dial(t, g.addr, "127.0.0.2")
	var ids []uint32
	for i := range 9 { // one reads (its peer's share of two), eight wait
		ids = append(ids, raw.Open(echoMethod))
		harness.WaitFor(t, "the attacker's stream to be counted", func() bool {
			return g.gauge(t, "fnrunner_intake_unread_streams")+g.gauge(t, "fnrunner_intake_reading_streams") == float64(i+1)
		})
	}
	over := raw.Open(echoMethod)
	e, ok := raw.Wait(over, patience)
	require.True(t, ok)
	assert.Equal(t, int(codes.ResourceExhausted), e.Status(), "%+v", e)
	assert.Contains(t, e.Message, "--max-unread-streams")

	g.porch(t, 1)
	assert.Equal(t, 1.0, g.refused(t, "preempted"))
	assert.Equal(t, 1.0, g.refused(t, "unread_streams"))

	for _, id := range ids {
		e, ok := raw.Wait(id, patience)
		require.True(t, ok, "stream %d not ended", id)
		assert.NotZero(t, e.Status(), "stream %d: %+v", id, e)
	}
	harness.WaitFor(t, "every place given back", func() bool {
		return g.gauge(t, "fnrunner_intake_unread_streams") == 0 && g.gauge(t, "fnrunner_intake_reading_streams") == 0
	})
	assert.Equal(t, 8.0, g.refused(t, "receive_timeout"), "the reading stream and the seven left waiting")
	g.porch(t, 2)
}

// Slow senders from two peers hold every reading slot (each its peer's
// share); a porch call waits its turn and is answered once the receive
// timeout has ended one of them.
func TestSlowSendersDoNotStarvePorch(t *testing.T) {
	g := startGated(t, intake.Limits{MaxReading: 4, ReceiveTimeout: 2 * time.Second}, nil)
	msg := h2raw.Message(bytes.Repeat([]byte("a"), 256<<10))
	var conns []*h2raw.Conn
	var ids [][]uint32
	for _, attacker := range []string{"127.0.0.2", "127.0.0.3"} {
		raw := h2raw.Dial(t, g.addr, attacker)
		var cids []uint32
		for range 2 {
			id := raw.Open(echoMethod)
			raw.DataUnchecked(id, msg[:1000], false) // the rest never comes
			cids = append(cids, id)
		}
		conns, ids = append(conns, raw), append(ids, cids)
	}
	harness.WaitFor(t, "the slow senders to hold every slot", func() bool { return g.gauge(t, "fnrunner_intake_reading_streams") == 4 })
	// Porch comes half a timeout later, so that on a loaded machine its
	// own receive timeout does not race the slow senders'.
	time.Sleep(time.Second)
	g.porch(t, 1)
	for i, raw := range conns {
		for _, id := range ids[i] {
			e, ok := raw.Wait(id, patience)
			require.True(t, ok, "slow stream %d not ended", id)
			assert.Equal(t, int(codes.DeadlineExceeded), e.Status(), "%+v", e)
			assert.Contains(t, e.Message, "--max-receive-duration")
		}
	}
	assert.Equal(t, 4.0, g.refused(t, "receive_timeout"))
}

// One peer's many connections, each with slow senders, hold no more than
// the peer's share of the reading slots: porch, another peer, reads at once
// though the attacker's streams would hold theirs for a minute.
func TestOnePeersConnectionsDoNotStarvePorch(t *testing.T) {
	g := startGated(t, intake.Limits{MaxReading: 4, ReceiveTimeout: time.Minute}, nil)
	msg := h2raw.Message(bytes.Repeat([]byte("a"), 256<<10))
	for range 6 {
		raw := h2raw.Dial(t, g.addr, "127.0.0.2")
		for range 2 {
			id := raw.Open(echoMethod)
			raw.DataUnchecked(id, msg[:1000], false) // the rest never comes
		}
	}
	harness.WaitFor(t, "the peer's streams to read or wait", func() bool {
		return g.gauge(t, "fnrunner_intake_reading_streams") == 2 && g.gauge(t, "fnrunner_intake_reading_waiting_streams") == 10
	})
	g.porch(t, 3)
	assert.Equal(t, 2.0, g.gauge(t, "fnrunner_intake_reading_streams"), "the attacker's share, and no more")
	assert.Zero(t, g.refused(t, "receive_timeout"))
}

// A request that trickles in, slower than MinReceiveRate, is ended long
// before its receive timeout, and gives its reading slot to porch.
func TestTricklingRequestIsEnded(t *testing.T) {
	g := startGated(t, intake.Limits{MaxReading: 2, ReceiveTimeout: time.Minute, MinReceiveRate: 64 << 10, ReceiveRateWindow: 500 * time.Millisecond}, nil)
	msg := h2raw.Message(bytes.Repeat([]byte("a"), 256<<10))
	raw := h2raw.Dial(t, g.addr, "127.0.0.2")
	id := raw.Open(echoMethod)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // ten bytes a tenth of a second: 100 B/s
		for off := 0; off+10 < len(msg); off += 10 {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if raw.Closed() {
				return
			}
			raw.DataUnchecked(id, msg[off:off+10], false)
		}
	}()
	e, ok := raw.Wait(id, patience)
	require.True(t, ok, "the trickling stream was not ended")
	assert.Equal(t, int(codes.DeadlineExceeded), e.Status(), "%+v", e)
	assert.Contains(t, e.Message, "--min-receive-rate")
	assert.Equal(t, 1.0, g.refused(t, "receive_too_slow"))
	assert.Zero(t, g.refused(t, "receive_timeout"))
	g.porch(t, 2)
}

// Clients that close their connection under a call they made leave
// nothing of their IP behind once the call has ended: grpc-go closes the
// connection before it ends its streams.
func TestClosedPeersAreForgotten(t *testing.T) {
	srv := grpcserving.New(slog.New(slog.NewTextHandler(io.Discard, nil)), grpcserving.Config{
		Name: "test", MaxMessageSize: 4 << 20, MaxConcurrentStreams: 1024, Intake: intake.Limits{MaxReading: 4, ReceiveTimeout: time.Minute},
	})
	entered := make(chan struct{}, 64)
	srv.RegisterService(blockingService(entered), struct{}{})
	g := gated{srv: srv, addr: serve(t, srv)}
	var wg sync.WaitGroup
	for i := range 20 {
		local := fmt.Sprintf("127.0.9.%d", i+1)
		cc, err := grpc.NewClient(g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
				return d.DialContext(ctx, "tcp", a)
			}))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = cc.Invoke(context.Background(), echoMethod, wrapperspb.Bytes([]byte("block")), new(wrapperspb.BytesValue))
		}()
		select { // its handler runs, and waits for the stream's end
		case <-entered:
		case <-time.After(patience):
			t.Fatal("the call did not reach its handler")
		}
		require.NoError(t, cc.Close())
	}
	wg.Wait()
	harness.WaitFor(t, "every connection and IP forgotten", func() bool {
		return g.gauge(t, "fnrunner_intake_connections") == 0 && g.gauge(t, "fnrunner_intake_peers") == 0
	})
	g.porch(t, 1)
}

// A client that asks for large answers and never opens its receive window
// has its connection closed at the send timeout; the gate counts its
// answers out when it closes, and porch's calls go on.
func TestShutReceiveWindowClosesTheConnection(t *testing.T) {
	sent := make(chan int, 16)
	g := startGated(t, intake.Limits{SendTimeout: time.Second}, sent)
	raw := h2raw.Dial(t, g.addr, "", http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	for range 8 {
		id := raw.Open(echoMethod)
		// Under the server's stream window (the raw client heeds no
		// flow control); the answers are ten times larger.
		raw.DataUnchecked(id, h2raw.Message(bytes.Repeat([]byte("b"), 50<<10)), true)
	}
	for range 8 {
		select {
		case n := <-sent:
			assert.Equal(t, 500<<10, n)
		case <-time.After(patience):
			t.Fatal("answers not counted out")
		}
	}
	select {
	case <-raw.Done():
	case <-time.After(patience):
		t.Fatal("the connection was not closed")
	}
	assert.Zero(t, raw.DataReceived(1))
	assert.Equal(t, 1.0, g.refused(t, "send_timeout"))
	g.porch(t, 2)
}

// Past the peer's limit an idle connection of that peer is closed for the
// new one; with none idle, the new one is refused. Another peer (porch, on
// 127.0.0.1) is not counted against it, and over the global limit the
// connection idle longest goes.
func TestConnectionLimits(t *testing.T) {
	g := startGated(t, intake.Limits{MaxConnections: 4, MaxConnectionsPerPeer: 2}, nil)
	const attacker = "127.0.0.2"
	idle := h2raw.Dial(t, g.addr, attacker)
	busy := h2raw.Dial(t, g.addr, attacker)
	busy.Open(echoMethod) // headers only: a stream stays open
	harness.WaitFor(t, "both connections and the stream", func() bool {
		return g.gauge(t, "fnrunner_intake_connections") == 2 && g.gauge(t, "fnrunner_intake_reading_streams") == 1
	})
	third := h2raw.Dial(t, g.addr, attacker)
	select {
	case <-idle.Done():
	case <-time.After(patience):
		t.Fatal("the peer's idle connection was not closed for its new one")
	}
	third.Open(echoMethod)
	harness.WaitFor(t, "the third's stream", func() bool {
		return g.gauge(t, "fnrunner_intake_unread_streams")+g.gauge(t, "fnrunner_intake_reading_streams") == 2
	})
	refused := h2raw.Dial(t, g.addr, attacker)
	select {
	case <-refused.Done():
	case <-time.After(patience):
		t.Fatal("a connection over the peer's limit was not refused")
	}
	assert.Equal(t, 1.0, g.refused(t, "connections_per_peer"))
	assert.False(t, busy.Closed())
	assert.False(t, third.Closed())

	older := h2raw.Dial(t, g.addr, "127.0.0.3")
	harness.WaitFor(t, "three connections", func() bool { return g.gauge(t, "fnrunner_intake_connections") == 3 })
	newer := h2raw.Dial(t, g.addr, "127.0.0.4")
	harness.WaitFor(t, "four connections", func() bool { return g.gauge(t, "fnrunner_intake_connections") == 4 })
	g.porch(t, 1) // a fifth: one of the idle two goes
	harness.WaitFor(t, "an idle connection closed for porch's", func() bool { return older.Closed() || newer.Closed() })
	assert.Equal(t, 2.0, g.refused(t, "connection_evicted"))
	assert.False(t, busy.Closed())
	assert.False(t, third.Closed())
}

// A connection whose client takes none of its answers has no more of its
// requests read once its unsent answers pass MaxUnsentBytes; porch's calls
// go on, and the held requests are read once the client takes the answers.
func TestUnsentAnswersHoldBackTheirConnection(t *testing.T) {
	sent := make(chan int, 16)
	g := startGated(t, intake.Limits{MaxUnsentBytes: 100 << 10}, sent)
	raw := h2raw.Dial(t, g.addr, "", http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	var ids []uint32
	for i := range 3 {
		id := raw.Open(echoMethod)
		raw.DataUnchecked(id, h2raw.Message(bytes.Repeat([]byte("c"), 20<<10)), true) // 200 KiB answers
		ids = append(ids, id)
		if i == 0 {
			harness.WaitFor(t, "the first answer", func() bool { return g.gauge(t, "fnrunner_intake_unsent_bytes") > 150<<10 })
		}
	}
	harness.WaitFor(t, "the second request to wait behind the first answer", func() bool {
		return g.gauge(t, "fnrunner_intake_reading_waiting_streams") == 2
	})
	g.porch(t, 2)
	for range 2 { // porch's two answers, counted out once written (maybe after its calls returned)
		select {
		case n := <-sent:
			assert.Equal(t, 50, n, "an answer counted out that its client never took")
		case <-time.After(patience):
			t.Fatal("porch's answers not counted out")
		}
	}
	select {
	case n := <-sent:
		t.Fatalf("an answer of %d bytes counted out that its client never took", n)
	default:
	}

	raw.WindowUpdate(0, 8<<20)
	for _, id := range ids {
		raw.WindowUpdate(id, 8<<20)
	}
	for _, id := range ids {
		e, ok := raw.Wait(id, patience)
		require.True(t, ok, "stream %d not answered", id)
		assert.Zero(t, e.Status(), "stream %d: %+v", id, e)
	}
	for range 3 {
		select {
		case n := <-sent:
			assert.Equal(t, 200<<10, n)
		case <-time.After(patience):
			t.Fatal("answers not counted out")
		}
	}
}

// The gate reads a request only when its handler asks for it, which holds
// because grpc-go calls a unary handler before it reads the body: a handler
// that never asks answers a stream whose body never comes.
func TestUnaryHandlerRunsBeforeTheBodyIsRead(t *testing.T) {
	srv := grpcserving.New(slog.New(slog.NewTextHandler(io.Discard, nil)), grpcserving.Config{Name: "test", MaxMessageSize: 1 << 20})
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Early",
		HandlerType: (*any)(nil),
		Methods: []grpc.MethodDesc{{
			MethodName: "Early",
			Handler: func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
				return wrapperspb.Bytes([]byte("before the body")), nil
			},
		}},
	}, struct{}{})
	raw := h2raw.Dial(t, serve(t, srv), "")
	id := raw.Open("/test.Early/Early") // headers only, the stream left open
	e, ok := raw.Wait(id, patience)
	require.True(t, ok, "no answer before the body: grpc-go now reads the body before it calls the handler, and the gate's reading slots no longer bound what a request holds")
	assert.Equal(t, 0, e.Status(), "%+v", e)
}

// Porch's ordinary traffic never trips a bound: 32 calls at once on one
// connection, each of the largest message, at the flags' defaults.
func TestPorchsTrafficFitsTheDefaults(t *testing.T) {
	const size = 6 << 20 // porch's --max-request-body-size
	var f grpcserving.Flags
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	f.Register(fs, "")
	require.NoError(t, fs.Parse([]string{"--listen-host=127.0.0.1"}))
	lis, srv, err := f.Open(slog.New(slog.NewTextHandler(io.Discard, nil)), 0, nil, grpcserving.Config{Name: "test", MaxMessageSize: size})
	require.NoError(t, err)
	srv.RegisterService(&echoService, struct{}{})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = srv.Serve(ctx, lis) }()

	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(size), grpc.MaxCallSendMsgSize(size)))
	require.NoError(t, err)
	defer cc.Close()
	payload := bytes.Repeat([]byte("p"), size-16)
	var eg errgroup.Group
	for range 32 {
		eg.Go(func() error {
			var out wrapperspb.BytesValue
			return cc.Invoke(ctx, "/test.Echo/Echo", wrapperspb.Bytes(payload), &out)
		})
	}
	require.NoError(t, eg.Wait())
}

// Frames the server must answer (an empty SETTINGS every 200 ms) are no
// progress for answers the client never takes: its connection is still
// closed at the send timeout.
func TestAnsweredFramesDoNotKeepAStalledConnection(t *testing.T) {
	g := startGated(t, intake.Limits{SendTimeout: time.Second}, nil)
	raw := h2raw.Dial(t, g.addr, "", http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	id := raw.Open(echoMethod)
	raw.DataUnchecked(id, h2raw.Message(bytes.Repeat([]byte("k"), 50<<10)), true)
	deadline := time.After(patience)
	for !raw.Closed() {
		select {
		case <-deadline:
			t.Fatal("the connection was kept open by frames the server answers")
		case <-time.After(200 * time.Millisecond):
			raw.Settings()
		}
	}
	assert.Equal(t, 1.0, g.refused(t, "send_timeout"))
}

// A request sent compressed gets its answer uncompressed, so that the
// bytes written reach what Sent counted and the answer is counted out.
func TestCompressedRequestsGetAnswersCountedOut(t *testing.T) {
	sent := make(chan int, 16)
	g := startGated(t, intake.Limits{MaxUnsentBytes: 1 << 20, SendTimeout: time.Minute}, sent)
	cc, err := grpc.NewClient(g.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.UseCompressor(gzip.Name), grpc.MaxCallRecvMsgSize(64<<20)))
	require.NoError(t, err)
	defer cc.Close()
	for i := range 3 {
		var out wrapperspb.BytesValue
		ctx, cancel := context.WithTimeout(context.Background(), patience)
		err := cc.Invoke(ctx, echoMethod, wrapperspb.Bytes(bytes.Repeat([]byte("z"), 100<<10)), &out)
		cancel()
		require.NoError(t, err, "call %d", i)
		select {
		case n := <-sent:
			assert.Equal(t, 1000<<10, n)
		case <-time.After(patience):
			t.Fatalf("call %d's answer was never counted out", i)
		}
	}
	assert.Zero(t, g.gauge(t, "fnrunner_intake_unsent_bytes"))
}

// What a connection writes while no answer waits (here the trailers of
// 3,000 calls to an unknown method) is no credit: a later answer behind a
// shut window is not counted out.
func TestOtherWritesAreNoCreditForAnswers(t *testing.T) {
	sent := make(chan int, 16)
	g := startGated(t, intake.Limits{}, sent)
	raw := h2raw.Dial(t, g.addr, "", http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	var last uint32
	for range 3000 {
		last = raw.Open("/test.Echo/Unknown")
		raw.DataUnchecked(last, h2raw.Message(nil), true)
	}
	_, ok := raw.Wait(last, patience)
	require.True(t, ok)
	id := raw.Open(echoMethod)
	raw.DataUnchecked(id, h2raw.Message(bytes.Repeat([]byte("q"), 5<<10)), true) // a 50 KiB answer
	harness.WaitFor(t, "the answer to wait", func() bool { return g.gauge(t, "fnrunner_intake_unsent_bytes") > 40<<10 })
	assert.Empty(t, sent, "an answer the client never took was counted out")
}

// The answer of a call whose client reset it before grpc-go wrote the
// answer is taken back when its handler returns: it is never written, and
// would otherwise count against its connection for good.
func TestAnswerOfAResetCallIsTakenBack(t *testing.T) {
	sent := make(chan int, 16)
	srv := grpcserving.New(slog.New(slog.NewTextHandler(io.Discard, nil)), grpcserving.Config{
		Name: "test", MaxMessageSize: 4 << 20, Intake: intake.Limits{MaxUnsentBytes: 1 << 20},
	})
	srv.RegisterService(bigAnswerService(sent, true), struct{}{}) // the client resets the call meanwhile
	g := gated{srv: srv, addr: serve(t, srv)}
	raw := h2raw.Dial(t, g.addr, "")
	id := raw.Open(echoMethod)
	raw.DataUnchecked(id, h2raw.Message(bytes.Repeat([]byte("r"), 50<<10)), true)
	harness.WaitFor(t, "the answer to be counted", func() bool { return g.gauge(t, "fnrunner_intake_unsent_bytes") > 400<<10 })
	raw.Reset(id)
	select {
	case n := <-sent:
		assert.Equal(t, 500<<10, n)
	case <-time.After(patience):
		t.Fatal("the reset call's answer was never taken back")
	}
	assert.Zero(t, g.gauge(t, "fnrunner_intake_unsent_bytes"))
}
