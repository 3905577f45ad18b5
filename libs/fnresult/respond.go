package fnresult

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/evalwire"
	"github.com/fnrunner/fnrunner/libs/resourcelist"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
)

// maxMessageLog bounds how much stderr goes into a status message.
const maxMessageLog = 4096

// maxMessage bounds a whole status message made with a function's text (a
// long error result's message, say): gRPC sends it percent-encoded in a
// header (up to three times as long) beside the details, which carry the
// whole output and log, under the client's limit on a header list.
const maxMessage = 8192

// maxExplained bounds the ResourceLists that are read in full (a YAML tree,
// about ten times their size) to explain a failed run: larger ones are only
// sniffed, so that a failure costs no more memory than a success. It is
// above the default message limit, so that by default every failure is
// explained in full.
const maxExplained = 8 << 20

// Respond turns the outcome of running function image on input into the
// answer of EvaluateFunction: the response on success, else a gRPC status
// error. The input is not read before the run (a 64 MiB ResourceList would
// cost a YAML tree ten times its size); the function is its first judge, and
// when it fails Respond says whether the input was to blame.
//
// err is what the runtime returned (res may be nil when err is not an
// *ExitError or ErrOutputTooLarge). Errors are told apart with errors.Is and
// errors.As, never by their text; this is the one place where a context's
// error becomes a gRPC code:
//
//   - the caller's deadline or cancellation (context.DeadlineExceeded /
//     context.Canceled, wrapped): DeadlineExceeded / Canceled
//   - output over the limit (ErrOutputTooLarge) or memory over the call's
//     bound (ErrMemoryExceeded): ResourceExhausted
//   - the function cannot be started (ErrStart): FailedPrecondition
//   - non-zero exit (*ExitError) on input that is not a ResourceList:
//     InvalidArgument
//   - non-zero exit: Internal, with the error results (or the end of stderr)
//     in the message and the function's ResourceList and log kept in the
//     status details as an EvaluateFunctionResponse (porch drops them)
//   - exit 0 with output that is not a ResourceList: Internal
//   - any other error: Internal
func Respond(image string, input mem.BufferSlice, res *Result, err error) (*evalwire.Response, error) {
	if err == nil {
		if serr := sniff(res.ResourceList); serr != nil {
			// Not a ResourceList: only the log goes into the details.
			return nil, withDetails(status.New(codes.Internal, fmt.Sprintf("function %q wrote invalid output: %v%s", image, serr, logTail(res.Log))), res.Log, nil)
		}
		return &evalwire.Response{ResourceList: res.ResourceList, Log: res.Log}, nil
	}
	var xe *ExitError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return nil, status.Errorf(codes.DeadlineExceeded, "function %q did not finish before the deadline and was killed", image)
	case errors.Is(err, context.Canceled):
		return nil, status.Errorf(codes.Canceled, "function %q cancelled by the caller", image)
	case errors.Is(err, ErrOutputTooLarge), errors.Is(err, ErrMemoryExceeded):
		return nil, status.Errorf(codes.ResourceExhausted, "function %q: %v", image, err)
	case errors.Is(err, ErrStart):
		return nil, status.Errorf(codes.FailedPrecondition, "function %q: %v", image, err)
	case errors.As(err, &xe):
		if res == nil {
			res = xe.Result
		}
		output, parsed := readOutput(res.ResourceList)
		if ierr := check(input); ierr != nil {
			return nil, withDetails(status.New(codes.InvalidArgument, fmt.Sprintf("%v (function %q failed on it: %v%s)", ierr, image, xe, logTail(res.Log))), res.Log, output)
		}
		msg := fmt.Sprintf("function %q failed: %v", image, xe)
		if summary := errorSummary(parsed); summary != "" {
			msg += ": " + summary
		} else {
			msg += logTail(res.Log)
		}
		return nil, withDetails(status.New(codes.Internal, msg), res.Log, output)
	default:
		return nil, status.Errorf(codes.Internal, "function %q: %v", image, err)
	}
}

// sniff is resourcelist.Sniff over buffers.
func sniff(s mem.BufferSlice) error { return resourcelist.SniffFrom(evalwire.NewReader(s)) }

// check reads a ResourceList in full if it is small enough (maxExplained),
// else sniffs it.
func check(s mem.BufferSlice) error {
	if s.Len() > maxExplained {
		return sniff(s)
	}
	_, err := resourcelist.Parse(s.Materialize())
	return err
}

// readOutput reads a failed function's output once, in full, to explain
// the failure: its bytes and parsed form, or nils when it is larger than
// maxExplained or not a ResourceList.
func readOutput(out mem.BufferSlice) ([]byte, *resourcelist.ResourceList) {
	if out.Len() > maxExplained {
		return nil, nil
	}
	data := out.Materialize()
	rl, err := resourcelist.Parse(data)
	if err != nil {
		return nil, nil
	}
	return data, rl
}

// errorSummary is the error results of parsed output ("" without output).
func errorSummary(rl *resourcelist.ResourceList) string {
	if rl == nil {
		return ""
	}
	return resourcelist.ErrorSummary(rl.Results)
}

// FailureDetails returns the function's output carried in a status error
// from Respond, if any.
func FailureDetails(err error) (*pb.EvaluateFunctionResponse, bool) {
	st, ok := status.FromError(err)
	if !ok {
		return nil, false
	}
	for _, d := range st.Details() {
		if r, ok := d.(*pb.EvaluateFunctionResponse); ok {
			return r, true
		}
	}
	return nil, false
}

// withDetails carries the function's log, and its output when that is a
// ResourceList (readOutput), in st's details.
func withDetails(st *status.Status, log, output []byte) error {
	st = status.New(st.Code(), message(st.Message()))
	d := &pb.EvaluateFunctionResponse{Log: log, ResourceList: output}
	if wd, err := st.WithDetails(d); err == nil {
		return wd.Err()
	}
	return st.Err()
}

func logTail(log []byte) string {
	s := strings.TrimSpace(string(log))
	if s == "" {
		return ""
	}
	if len(s) > maxMessageLog {
		cut := len(s) - maxMessageLog
		for cut < len(s) && !utf8.RuneStart(s[cut]) {
			cut++ // not inside a character
		}
		s = "…" + s[cut:]
	}
	return ": " + s
}

// message is a status message made with a function's text as gRPC can send
// it with its details: UTF-8 (google.rpc.Status's message is a string; one
// that is not fails to marshal, and grpc-go then sends the status without
// its details), at most maxMessage bytes, cut at a character.
func message(s string) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= maxMessage {
		return s
	}
	cut := maxMessage
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
