package hostile_test

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/h2raw"
	"github.com/fnrunner/fnrunner/tests/harness"
)

// The gateway's budgets scaled down, and the memory cgroup it runs in: the
// same proportions as deploy/'s 1 GiB in flight, 128 MiB queued, in 1,408
// MiB.
const (
	scaledInFlight = 64 << 20
	scaledQueue    = 32 << 20
	gatewayLimit   = 320 << 20
	evaluate       = "/evaluator.FunctionEvaluator/EvaluateFunction"
)

// memoryCgroup is a cgroup v1 memory cgroup a service starts in (through
// the wrapper Exec writes), so that its peak counts all it holds.
type memoryCgroup struct{ dir string }

func newMemoryCgroup(t testing.TB, limit int64) memoryCgroup {
	t.Helper()
	harness.NeedRoot(t, "the gateway under a memory cgroup")
	harness.NeedCgroupV1(t, "the gateway under a cgroup v1 memory cgroup")
	dir, err := os.MkdirTemp("/sys/fs/cgroup/memory", "fnrunner-hostile-")
	require.NoError(t, err)
	t.Cleanup(func() {
		// Anything left is moved to the parent before the cgroup goes.
		if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(procs)) {
				_ = os.WriteFile("/sys/fs/cgroup/memory/cgroup.procs", []byte(pid), 0o644)
			}
		}
		_ = os.Remove(dir)
	})
	c := memoryCgroup{dir: dir}
	c.write(t, "memory.limit_in_bytes", strconv.FormatInt(limit, 10))
	return c
}

// Exec writes a script that joins the cgroup and then runs bin, and
// returns its path.
func (c memoryCgroup) Exec(t testing.TB, bin string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), filepath.Base(bin))
	script := fmt.Sprintf("#!/bin/sh\necho $$ > %s/cgroup.procs || exit 1\nexec %s \"$@\"\n", c.dir, bin)
	require.NoError(t, os.WriteFile(p, []byte(script), 0o755))
	return p
}

func (c memoryCgroup) write(t testing.TB, file, value string) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(c.dir, file), []byte(value), 0o644), file)
}

func (c memoryCgroup) read(t testing.TB, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, file))
	require.NoError(t, err, file)
	return strings.TrimSpace(string(b))
}

// peak is the cgroup's peak charge since the last reset, and resets it.
func (c memoryCgroup) peak(t testing.TB) int64 {
	t.Helper()
	n, err := strconv.ParseInt(c.read(t, "memory.max_usage_in_bytes"), 10, 64)
	require.NoError(t, err)
	c.write(t, "memory.max_usage_in_bytes", "0")
	return n
}

// oomKills is how many of the cgroup's processes the kernel killed.
func (c memoryCgroup) oomKills(t testing.TB) string {
	t.Helper()
	for _, line := range strings.Split(c.read(t, "memory.oom_control"), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			return v
		}
	}
	return "0"
}

// evaluateRequest is an EvaluateFunctionRequest as a gRPC message frame.
func evaluateRequest(t testing.TB, image string, rl []byte) []byte {
	t.Helper()
	b, err := proto.Marshal(&pb.EvaluateFunctionRequest{Image: image, ResourceList: rl})
	require.NoError(t, err)
	return h2raw.Frame(b)
}

// porchBeside calls the gateway as porch would, one small call after
// another, until the returned stop is called; stop reports the calls made
// and those that failed.
func porchBeside(t testing.TB, w *world) (stop func() (calls, failed int64)) {
	var n, bad atomic.Int64
	var last atomic.Value
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			_, err := w.call("set-namespace:v0.4.5", input(map[string]string{"namespace": "porch"}), 30*time.Second)
			n.Add(1)
			if err != nil {
				bad.Add(1)
				last.Store(err.Error())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() (int64, int64) {
		close(done)
		wg.Wait()
		if v := last.Load(); v != nil {
			t.Logf("porch's last failed call: %s", v)
		}
		return n.Load(), bad.Load()
	}
}

// Attacks below gRPC on the porch-facing gateway, run as deploy/ runs it
// but with its budgets scaled into a 320 MiB memory cgroup: each passes
// when the gateway was never killed, kept SERVING, stayed inside its
// cgroup, and answered a porch client calling beside the attack, and
// ordinary calls after it.
func TestTransportAttacksOnTheGateway(t *testing.T) {
	w, cg := startGatewayInCgroup(t)
	for _, a := range transportAttacks(w) {
		t.Run(a.name, func(t *testing.T) {
			stop := porchBeside(t, w)
			a.run(t)
			held(t, w, cg, "gateway", gatewayLimit, stop)
		})
	}
}

// held ends porch's calls beside an attack (stop) and checks that service,
// in cg, held: never OOM-killed, under its cgroup's limit, every one of
// porch's calls answered, and it still serves, ordinary calls included.
func held(t testing.TB, w *world, cg memoryCgroup, service string, limit int64, stop func() (calls, failed int64)) {
	t.Helper()
	calls, failed := stop()
	peak := cg.peak(t)
	t.Logf("%s peak %d MiB of %d MiB; porch beside: %d calls, %d failed", service, peak>>20, limit>>20, calls, failed)
	assert.Zero(t, failed, "porch's calls beside the attack")
	assert.NotZero(t, calls)
	assert.Equal(t, "0", cg.oomKills(t), "the %s was OOM-killed", service)
	assert.Less(t, peak, limit, "the %s reached its cgroup's limit", service)
	w.serving(t)
	w.ordinary(t, 2)
}

// startGatewayInCgroup starts the stack with the gateway in a memory
// cgroup of gatewayLimit, its budgets scaled into it.
func startGatewayInCgroup(t testing.TB) (*world, memoryCgroup) {
	cg := newMemoryCgroup(t, gatewayLimit)
	w := startStack(t, cg.Exec(t, harness.Binary(t, "FNRUNNER_GATEWAY")), []string{
		fmt.Sprintf("--max-in-flight-bytes=%d", scaledInFlight),
		fmt.Sprintf("--max-queue-bytes=%d", scaledQueue),
		"--max-receive-duration=3s",
		"--max-send-duration=3s",
	}, "", "--sandbox=base,landlock,uid")
	require.Contains(t, strings.Fields(cg.read(t, "cgroup.procs")), strconv.Itoa(w.pids["gateway"]), "the gateway is not in its cgroup")
	t.Logf("gateway at rest: %d MiB", cg.peak(t)>>20)
	return w, cg
}

// transportAttack is an attack below gRPC on w's gateway: run returns when
// the gateway has dealt with it (ended its streams or closed its
// connections).
type transportAttack struct {
	name string
	run  func(t testing.TB)
}

// transportAttacks are the attacks on w's gateway.
func transportAttacks(w *world) []transportAttack {
	small := []byte(input(map[string]string{"namespace": "attacked"}))
	large := []byte(largeList(1 << 20))

	return []transportAttack{
		{"HPACK-amplified metadata on 128 streams", func(t testing.TB) {
			raw := h2raw.Dial(t, w.s.GatewayAddress, "127.0.0.2")
			field := hpack.HeaderField{Name: "x-pad-bin", Value: strings.Repeat("QUFB", 1000)}
			refs := make([]hpack.HeaderField, 3000) // ~12 MiB decoded a stream
			for i := range refs {
				refs[i] = field
			}
			var ids []uint32
			for range 128 {
				ids = append(ids, raw.Open(evaluate, refs...))
			}
			for _, id := range ids {
				if _, ok := raw.Wait(id, time.Minute); !ok {
					require.True(t, raw.Closed(), "stream %d neither ended nor its connection closed", id)
				}
			}
		}},
		{"unfinished requests on 1,024 streams over 4 connections", func(t testing.TB) {
			head := evaluateRequest(t, "set-namespace:v0.4.5", bytes.Repeat([]byte("a"), 6<<20-1024))[:60<<10]
			var conns []*h2raw.Conn
			var ids [][]uint32
			for range 4 {
				raw := h2raw.Dial(t, w.s.GatewayAddress, "127.0.0.3")
				var cids []uint32
				for range 256 {
					id := raw.Open(evaluate)
					raw.DataUnchecked(id, head, false) // the rest never comes
					cids = append(cids, id)
				}
				conns, ids = append(conns, raw), append(ids, cids)
			}
			for i, raw := range conns {
				for _, id := range ids[i] {
					if _, ok := raw.Wait(id, time.Minute); !ok {
						require.True(t, raw.Closed(), "stream %d neither ended nor its connection closed", id)
					}
				}
			}
		}},
		{"64 large answers behind a shut receive window", func(t testing.TB) {
			raw := h2raw.Dial(t, w.s.GatewayAddress, "127.0.0.4", http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
			req := evaluateRequest(t, "set-namespace:v0.4.5", large)
			var wg sync.WaitGroup
			for range 64 {
				id := raw.Open(evaluate)
				wg.Add(1)
				go func() { defer wg.Done(); raw.Data(id, req, true) }()
			}
			wg.Wait()
			select {
			case <-raw.Done():
			case <-time.After(2 * time.Minute):
				t.Fatal("the connection that takes no answer was not closed")
			}
		}},
		{"20,000 streams reset as they open", func(t testing.TB) {
			raw := h2raw.Dial(t, w.s.GatewayAddress, "127.0.0.5")
			for range 20000 {
				if raw.Closed() {
					break
				}
				id := raw.Open(evaluate)
				raw.DataUnchecked(id, evaluateRequest(t, "set-namespace:v0.4.5", small)[:8], false)
				raw.Reset(id)
			}
		}},
		{"300 connections from one peer", func(t testing.TB) {
			var conns []*h2raw.Conn
			for range 300 {
				conns = append(conns, h2raw.Dial(t, w.s.GatewayAddress, "127.0.0.6"))
			}
			harness.WaitFor(t, "the connections past --max-connections-per-peer to be closed", func() bool {
				closed := 0
				for _, c := range conns {
					if c.Closed() {
						closed++
					}
				}
				return closed >= 300-64
			})
		}},
	}
}

// largeList is a ResourceList of about size bytes of ConfigMaps.
func largeList(size int) string {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: fc}\n  data: {namespace: big}\nitems:\n")
	value := strings.Repeat("x", 1000)
	for i := 0; b.Len() < size; i++ {
		fmt.Fprintf(&b, "- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cm-%d}\n  data: {v: %s}\n", i, value)
	}
	return b.String()
}
