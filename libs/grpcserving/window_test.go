package grpcserving_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
)

// recordedConn keeps what a client connection sent and received.
type recordedConn struct {
	net.Conn
	mu             sync.Mutex
	sent, received bytes.Buffer
}

func (c *recordedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.received.Write(b[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recordedConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.mu.Lock()
	c.sent.Write(b[:n])
	c.mu.Unlock()
	return n, err
}

// frames counts the HTTP/2 frames in b by type; PINGs that answer one are
// counted apart.
func frames(t *testing.T, b []byte) map[string]int {
	t.Helper()
	out := map[string]int{}
	fr := http2.NewFramer(io.Discard, bytes.NewReader(b))
	for {
		f, err := fr.ReadFrame()
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return out
		}
		require.NoError(t, err)
		name := f.Header().Type.String()
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() {
			name += " ack"
		}
		out[name]++
	}
}

// clients are the two kinds of client an fnrunner server has.
var clients = []struct {
	name string
	dial []grpc.DialOption
	ours bool // fnrunner's, with its fixed windows
}{
	{name: "porch's client, grpc-go defaults"},
	{name: "fnrunner's client", dial: grpcserving.WindowDialOptions(), ours: true},
}

// Calls to an fnrunner server draw no flow-control frames: with grpc-go's
// dynamic windows the receiver of each call's first data sends a
// WINDOW_UPDATE and a bandwidth-estimation PING, which the sender answers,
// waking both sides once more a call. A porch (default) client's own PINGs
// are still answered; fnrunner's clients (WindowDialOptions) send none.
func TestCallsDrawNoFlowControlFrames(t *testing.T) {
	addr := serve(t, grpcserving.New(slog.New(slog.NewTextHandler(io.Discard, nil)), grpcserving.Config{Name: "test", MaxMessageSize: 1 << 20}))
	for _, tc := range clients {
		t.Run(tc.name, func(t *testing.T) {
			var conn *recordedConn
			dialer := func(ctx context.Context, addr string) (net.Conn, error) {
				c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
				if err != nil {
					return nil, err
				}
				conn = &recordedConn{Conn: c}
				return conn, nil
			}
			cc, err := grpc.NewClient("passthrough:///"+addr, append(tc.dial,
				grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(dialer))...)
			require.NoError(t, err)
			health := healthpb.NewHealthClient(cc)
			const calls = 20
			for range calls {
				_, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{Service: grpcserving.LivenessService})
				require.NoError(t, err)
			}
			require.NoError(t, cc.Close())

			conn.mu.Lock()
			defer conn.mu.Unlock()
			require.True(t, bytes.HasPrefix(conn.sent.Bytes(), []byte(http2.ClientPreface)))
			fromServer := frames(t, conn.received.Bytes())
			fromClient := frames(t, conn.sent.Bytes()[len(http2.ClientPreface):])
			require.Equal(t, calls, fromServer["HEADERS"]/2, "a call's answer is headers and trailers: %v", fromServer)

			assert.Zero(t, fromServer["PING"], "the server's own PINGs: %v", fromServer)
			// (the last PING's answer may come after the client closed)
			assert.InDelta(t, fromClient["PING"], fromServer["PING ack"], 1, "the server answers the client's PINGs")
			// The connection's window is raised once, when it opens.
			assert.LessOrEqual(t, fromServer["WINDOW_UPDATE"], 1, "from the server: %v", fromServer)
			if tc.ours {
				assert.Zero(t, fromClient["PING"], "fnrunner's client's PINGs: %v", fromClient)
				assert.LessOrEqual(t, fromClient["WINDOW_UPDATE"], 1, "from the client: %v", fromClient)
			}
		})
	}
}

// echoService answers a call with its own bytes.
var echoService = grpc.ServiceDesc{
	ServiceName: "test.Echo",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(_ any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			var in wrapperspb.BytesValue
			if err := dec(&in); err != nil {
				return nil, err
			}
			echo := func(context.Context, any) (any, error) { return &in, nil }
			return interceptor(ctx, &in, &grpc.UnaryServerInfo{FullMethod: "/test.Echo/Echo"}, echo)
		},
	}},
}

// Messages larger than both fixed windows still pass, several at once on
// one connection, each way: the windows come back as the data is read.
func TestMessagesLargerThanTheWindows(t *testing.T) {
	const size = 6 << 20 // porch's --max-request-body-size
	require.Greater(t, size, grpcserving.ConnWindow)
	srv := grpcserving.New(slog.New(slog.NewTextHandler(io.Discard, nil)), grpcserving.Config{Name: "test", MaxMessageSize: size + 1<<10})
	srv.RegisterService(&echoService, struct{}{})
	addr := serve(t, srv)
	for _, tc := range clients {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := grpc.NewClient(addr, append(tc.dial, grpc.WithTransportCredentials(insecure.NewCredentials()),
				grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(size+1<<10), grpc.MaxCallSendMsgSize(size+1<<10)))...)
			require.NoError(t, err)
			defer cc.Close()
			var g errgroup.Group
			for i := range 4 {
				g.Go(func() error {
					in := wrapperspb.Bytes(bytes.Repeat([]byte{byte('a' + i)}, size))
					var out wrapperspb.BytesValue
					if err := cc.Invoke(context.Background(), "/test.Echo/Echo", in, &out); err != nil {
						return err
					}
					if !bytes.Equal(in.GetValue(), out.GetValue()) {
						return fmt.Errorf("call %d: %d bytes back, not its own %d", i, len(out.GetValue()), size)
					}
					return nil
				})
			}
			require.NoError(t, g.Wait())
		})
	}
}
