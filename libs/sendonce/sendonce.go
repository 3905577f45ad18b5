// Package sendonce sends each EvaluateFunction call to an executor at most
// once. A call that could not be sent yet (its executor restarting, a pod
// not answering) may wait or go elsewhere: nothing ran. A call whose
// connection breaks after it was sent is never repeated, since the function
// may have run; the caller gets Unavailable saying so.
package sendonce

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/resolver/manual"
	"google.golang.org/grpc/status"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// DialOptions are the dial options for the connections to executor
// services: reconnect quickly after an executor restarts (gRPC's default
// backoff grows to two minutes), and send each EvaluateFunction once
// (Interceptor).
//
// An address that resolves to several (a headless Service through dns:///,
// or a list, Target) is balanced round-robin, and a connection whose pings
// go unanswered (a stopped or unreachable executor) is given up within
// KeepaliveTime + KeepaliveTimeout, so calls go to the others.
func DialOptions(connectWait time.Duration) []grpc.DialOption {
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = 50*time.Millisecond, time.Second
	return []grpc.DialOption{
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: 5 * time.Second}),
		grpc.WithChainUnaryInterceptor(Interceptor(connectWait)),
		grpc.WithDefaultServiceConfig(`{"loadBalancingConfig":[{"round_robin":{}}]}`),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout, PermitWithoutStream: true}),
	}
}

// Client keepalive on executor connections: a ping after this long without
// frames, and the connection given up when its answer takes longer than
// KeepaliveTimeout. gRPC's servers must allow it (grpcserving does).
const (
	KeepaliveTime    = 10 * time.Second // gRPC's least
	KeepaliveTimeout = 5 * time.Second
)

// staticScheme is the resolver scheme of an address list (Target).
const staticScheme = "fnrunner-list"

// Target is the gRPC target and dial options for an executor address:
// "host:port", a target gRPC resolves itself ("dns:///name:port": every
// address the name has, e.g. a headless Service's pods), or a
// comma-separated list of host:port, each a backend of one balanced
// connection.
func Target(address string) (string, []grpc.DialOption, error) {
	var addrs []resolver.Address
	for _, a := range strings.Split(address, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, resolver.Address{Addr: a})
		}
	}
	switch {
	case len(addrs) == 0:
		return "", nil, fmt.Errorf("executor address %q names no address", address)
	case len(addrs) == 1:
		return addrs[0].Addr, nil, nil
	}
	for _, a := range addrs {
		if _, _, err := net.SplitHostPort(a.Addr); err != nil {
			return "", nil, fmt.Errorf("executor address list %q: %q is not host:port", address, a.Addr)
		}
	}
	r := manual.NewBuilderWithScheme(staticScheme)
	r.InitialState(resolver.State{Addresses: addrs})
	// The addresses are the resolver's; the target names them, escaped
	// (an IPv6 zone holds "%").
	return staticScheme + ":///" + url.PathEscape(address), []grpc.DialOption{grpc.WithResolvers(r)}, nil
}

// Interceptor is the client interceptor for EvaluateFunction calls to an
// executor service. It separates the two ways such a call can fail for want
// of a connection:
//
//   - Before it is sent (the executor is restarting, or not up yet): the
//     call waits up to connectWait for the connection and is then sent with
//     WaitForReady, so gRPC holds it rather than failing it while the
//     connection is re-established. Nothing ran yet, so waiting is safe.
//   - After it is sent (the executor died mid-call): the function may have
//     run, so the call is not repeated; the caller gets Unavailable saying so.
//
// A call that failed before it was sent, here or in the executor service,
// fails with a *NotSentError.
func Interceptor(connectWait time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if method != pb.FunctionEvaluator_EvaluateFunction_FullMethodName {
			return invoker(ctx, method, req, reply, cc, opts...)
		}
		if err := waitReady(ctx, cc, connectWait, failingFast(ctx)); err != nil {
			if ctx.Err() != nil {
				return status.FromContextError(ctx.Err()).Err()
			}
			if errors.Is(err, errConnectFailed) {
				return NotSent("executor service %s: %v; the call was not sent", cc.Target(), err)
			}
			return NotSent("executor service %s not reachable within %v; the call was not sent", cc.Target(), connectWait)
		}
		err := invoker(ctx, method, req, reply, cc, append(opts, grpc.WaitForReady(true))...)
		if ns := received(err); ns != nil {
			// The executor service says it ran nothing (it had no table,
			// or its pods did not accept the call).
			return ns
		}
		return Broken(ctx, err, "executor service "+cc.Target())
	}
}

// Broken explains an answer to a call that was sent: an Unavailable one, or
// a Canceled one the caller did not cancel (its connection was closed under
// it), says the call was not repeated; where names the other end. A
// not-sent mark in the answer is dropped: the call was sent, and the other
// end (a function pod runs any image) is not trusted to say otherwise.
// Other errors are returned as they are.
func Broken(ctx context.Context, err error, where string) error {
	err = unmark(err)
	if c := status.Code(err); c != codes.Unavailable && c != codes.Canceled || ctx.Err() != nil {
		return err
	}
	return status.Errorf(codes.Unavailable, "%s: %s (the call had been sent, so it was not repeated: the function may have run)",
		where, status.Convert(err).Message())
}

// WaitReady waits until cc is connected, for at most max.
func WaitReady(ctx context.Context, cc *grpc.ClientConn, max time.Duration) error {
	return waitReady(ctx, cc, max, false)
}

// errConnectFailed: a connection attempt failed, and the caller asked not
// to wait for the next (FailFast).
var errConnectFailed = errors.New("connection attempt failed")

// failFastKey marks a context whose calls do not wait out connect retries.
type failFastKey struct{}

// FailFast returns a context whose EvaluateFunction calls, through
// Interceptor, fail as not sent as soon as a connection attempt fails
// instead of waiting for the executor up to the connect wait: for a caller
// that has somewhere else to send the call (another pod-manager replica).
func FailFast(ctx context.Context) context.Context {
	return context.WithValue(ctx, failFastKey{}, true)
}

func failingFast(ctx context.Context) bool { v, _ := ctx.Value(failFastKey{}).(bool); return v }

func waitReady(ctx context.Context, cc *grpc.ClientConn, max time.Duration, failFast bool) error {
	ctx, cancel := context.WithTimeout(ctx, max)
	defer cancel()
	for {
		s := cc.GetState()
		switch s {
		case connectivity.Ready:
			return nil
		case connectivity.Shutdown:
			return errors.New("connection closed")
		case connectivity.Idle:
			cc.Connect()
		case connectivity.TransientFailure:
			if failFast {
				return errConnectFailed
			}
		}
		if !cc.WaitForStateChange(ctx, s) {
			return ctx.Err()
		}
	}
}
