package grpcserving_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/grpcserving"
)

// Every JSON log line a service writes names each key once: log
// collectors keep one of two equal keys, and which one is not defined.
func TestLogLinesHaveNoDuplicateKeys(t *testing.T) {
	// slog's handler writes one line at a time, and the buffer is read
	// once Serve has returned.
	var logs bytes.Buffer
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
	sc := bufio.NewScanner(bytes.NewReader(logs.Bytes()))
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

// /metrics answers when an extra gatherer (controller-runtime's registry)
// carries the Go runtime and process collectors the service's own registry
// has: one copy of each family, not an HTTP 500.
func TestMetricsWithOverlappingGatherers(t *testing.T) {
	other := prometheus.NewRegistry()
	other.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	probe := prometheus.NewCounter(prometheus.CounterOpts{Name: "from_the_other_registry_total", Help: "A family only the other registry has."})
	other.MustRegister(probe)
	addr, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	metricsAddr := addr.Addr().String()
	require.NoError(t, addr.Close())

	var f grpcserving.Flags
	srv := grpcserving.New(f.Logger(io.Discard, "test"), grpcserving.Config{Name: "test", MetricsAddress: metricsAddr, Gatherers: []prometheus.Gatherer{other}})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	// The metrics listener opens inside Serve: a few tries.
	var body string
	var scrapeErr error
	for range 250 {
		if body, scrapeErr = scrape("http://" + metricsAddr + "/metrics"); scrapeErr == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, scrapeErr)
	assert.Equal(t, 1, strings.Count(body, "# TYPE go_goroutines "), "one go_goroutines family")
	assert.Contains(t, body, "from_the_other_registry_total 0")
}

// scrape is the body of a successful GET of url.
func scrape(url string) (string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("HTTP %d: %.300s", resp.StatusCode, b)
	}
	return string(b), nil
}
