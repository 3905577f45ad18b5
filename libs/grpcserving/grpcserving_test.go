package grpcserving_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
)

// syncBuffer is a bytes.Buffer the server's goroutines may write to.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Every JSON log line a service writes names each key once: log
// collectors keep one of two equal keys, and which one is not defined.
func TestLogLinesHaveNoDuplicateKeys(t *testing.T) {
	var logs syncBuffer
	var f grpcserving.Flags
	log := f.Logger(&logs, "test-service")
	srv := grpcserving.New(log, grpcserving.Config{Name: "test-service"})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	cancel()
	require.NoError(t, <-done)

	lines := 0
	sc := bufio.NewScanner(bytes.NewReader([]byte(logs.String())))
	for sc.Scan() {
		lines++
		assert.Empty(t, duplicateKeys(t, sc.Bytes()), "line %s", sc.Text())
	}
	assert.Positive(t, lines, "the server logged nothing")
	assert.Contains(t, logs.String(), `"service":"test-service"`)
}

// duplicateKeys lists the top-level keys that appear more than once in a
// JSON object.
func duplicateKeys(t *testing.T, line []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	tok, err := dec.Token()
	require.NoError(t, err)
	require.Equal(t, json.Delim('{'), tok)
	seen := map[string]bool{}
	var dups []string
	for dec.More() {
		tok, err := dec.Token()
		require.NoError(t, err)
		key := tok.(string)
		if seen[key] {
			dups = append(dups, key)
		}
		seen[key] = true
		var skip json.RawMessage
		require.NoError(t, dec.Decode(&skip))
	}
	return dups
}

// --log-level takes slog's names and porch's numbers.
func TestLogLevelTakesPorchNumbers(t *testing.T) {
	for _, tc := range []struct {
		arg  string
		want slog.Level
	}{
		{"0", slog.LevelError}, {"1", slog.LevelWarn}, {"2", slog.LevelInfo}, {"3", slog.LevelDebug}, {"5", slog.LevelDebug},
		{"DEBUG", slog.LevelDebug}, {"warn", slog.LevelWarn},
	} {
		var f grpcserving.Flags
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		f.Register(fs, "")
		require.NoError(t, f.Parse(fs, []string{"--log-level=" + tc.arg}), tc.arg)
		assert.Equal(t, tc.want, f.LogLevel, tc.arg)
	}
	var f grpcserving.Flags
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.Register(fs, "")
	assert.Error(t, f.Parse(fs, []string{"--log-level=6"}))
}
