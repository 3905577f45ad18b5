package fnresult

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/fnrunner/fnrunner/libs/evalwire"
)

const rl = "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n"

// input is the ResourceList the runs in these tests were given.
func input() mem.BufferSlice { return evalwire.Bytes([]byte(rl)) }

// exited is the outcome of a function that wrote out and log and exited
// with code.
func exited(out, log string, code int) (*Result, error) {
	res := &Result{ResourceList: evalwire.Bytes([]byte(out)), Log: []byte(log), ExitCode: code}
	return res, &ExitError{Result: res}
}

func TestSuccessPassesOutputThrough(t *testing.T) {
	out := evalwire.Bytes([]byte(rl))
	resp, err := Respond("fn", input(), &Result{ResourceList: out, Log: []byte("log")}, nil)
	require.NoError(t, err)
	assert.Equal(t, rl, string(resp.ResourceList.Materialize()))
	assert.Equal(t, "log", string(resp.Log))
	// The output's own buffers, not a copy.
	require.Len(t, resp.ResourceList, 1)
	assert.Same(t, &out[0].ReadOnlyData()[0], &resp.ResourceList[0].ReadOnlyData()[0])
}

func TestInvalidOutputIsInternal(t *testing.T) {
	_, err := Respond("fn", input(), &Result{ResourceList: evalwire.Bytes([]byte("not a resource list\n")), Log: []byte("said something")}, nil)
	st := status.Convert(err)
	assert.Equal(t, codes.Internal, st.Code())
	assert.Contains(t, st.Message(), "invalid output")
	assert.Contains(t, st.Message(), "said something")
	d, ok := FailureDetails(err)
	require.True(t, ok)
	assert.Equal(t, "said something", string(d.GetLog()))
	assert.Empty(t, d.GetResourceList())
}

func TestFailureKeepsResults(t *testing.T) {
	out := rl + "results:\n- message: namespace is required\n  severity: error\n"
	res, ferr := exited(out, "failed to evaluate function\n", 1)
	_, err := Respond("set-namespace:v0.4.5", input(), res, ferr)
	st := status.Convert(err)
	assert.Equal(t, codes.Internal, st.Code())
	assert.Contains(t, st.Message(), "function exited with code 1")
	assert.Contains(t, st.Message(), "namespace is required")
	d, ok := FailureDetails(err)
	require.True(t, ok)
	assert.Contains(t, string(d.GetResourceList()), "namespace is required")
	assert.Contains(t, string(d.GetLog()), "failed to evaluate")
}

func TestCrashWithoutOutputReportsStderr(t *testing.T) {
	res := &Result{Log: []byte("boom\n"), ExitCode: -1}
	_, err := Respond("fn", input(), res, &ExitError{Result: res, Signal: syscall.SIGSEGV})
	st := status.Convert(err)
	assert.Equal(t, codes.Internal, st.Code())
	assert.Contains(t, st.Message(), "killed by signal")
	assert.Contains(t, st.Message(), "boom")
}

func TestExitErrorWithoutResultArgument(t *testing.T) {
	// A runtime that returns only the error: its Result is the error's.
	_, ferr := exited("", "only in the error\n", 3)
	_, err := Respond("fn", input(), nil, fmt.Errorf("wrapped: %w", ferr))
	st := status.Convert(err)
	assert.Equal(t, codes.Internal, st.Code())
	assert.Contains(t, st.Message(), "only in the error")
}

func TestLongLogIsCutInTheMessage(t *testing.T) {
	log := "start" + strings.Repeat("x", 2*maxMessageLog) + "end"
	res, ferr := exited("", log, 1)
	_, err := Respond("fn", input(), res, ferr)
	msg := status.Convert(err).Message()
	assert.Contains(t, msg, "…")
	assert.True(t, strings.HasSuffix(msg, "end"))
	assert.NotContains(t, msg, "start")
	d, ok := FailureDetails(err)
	require.True(t, ok)
	assert.Equal(t, log, string(d.GetLog()), "the details keep the whole log")
}

func TestFailureOnInvalidInputIsTheCallers(t *testing.T) {
	const bad = "{{{ this: is [not yaml"
	res, ferr := exited("", "failed to parse input\n", 1)
	_, err := Respond("fn", evalwire.Bytes([]byte(bad)), res, ferr)
	st := status.Convert(err)
	assert.Equal(t, codes.InvalidArgument, st.Code())
	assert.Contains(t, st.Message(), "failed to parse input", "the message also tells what the function said")
}

func TestErrorCodes(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{"deadline", fmt.Errorf("function did not finish: %w", context.DeadlineExceeded), codes.DeadlineExceeded},
		{"cancelled", fmt.Errorf("waiting for a run slot: %w", context.Canceled), codes.Canceled},
		{"output too large", fmt.Errorf("%w (%d bytes)", ErrOutputTooLarge, 10), codes.ResourceExhausted},
		{"cannot start", fmt.Errorf("%w /fn: %w", ErrStart, errors.New("no such file")), codes.FailedPrecondition},
		{"other", errors.New("waiting for function: broken pipe"), codes.Internal},
		// Decided by errors.Is, never by the text.
		{"deadline text only", errors.New("context deadline exceeded"), codes.Internal},
		{"cancel text only", errors.New("context canceled"), codes.Internal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := Respond("fn", input(), nil, tc.err)
			assert.Nil(t, resp)
			assert.Equal(t, tc.want, status.Code(err), "%v", err)
			assert.Contains(t, status.Convert(err).Message(), `function "fn"`)
		})
	}
}

func TestOutputTooLargeKeepsNoDetails(t *testing.T) {
	res := &Result{ResourceList: evalwire.Bytes([]byte(rl))}
	_, err := Respond("fn", input(), res, fmt.Errorf("%w (1 bytes)", ErrOutputTooLarge))
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	_, ok := FailureDetails(err)
	assert.False(t, ok)
}

func TestFailureDetailsOfOtherErrors(t *testing.T) {
	_, ok := FailureDetails(errors.New("plain"))
	assert.False(t, ok)
	_, ok = FailureDetails(status.Error(codes.Internal, "no details"))
	assert.False(t, ok)
}

func TestExitErrorMessage(t *testing.T) {
	res := &Result{ExitCode: 2}
	assert.Equal(t, "function exited with code 2", (&ExitError{Result: res}).Error())
	assert.Equal(t, "function killed by signal killed", (&ExitError{Result: res, Signal: syscall.SIGKILL}).Error())
}

// What a function writes goes into the status message: as gRPC sends a
// status (google.rpc.Status, whose message must be UTF-8, marshalled with
// the details), it must survive, cut at a character and bounded.
func TestMessageFromFunctionTextSurvivesTheWire(t *testing.T) {
	for _, tc := range []struct {
		name     string
		out, log string
		// replaced: the message may hold U+FFFD for bytes that were
		// not UTF-8; a cut never makes one.
		replaced bool
	}{
		// 6,000 bytes of three-byte characters: the last 4,096 bytes
		// start inside one.
		{name: "a long log cut inside a character", log: strings.Repeat("€", 2000)},
		{name: "a log that is not UTF-8", log: "latin-1 \xe9t\xe9\n", replaced: true},
		{name: "an error result of a megabyte", out: rl + "results:\n- message: " + strings.Repeat("m", 1<<20) + "\n  severity: error\n", log: "failed\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, ferr := exited(tc.out, tc.log, 1)
			_, err := Respond("fn", input(), res, ferr)
			st := status.Convert(err)
			assert.Equal(t, codes.Internal, st.Code())
			assert.True(t, utf8.ValidString(st.Message()), "message not UTF-8: %q", st.Message())
			if !tc.replaced {
				assert.NotContains(t, st.Message(), "\uFFFD", "cut inside a character")
			}
			assert.LessOrEqual(t, len(st.Message()), maxMessage+len("…"))
			_, merr := proto.Marshal(st.Proto())
			require.NoError(t, merr, "the status would go without its details")
			d, ok := FailureDetails(err)
			require.True(t, ok)
			assert.Equal(t, tc.log, string(d.GetLog()), "the details keep the log as it was")
		})
	}
}
