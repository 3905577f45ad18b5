package sendonce

import (
	"errors"
	"fmt"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The ErrorInfo status detail that marks a call as not sent, so that the
// mark survives every gRPC hop (pod-manager → gateway → porch).
const (
	notSentReason = "CALL_NOT_SENT"
	notSentDomain = "fnrunner.kpt.dev"
)

// NotSentError is the answer to a call that never reached a function:
// nothing ran, so the call may wait or go to another executor. It is a
// gRPC status (Unavailable unless said otherwise) that carries an ErrorInfo
// detail; Interceptor turns such a status from an executor service back
// into a *NotSentError, so callers decide with errors.As at every hop.
type NotSentError struct {
	status *status.Status
}

// NotSent returns a *NotSentError with code (OK is no failure: it becomes
// Unavailable) and message.
func NotSent(code codes.Code, format string, args ...any) error {
	if code == codes.OK {
		code = codes.Unavailable
	}
	st := status.New(code, fmt.Sprintf(format, args...))
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: notSentReason, Domain: notSentDomain}); err == nil {
		st = d
	}
	return &NotSentError{status: st}
}

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
	return info.GetReason() == notSentReason && info.GetDomain() == notSentDomain
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
			return &NotSentError{status: st}
		}
	}
	return nil
}

var _ interface{ GRPCStatus() *status.Status } = (*NotSentError)(nil)
