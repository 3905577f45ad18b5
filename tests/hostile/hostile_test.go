// Package hostile_test sends what an attacker would through the gateway of
// a real stack whose binary-runner sandboxes every function binary with all
// its layers (--sandbox=base,landlock,uid): hostile function binaries,
// hostile starlark scripts and hostile ResourceLists. Each case has its
// expected status code and message and is followed by ordinary calls that
// must succeed, with every service still serving and never restarted; the
// resource-exhaustion cases also run while ordinary calls go on.
package hostile_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/stack"
	"github.com/fnrunner/fnrunner/tests/testcerts"
	"github.com/fnrunner/fnrunner/tools/procstat"
)

// The hostile function binaries: bash scripts. A probe prints the input back
// when the attack was stopped and fails saying LEAKED when it was not.
var functions = map[string]string{
	"fork-bomb":   `bomb() { bomb | bomb & }; bomb; sleep 60`,
	"memory-bomb": `dd if=/dev/zero of=/dev/null bs=8G count=1`,
	"fill-temp":   `set -e; head -c 67108864 /dev/zero > "$TMPDIR/fill"; cat`,
	"cpu-spin":    `while :; do :; done`,
	"escapee":     `setsid sleep 300 </dev/null >/dev/null 2>&1 & echo "escapee $!" >&2; cat`,
	"orphan":      `(sleep 300 </dev/null >/dev/null 2>&1 &); cat`,
	"slow-cat":    `sleep 3; cat`,
	"cat":         `exec cat`,
	"environ": `input=$(cat)
for f in /proc/[0-9]*/environ; do
  if tr '\0' '\n' < "$f" 2>/dev/null | grep -q =; then echo "LEAKED $f" >&2; exit 1; fi
done
printf '%s\n' "$input"`,
	"stdin-of-others": `input=$(cat)
for f in /proc/[0-9]*/fd/0; do
  if timeout 1 head -c 1 "$f" 2>/dev/null | grep -q .; then echo "LEAKED $f" >&2; exit 1; fi
done
printf '%s\n' "$input"`,
	// Reads the file named on its first line of functionConfig data.
	"read-file": `input=$(cat)
f=$(printf '%s\n' "$input" | sed -n 's/^    path: //p')
if cat "$f" >/dev/null 2>&1; then echo "LEAKED $f" >&2; exit 1; fi
printf '%s\n' "$input"`,
	// Connects to host:port from functionConfig: the sandbox must deny it
	// (Permission denied), not the network happen to fail.
	"connect": `input=$(cat)
hp=$(printf '%s\n' "$input" | sed -n 's/^    target: //p')
err=$(timeout 5 bash -c "echo > /dev/tcp/${hp%:*}/${hp#*:}" 2>&1)
case "$err" in *"Permission denied"*) printf '%s\n' "$input" ;; *) echo "LEAKED connect $hp: $err" >&2; exit 1 ;; esac`,
}

func config(name string) string {
	return fmt.Sprintf(`apiVersion: config.porch.kpt.dev/v1alpha1
kind: FunctionConfig
metadata:
  name: %[1]s
spec:
  image: %[1]s
  prefixes: [example.com/hostile]
  binaryExecutor:
    tags: [v1]
    path: %[1]s
---
`, name)
}

func input(data map[string]string) string {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: ordinary\n")
	if len(data) > 0 {
		b.WriteString("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: fc\n  data:\n")
		for k, v := range data {
			fmt.Fprintf(&b, "    %s: %s\n", k, v)
		}
	}
	return b.String()
}

func starlark(script string) string {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\nfunctionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: StarlarkRun\n  metadata:\n    name: hostile\n  source: |\n")
	for _, line := range strings.Split(script, "\n") {
		b.WriteString("    " + line + "\n")
	}
	return b.String()
}

// world is the stack every case runs against.
type world struct {
	s      *stack.Stack
	client pb.FunctionEvaluatorClient
	pids   map[string]int
	tlsKey string
	// reportToken is the binary-runner's --report-token-file.
	reportToken string
	listener    net.Listener
	accepted    chan struct{}
	// allowedURL is a server starlark scripts may reach.
	allowedURL string
}

func start(t testing.TB) *world { return startWith(t, "", "--sandbox=base,landlock,uid") }

// startWith starts the stack with runner as the binary-runner ("" for the
// real one) and args (its --sandbox flag first) added to its flags.
func startWith(t testing.TB, runner string, args ...string) *world {
	return startStack(t, "", nil, runner, args...)
}

// startStack is startWith with gateway run instead of the gateway ("" for
// the real one) and gatewayArgs added to its flags.
func startStack(t testing.TB, gateway string, gatewayArgs []string, runner string, args ...string) *world {
	// Function binaries and the calls' temp dirs where every call's uid
	// reaches them (Bazel's temp dir is below root's private home).
	root, err := os.MkdirTemp("/tmp", "hostile-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(root, 0o711))
	t.Cleanup(func() { os.RemoveAll(root) })
	fnDir, tempDir := filepath.Join(root, "functions"), filepath.Join(root, "calls")
	// The runner's report token, world-readable as the kubelet projects
	// one (0644), where every call's uid could reach it: only the
	// sandbox's file rules keep functions from it.
	token := filepath.Join(root, "report-token")
	require.NoError(t, os.WriteFile(token, []byte("a service account token"), 0o644))
	require.NoError(t, os.Mkdir(fnDir, 0o755))
	require.NoError(t, os.Mkdir(tempDir, 0o711))
	var configs strings.Builder
	extra := map[string]string{}
	for name, script := range functions {
		p := filepath.Join(fnDir, name)
		require.NoError(t, os.WriteFile(p, []byte("#!/bin/bash\n"+script+"\n"), 0o755))
		extra[name] = p
		configs.WriteString(config(name))
	}
	configs.WriteString(config("reserve")) // tests/testfns/reserve
	// The catalog's starlark v0.3.0, built from its module.
	extra["starlark-v0.3.0"] = harness.Binary(t, "FNRUNNER_UPSTREAM_STARLARK")
	configs.WriteString(config("starlark-v0.3.0"))
	// A host starlark scripts may reach (--starlark-allowed-hosts): any
	// other is denied.
	allowed := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(rw, "hello from the allowed host")
	}))
	t.Cleanup(allowed.Close)
	certs := testcerts.Generate(t, t.TempDir(), "fnrunner")
	s := stack.Start(t, stack.Options{
		Configs:      map[string]string{"hostile.yaml": configs.String()},
		Functions:    extra,
		InternalArgs: certs.Args(),
		Gateway:      gateway,
		GatewayArgs:  gatewayArgs,
		BinaryRunner: runner,
		BinaryRunnerArgs: append([]string{
			"--temp-dir=" + tempDir, "--sandbox-first-uid=3200000",
			"--sandbox-max-processes=64", "--sandbox-max-file-size=8388608",
			"--starlark-allowed-hosts=" + allowed.Listener.Addr().String(),
			"--report-token-file=" + token,
		}, args...),
	})
	w := &world{s: s, client: s.Client(), pids: map[string]int{}, tlsKey: certs.Key, reportToken: token, accepted: make(chan struct{}, 100), allowedURL: allowed.URL}
	for _, name := range []string{"gateway", "binary-runner", "config-reconciler"} {
		w.pids[name], err = s.Pid(name)
		require.NoError(t, err)
	}
	w.listener, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { w.listener.Close() })
	go func() {
		for {
			c, err := w.listener.Accept()
			if err != nil {
				return
			}
			w.accepted <- struct{}{}
			c.Close()
		}
	}()
	return w
}

func (w *world) call(image, rl string, deadline time.Duration) (*pb.EvaluateFunctionResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	return w.client.EvaluateFunction(ctx, &pb.EvaluateFunctionRequest{Image: image, ResourceList: []byte(rl)})
}

// ordinary calls, through the go and the binary executor, must succeed.
func (w *world) ordinary(t testing.TB, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		for _, image := range []string{"set-namespace:v0.4.5", "starlark:v0.5.5"} {
			rl := input(map[string]string{"namespace": "ordinary"})
			if strings.HasPrefix(image, "starlark") {
				rl = starlark("print('hello')")
			}
			_, err := w.call(image, rl, 30*time.Second)
			assert.NoError(t, err, "ordinary call %d to %s", i, image)
		}
	}
}

// serving checks that the gateway still serves and no service was
// restarted (the internal ones speak mutual TLS; the ordinary calls after
// each case show that they serve).
func (w *world) serving(t testing.TB) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, w.s.WaitServing(ctx), "the gateway stopped serving")
	for name, pid := range w.pids {
		now, err := w.s.Pid(name)
		require.NoError(t, err)
		assert.Equal(t, pid, now, "%s was restarted", name)
		assert.NoError(t, syscall.Kill(pid, 0), "%s is gone", name)
	}
}

type hostileCase struct {
	name     string
	image    string
	input    string
	deadline time.Duration
	code     codes.Code
	// orCode, when set, is another code the case may end with.
	orCode  codes.Code
	message string // a regexp the status message matches
	// after checks more, given the response (nil unless OK).
	after func(t testing.TB, w *world, resp *pb.EvaluateFunctionResponse)
	// exhausting cases also run while ordinary calls go on.
	exhausting bool
}

// ends says whether a call of the case may end with code.
func (c hostileCase) ends(code codes.Code) bool {
	return code == c.code || c.orCode != codes.OK && code == c.orCode
}

func cases(w *world) []hostileCase {
	gateway := w.s.GatewayAddress
	return []hostileCase{
		// Its processes' memory together (each counts its copy-on-write
		// pages) or its deadline ends it, whichever comes first.
		{name: "fork bomb", image: "example.com/hostile/fork-bomb:v1", input: input(nil), deadline: 5 * time.Second,
			code: codes.DeadlineExceeded, orCode: codes.ResourceExhausted, exhausting: true,
			after: func(t testing.TB, w *world, _ *pb.EvaluateFunctionResponse) {
				assert.Eventually(t, func() bool { return len(processesOfUIDs(t, 3200000, 3200100)) == 0 }, 10*time.Second, 50*time.Millisecond,
					"processes of the fork bomb's call outlived it")
			}},
		// Its 8 GiB buffer is reserved whole; the call ends when it has
		// touched more than the call was charged.
		{name: "memory bomb", image: "example.com/hostile/memory-bomb:v1", input: input(nil), deadline: 30 * time.Second,
			code: codes.ResourceExhausted, message: `over the call's bound of \d+ MiB`, exhausting: true},
		// Reserving address space is not using memory: a runtime that
		// maps 4 GiB at start (starlark v0.3.0) runs.
		{name: "4 GiB reserved at start", image: "example.com/hostile/reserve:v1", input: input(nil), deadline: 30 * time.Second,
			code: codes.OK},
		// The catalog's own binary, built from its module, reserves 4 GiB
		// at start (go.starlark.net's small integers); porch runs it.
		{name: "upstream starlark v0.3.0", image: "example.com/hostile/starlark-v0.3.0:v1",
			input:    starlark("ctx.resource_list['items'].append({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'from-v0.3.0'}})"),
			deadline: 30 * time.Second, code: codes.OK,
			after: func(t testing.TB, _ *world, resp *pb.EvaluateFunctionResponse) {
				assert.Contains(t, string(resp.GetResourceList()), "name: from-v0.3.0")
			}},
		{name: "temp dir fill", image: "example.com/hostile/fill-temp:v1", input: input(nil), deadline: 30 * time.Second,
			code: codes.Internal, message: `exited with code|killed by signal`, exhausting: true},
		{name: "cpu spin", image: "example.com/hostile/cpu-spin:v1", input: input(nil), deadline: 2 * time.Second,
			code: codes.DeadlineExceeded, exhausting: true},
		{name: "setsid escapee", image: "example.com/hostile/escapee:v1", input: input(nil), deadline: 30 * time.Second,
			code: codes.OK,
			after: func(t testing.TB, w *world, resp *pb.EvaluateFunctionResponse) {
				m := regexp.MustCompile(`escapee (\d+)`).FindStringSubmatch(string(resp.GetLog()))
				require.Len(t, m, 2, "log: %s", resp.GetLog())
				pid, _ := strconv.Atoi(m[1])
				assert.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 10*time.Second, 20*time.Millisecond,
					"the setsid escapee %d outlived its call", pid)
			}},
		{name: "reads /proc/<pid>/environ", image: "example.com/hostile/environ:v1", input: input(nil), deadline: 30 * time.Second, code: codes.OK},
		{name: "reads the runner's TLS key", image: "example.com/hostile/read-file:v1", input: input(map[string]string{"path": w.tlsKey}),
			deadline: 30 * time.Second, code: codes.OK},
		{name: "reads the service account token", image: "example.com/hostile/read-file:v1",
			input: input(map[string]string{"path": w.reportToken}), deadline: 30 * time.Second, code: codes.OK},
		{name: "connects to the gateway", image: "example.com/hostile/connect:v1", input: input(map[string]string{"target": gateway}),
			deadline: 30 * time.Second, code: codes.OK},
		{name: "connects to an apiserver's port", image: "example.com/hostile/connect:v1", input: input(map[string]string{"target": "127.0.0.1:6443"}),
			deadline: 30 * time.Second, code: codes.OK},
		{name: "connects to the metadata endpoint", image: "example.com/hostile/connect:v1", input: input(map[string]string{"target": "169.254.169.254:80"}),
			deadline: 30 * time.Second, code: codes.OK},
		{name: "starlark recursion", image: "starlark:v0.5.5", input: starlark("def f(n):\n  return f(n + 1)\nf(0)"), deadline: time.Minute,
			code: codes.Internal, message: "call stack deeper than 10000"},
		{name: "starlark infinite loop", image: "starlark:v0.5.5", input: starlark("def spin():\n  for i in range(1 << 62):\n    pass\nspin()"),
			deadline: 2 * time.Second, code: codes.DeadlineExceeded, exhausting: true},
		{name: "starlark http to loopback", image: "starlark:v0.5.5",
			input:    starlark(fmt.Sprintf("load('http.star', 'http')\nhttp.get('http://%s/')", w.listener.Addr())),
			deadline: 30 * time.Second, code: codes.Internal, message: `host not allowed`,
			after: func(t testing.TB, w *world, _ *pb.EvaluateFunctionResponse) {
				assert.Empty(t, w.accepted, "starlark reached the loopback listener")
			}},
		{name: "starlark http to an allowed host", image: "starlark:v0.5.5",
			input:    starlark(fmt.Sprintf("load('http.star', 'http')\nctx.resource_list['items'].append({'apiVersion': 'v1', 'kind': 'ConfigMap', 'metadata': {'name': 'got'}, 'data': {'body': http.get('%s').body()}})", w.allowedURL)),
			deadline: 30 * time.Second, code: codes.OK,
			after: func(t testing.TB, _ *world, resp *pb.EvaluateFunctionResponse) {
				assert.Contains(t, string(resp.GetResourceList()), "hello from the allowed host")
			}},
		{name: "starlark 1 GiB string", image: "starlark:v0.5.5", input: starlark("s = 'x' * (1 << 30)\nt = s + s + s + s + s"), deadline: time.Minute,
			code: codes.Internal, message: `excessive repeat`, exhausting: true},
		{name: "starlark environment", image: "starlark:v0.5.5",
			input:    starlark("def run(items):\n  for k in ['FNRUNNER_TLS_KEY', 'KUBERNETES_SERVICE_HOST', 'HOSTNAME']:\n    if k in ctx.environment:\n      fail('LEAKED ' + k)\nrun(ctx.resource_list['items'])"),
			deadline: 30 * time.Second, code: codes.OK},
		// kyaml keeps aliases as they are: the bomb never expands.
		{name: "YAML alias bomb (go executor)", image: "set-namespace:v0.4.5", input: aliasBomb(), deadline: 30 * time.Second,
			code: codes.OK,
			after: func(t testing.TB, w *world, resp *pb.EvaluateFunctionResponse) {
				assert.Less(t, len(resp.GetResourceList()), 64<<10, "the aliases were expanded")
			}},
		{name: "YAML alias bomb (binary executor)", image: "example.com/hostile/cat:v1", input: aliasBomb(), deadline: 30 * time.Second,
			code: codes.OK},
		{name: "deep YAML nesting (go executor)", image: "set-namespace:v0.4.5", input: deepNesting(), deadline: 30 * time.Second,
			code: codes.InvalidArgument, message: `exceeded max depth of 10000`},
		// A list that is its own item: an endless tree through its
		// alias, which yaml.v3 parses. Following it overflowed the
		// binary-runner's stack (a fatal error) in set-annotations and
		// ensure-name-substring.
		{name: "YAML alias cycle (set-annotations)", image: "set-annotations:v0.1.4", input: aliasCycle("a: b"), deadline: 30 * time.Second,
			code: codes.Internal, message: "too much work for the input"},
		{name: "YAML alias cycle (ensure-name-substring)", image: "ensure-name-substring:v0.1.1", input: aliasCycle("prepend: dev-"), deadline: 30 * time.Second,
			code: codes.Internal, message: "too much work for the input"},
		{name: "YAML alias cycle in metadata (set-labels)", image: "set-labels:v0.2.1", input: strings.Replace(aliasCycle("a: b"), "metadata: {name: cycle}", "metadata: &m {name: cycle, labels: {a: *m}}", 1), deadline: 30 * time.Second,
			// kyaml's label setter panics on the alias: the call fails,
			// the binary-runner goes on.
			code: codes.Internal, message: "unhandled yaml node kind"},
	}
}

// aliasCycle is a ResourceList whose ConfigMap holds a list that is its own
// item, for a function configured by a ConfigMap with data.
func aliasCycle(data string) string {
	return "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: fc}\n  data: {" + data + "}\n" +
		"items:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: cycle}\n  data:\n    a: &x [*x]\n"
}

func TestHostile(t *testing.T) {
	harness.NeedRoot(t, "hostile calls under the uid layer")
	w := start(t)
	w.ordinary(t, 1)
	for _, c := range cases(w) {
		t.Run(c.name, func(t *testing.T) {
			resp, err := w.call(c.image, c.input, c.deadline)
			st := status.Convert(err)
			// The answer each case got, for reading (-test.v). Those at
			// the caller's deadline carry the client library's words
			// ("context deadline exceeded"): the answer is the caller's.
			t.Logf("%s: %s %q", c.name, st.Code(), st.Message())
			assert.True(t, c.ends(st.Code()), "%s: %v", c.name, err)
			if c.message != "" {
				assert.Regexp(t, "(?i)"+c.message, st.Message())
			}
			if c.after != nil && (c.code != codes.OK || err == nil) {
				c.after(t, w, resp)
			}
			w.serving(t)
			w.ordinary(t, 2)
		})
	}
}

// A call tries to read the stdin of another call running beside it.
func TestReadingAnotherCallsInput(t *testing.T) {
	harness.NeedRoot(t, "reading another call's input under the uid layer")
	w := start(t)
	victim := make(chan error, 1)
	go func() {
		_, err := w.call("example.com/hostile/slow-cat:v1", input(map[string]string{"secret": "victim-data"}), 30*time.Second)
		victim <- err
	}()
	// The victim sleeps 3 s before it reads; the attacker looks meanwhile.
	_, err := w.call("example.com/hostile/stdin-of-others:v1", input(nil), 30*time.Second)
	assert.NoError(t, err, "the attacker read another call's stdin")
	assert.NoError(t, <-victim)
	w.serving(t)
}

// The resource-exhaustion cases while ordinary calls go on: those succeed
// meanwhile.
func TestExhaustionBesideOrdinaryCalls(t *testing.T) {
	harness.NeedRoot(t, "exhaustion beside ordinary calls under the uid layer")
	w := start(t)
	for _, c := range cases(w) {
		if !c.exhausting {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			var wg sync.WaitGroup
			for i := 0; i < 2; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					_, err := w.call(c.image, c.input, c.deadline)
					assert.True(t, c.ends(status.Code(err)), "%s: %v", c.name, err)
				}()
			}
			w.ordinary(t, 3)
			wg.Wait()
			w.serving(t)
		})
	}
}

// The binary-runner as PID 1 of its own pid namespace, as in a container:
// hostile functions that leave children behind (a setsid escapee, orphans,
// a fork bomb) leave nothing in the namespace once their calls are done, no
// zombie and no escapee. With --sandbox=none the escapee stays, which is
// what the sandbox's subreaper is for.
func TestHostileFunctionsWithTheRunnerAsPIDOne(t *testing.T) {
	harness.NeedRoot(t, "the binary-runner as PID 1 (unshare --pid)")
	runner := harness.Runfile(t, os.Getenv("FNRUNNER_BINARY_RUNNER"))
	wrapper := filepath.Join(t.TempDir(), "binary-runner-as-pid-1")
	require.NoError(t, os.WriteFile(wrapper, []byte(`#!/bin/bash
# The binary-runner as PID 1 of a new pid namespace. unshare does not pass
# SIGTERM on: it goes to the binary-runner itself (PID 1 of a namespace gets
# only the signals it handles, and it handles SIGTERM).
unshare --pid --fork --mount-proc --kill-child -- `+runner+` "$@" &
child=$!
trap 'pkill -TERM -P $child; wait $child; exit 0' TERM
wait $child
`), 0o755))
	for _, tc := range []struct {
		args                         []string
		wantEscapees, wantPrestarted bool
	}{
		{args: []string{"--sandbox=base,landlock,uid"}},
		// Functions started ahead of their calls: the escapee and the
		// orphan start their child before reading their input, so they
		// are ended and not started ahead again; the ordinary starlark
		// one waits below its helper.
		{args: []string{"--sandbox=base,landlock,uid", "--sandbox-prestarted-functions=4"}, wantPrestarted: true},
		{args: []string{"--sandbox=none"}, wantEscapees: true},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			w := startWith(t, wrapper, tc.args...)
			for i := 0; i < 3; i++ {
				for _, image := range []string{"example.com/hostile/escapee:v1", "example.com/hostile/orphan:v1"} {
					_, err := w.call(image, input(nil), 30*time.Second)
					require.NoError(t, err, image)
				}
			}
			if !tc.wantEscapees {
				// Without the sandbox nothing bounds a fork bomb: in
				// the runner's pid namespace it can take every pid and
				// thread the runner needs (seen: the binary-runner
				// ended, "connection reset"), which is what the
				// sandbox's limits are for.
				_, err := w.call("example.com/hostile/fork-bomb:v1", input(nil), 3*time.Second)
				require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
			}
			w.ordinary(t, 1)

			pid1 := pidOne(t, w)
			if tc.wantEscapees {
				assert.Eventually(t, func() bool { return len(othersInNamespace(t, pid1)) > 0 }, 10*time.Second, 50*time.Millisecond,
					"without the sandbox, escapees were expected in the runner's namespace")
				return
			}
			assert.Eventually(t, func() bool { return len(othersInNamespace(t, pid1)) == 0 }, 10*time.Second, 50*time.Millisecond,
				"left in the runner's pid namespace: %v", othersInNamespace(t, pid1))
			if tc.wantPrestarted {
				ns, err := os.Readlink("/proc/" + strconv.Itoa(pid1) + "/ns/pid")
				require.NoError(t, err)
				var started []string
				assert.Eventually(t, func() bool {
					all := procstat.List(func(p procstat.Process) bool { return p.PIDNamespace == ns })
					waiting := waitingForACall(all, func(p procstat.Process) bool { return p.PPID == pid1 }, 8)
					started = nil
					for _, p := range all {
						if waiting[p.PID] && !strings.Contains(p.Cmdline, "fnsandbox") {
							started = append(started, p.Cmdline)
						}
					}
					return len(started) == 1 && strings.Contains(started[0], "starlark")
				}, 10*time.Second, 50*time.Millisecond, "only the starlark function waits for its next call: %v", started)
			}
		})
	}
}

// pidOne finds the binary-runner the wrapper started: the child of its
// unshare, PID 1 of its own namespace.
func pidOne(t testing.TB, w *world) int {
	t.Helper()
	wrapper, err := w.s.Pid("binary-runner")
	require.NoError(t, err)
	for _, unshare := range childrenOf(t, wrapper) {
		for _, runner := range childrenOf(t, unshare) {
			return runner
		}
	}
	t.Fatal("no binary-runner below its wrapper")
	return 0
}

// childrenOf lists the processes whose parent is ppid.
func childrenOf(t testing.TB, ppid int) []int {
	t.Helper()
	return pids(procstat.List(func(p procstat.Process) bool { return p.PPID == ppid }))
}

func pids(ps []procstat.Process) []int {
	var out []int
	for _, p := range ps {
		out = append(out, p.PID)
	}
	return out
}

// othersInNamespace lists the processes in pid1's pid namespace other
// than pid1, with their state (Z: a zombie), and other than the runner's
// helpers that wait for a call: idle (--sandbox-warm-helpers, 4) or with
// a function's process started ahead of its call
// (--sandbox-prestarted-functions, 4) below them.
func othersInNamespace(t testing.TB, pid1 int) []string {
	t.Helper()
	ns, err := os.Readlink("/proc/" + strconv.Itoa(pid1) + "/ns/pid")
	require.NoError(t, err)
	all := procstat.List(func(p procstat.Process) bool { return p.PIDNamespace == ns && p.PID != pid1 })
	waiting := waitingForACall(all, func(p procstat.Process) bool { return p.PPID == pid1 }, 8)
	var out []string
	for _, p := range all {
		if waiting[p.PID] && p.State != 'Z' {
			continue
		}
		out = append(out, fmt.Sprintf("%d %c %s", p.PID, p.State, p.Cmdline))
	}
	return out
}

// waitingForACall is the set of the runner's helpers waiting for a call
// (at most max of those top accepts), and every process below them: a
// function's process started ahead of its call. A call's helper has ended
// by the time the call is answered, so nothing of a call is below one.
func waitingForACall(all []procstat.Process, top func(procstat.Process) bool, max int) map[int]bool {
	set := map[int]bool{}
	for _, p := range all {
		if top(p) && p.State == 'S' && strings.HasSuffix(p.Cmdline, "fnsandbox "+spec.Warm) && len(set) < max {
			set[p.PID] = true
		}
	}
	for grew := true; grew; {
		grew = false
		for _, p := range all {
			if !set[p.PID] && set[p.PPID] {
				set[p.PID], grew = true, true
			}
		}
	}
	return set
}

// rawCodec sends bytes as they are, as an attacker's client would.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

// Hostile protobuf bodies on the porch-facing port: each is refused with
// InvalidArgument, and the gateway goes on serving.
func TestHostileRequests(t *testing.T) {
	// start's binary-runner has the uid layer.
	harness.NeedRoot(t, "hostile requests to a stack under the uid layer")
	w := start(t)
	conn, err := grpc.NewClient(w.s.GatewayAddress, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(16<<20)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	image := func(name string) []byte { return append([]byte{0x12, byte(len(name))}, name...) } // field 2, image
	rl := func(b []byte) []byte { return append([]byte{0x0a, byte(len(b))}, b...) }             // field 1, resource_list (< 128 bytes)
	for _, c := range []struct {
		name    string
		body    []byte
		code    codes.Code
		message string
	}{
		{"6 MiB of nested groups", bytes.Repeat([]byte{0x0b}, 6<<20), codes.InvalidArgument, "recursion depth"},
		{"10,002 well-formed nested groups", append(bytes.Repeat([]byte{0x0b}, 10002), bytes.Repeat([]byte{0x0c}, 10002)...), codes.InvalidArgument, "recursion depth"},
		{"a length past the end", []byte{0x0a, 0xff, 0xff, 0x03, 'x'}, codes.InvalidArgument, ""},
		{"a varint that never ends", bytes.Repeat([]byte{0xff}, 64), codes.InvalidArgument, ""},
		{"no image", rl([]byte("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems: []\n")), codes.InvalidArgument, "image"},
		{"a ResourceList that is not one", append(image("set-namespace:v0.4.5"), rl([]byte{0x00, 0x01, 0x02, 0x03, 0x04})...), codes.InvalidArgument, "resourcelist"},
		{"a ResourceList of another kind", append(image("set-namespace:v0.4.5"), rl([]byte("apiVersion: v1\nkind: ConfigMap\n"))...), codes.InvalidArgument, "resourcelist"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out []byte
			err := conn.Invoke(ctx, pb.FunctionEvaluator_EvaluateFunction_FullMethodName, c.body, &out, grpc.ForceCodec(rawCodec{}))
			st := status.Convert(err)
			assert.Equal(t, c.code, st.Code(), "%v", err)
			if c.message != "" {
				assert.Contains(t, strings.ToLower(st.Message()), c.message)
			}
			w.serving(t)
			w.ordinary(t, 1)
		})
	}
}

func aliasBomb() string {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: bomb\n  data:\n")
	b.WriteString("    a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n")
	prev := "a"
	for _, name := range []string{"b", "c", "d", "e", "f", "g", "h", "i"} {
		fmt.Fprintf(&b, "    %s: &%s [%s]\n", name, name, strings.TrimSuffix(strings.Repeat("*"+prev+",", 9), ","))
		prev = name
	}
	return b.String()
}

func deepNesting() string {
	const depth = 100000
	return "apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: deep\n  data:\n    a: " +
		strings.Repeat("[", depth) + strings.Repeat("]", depth) + "\n"
}

// processesOfUIDs lists the pids whose owner is in [from, to).
func processesOfUIDs(t testing.TB, from, to int) []int {
	t.Helper()
	return pids(procstat.List(func(p procstat.Process) bool { return p.UID >= from && p.UID < to }))
}

// A script's print() goes to its own call's log: calls printing at once,
// one of them spinning until its deadline meanwhile, each get exactly their
// own lines, and the spinning one holds up none of them.
func TestStarlarkPrintIsPerCall(t *testing.T) {
	harness.NeedRoot(t, "starlark's print per call under the uid layer")
	w := start(t)
	spun := make(chan error, 1)
	go func() {
		_, err := w.call("starlark:v0.5.5", starlark("print('spinner')\ndef spin():\n  for i in range(1 << 62):\n    pass\nspin()"), 5*time.Second)
		spun <- err
	}()
	const calls, lines = 8, 50
	var wg sync.WaitGroup
	for i := 0; i < calls; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mark := fmt.Sprintf("call-%d", i)
			resp, err := w.call("starlark:v0.5.5", starlark(fmt.Sprintf("for i in range(%d):\n  print('%s', i)", lines, mark)), 15*time.Second)
			if !assert.NoError(t, err, mark) {
				return
			}
			log := string(resp.GetLog())
			var printed []string
			for _, l := range strings.Split(log, "\n") {
				if strings.Contains(l, "call-") || strings.Contains(l, "spinner") {
					printed = append(printed, strings.TrimSpace(l))
				}
			}
			want := make([]string, lines)
			for j := range want {
				want[j] = fmt.Sprintf("%s %d", mark, j)
			}
			assert.Equal(t, want, printed, "%s: the printed lines of its log\n%s", mark, log)
		}()
	}
	wg.Wait()
	// It ends at its deadline, or at its step bound first on a core fast
	// enough to take a billion steps in 5 s.
	st := status.Convert(<-spun)
	assert.True(t, st.Code() == codes.DeadlineExceeded || st.Code() == codes.Internal && strings.Contains(st.Message(), "too many steps"),
		"the spinning script: %s %q", st.Code(), st.Message())
	w.ordinary(t, 1)
	w.serving(t)
}
