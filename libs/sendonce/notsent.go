package sendonce

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The ErrorInfo status details that mark an answer as "nothing ran", so
// that the mark survives every gRPC hop (pod-manager → gateway → porch).
const (
	// notSentReason: the executor did not take the call; another may.
	notSentReason = "CALL_NOT_SENT"
	// notRunReason: the executor took the call and failed before it ran
	// the function; another would fare no better.
	notRunReason  = "CALL_NOT_RUN"
	notSentDomain = "fnrunner.kpt.dev"
)

// NotSentError is an Unavailable answer to a call that ran nothing, so it
// may be repeated: a gRPC status that carries an ErrorInfo detail.
// Interceptor turns such a status from an executor service back into a
// *NotSentError, so callers decide with errors.As at every hop.
type NotSentError struct {
	status    *status.Status
	elsewhere bool
}

// NotSent says the executor did not take the call (unreachable, or not
// ready: no executor table yet): another executor may take it.
func NotSent(format string, args ...any) error { return notSent(notSentReason, format, args...) }

// NotRun says the executor took the call but failed before it ran the
// function (its registry is down, no pod came up): nothing ran, but the
// call stays with this executor (another would start pods of its own for
// the same failure).
func NotRun(format string, args ...any) error { return notSent(notRunReason, format, args...) }

func notSent(reason, format string, args ...any) error {
	st := status.New(codes.Unavailable, fmt.Sprintf(format, args...))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: reason, Domain: notSentDomain}); err == nil {
		st = d
	}
	return &NotSentError{status: st, elsewhere: reason == notSentReason}
}

// Elsewhere reports whether another executor may take the call (NotSent,
// not NotRun).
func (e *NotSentError) Elsewhere() bool { return e.elsewhere }

func (e *NotSentError) Error() string { return e.status.Err().Error() }

// GRPCStatus makes the error its own gRPC answer, detail included.
func (e *NotSentError) GRPCStatus() *status.Status { return e.status }

// unmark returns err without the not-sent mark, keeping its code, message
// and every other detail.
func unmark(err error) error {
	if received(err) == nil {
		return err
	}
	p := status.Convert(err).Proto() // a copy
	kept := p.Details[:0]
	for _, d := range p.Details {
		var info errdetails.ErrorInfo
		if d.UnmarshalTo(&info) == nil && isMark(&info) {
			continue
		}
		kept = append(kept, d)
	}
	p.Details = kept
	return status.FromProto(p).Err()
}

func isMark(info *errdetails.ErrorInfo) bool {
	return info.GetDomain() == notSentDomain && (info.GetReason() == notSentReason || info.GetReason() == notRunReason)
}

// received gives back the *NotSentError an executor service answered with,
// or nil when err is no such answer.
func received(err error) *NotSentError {
	var ns *NotSentError
	if errors.As(err, &ns) {
		return ns
	}
	st, ok := status.FromError(err)
	if !ok {
		return nil
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && isMark(info) {
			return &NotSentError{status: st, elsewhere: info.GetReason() == notSentReason}
		}
	}
	return nil
}

var _ interface{ GRPCStatus() *status.Status } = (*NotSentError)(nil)
