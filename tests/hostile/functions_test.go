package hostile_test

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/libs/proctree"
	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tools/localstack"
)

// The binary-runner's budgets scaled into a memory cgroup, as
// scaledInFlight is the gateway's: what admission, the transport and the
// runtime may hold fits it (the binary-runner checks that at start).
const (
	runnerInFlight = 128 << 20
	runnerQueue    = 32 << 20
	runnerLimit    = 384 << 20
)

// configMaps are n ConfigMaps named prefix0..., each with data.a.
func configMaps(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: %s%d\n  data:\n    a: x\n", prefix, i)
	}
	return b.String()
}

// replacements is an apply-replacements ResourceList: a source ConfigMap
// whose data.v is value, n target ConfigMaps, and copies replacements each
// copying data.v into every ConfigMap's data.a.
func replacements(value string, n, copies int) string {
	var b strings.Builder
	b.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n")
	fmt.Fprintf(&b, "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: src\n  data:\n    v: %s\n", value)
	b.WriteString(configMaps("t", n))
	b.WriteString("functionConfig:\n  apiVersion: fn.kpt.dev/v1alpha1\n  kind: ApplyReplacements\n  metadata:\n    name: r\n  replacements:\n")
	for range copies {
		b.WriteString("  - source:\n      kind: ConfigMap\n      name: src\n      fieldPath: data.v\n    targets:\n    - select:\n        kind: ConfigMap\n      fieldPaths:\n      - data.a\n      options:\n        create: true\n")
	}
	return b.String()
}

// scrape reads one gauge from a /metrics endpoint.
func scrape(t testing.TB, address, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + address + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			return f
		}
	}
	require.NoError(t, sc.Err())
	t.Fatalf("no %s at %s", name, address)
	return 0
}

// functionProcesses are the processes below pid other than sandbox
// helpers (warm ones wait for calls there): a call's work.
func functionProcesses(t testing.TB, pid int) []string {
	t.Helper()
	below, err := proctree.Tree{}.Descendants(pid)
	require.NoError(t, err)
	var out []string
	for _, p := range below {
		comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "comm"))
		if err != nil {
			continue // gone
		}
		if c := strings.TrimSpace(string(comm)); c != "fnsandbox" {
			out = append(out, fmt.Sprintf("%d %s", p, c))
		}
	}
	return out
}

// startRunnerInCgroup starts the stack with the binary-runner in a memory
// cgroup of runnerLimit, its budgets scaled into it, serving metrics at
// the address it returns.
func startRunnerInCgroup(t testing.TB) (*world, memoryCgroup, string) {
	cg := newMemoryCgroup(t, runnerLimit)
	metrics, err := localstack.FreeAddress()
	require.NoError(t, err)
	w := startWith(t, cg.Exec(t, harness.Binary(t, "FNRUNNER_BINARY_RUNNER")), "--sandbox=base,landlock",
		fmt.Sprintf("--max-in-flight-bytes=%d", runnerInFlight),
		fmt.Sprintf("--max-queue-bytes=%d", runnerQueue),
		"--metrics-address="+metrics)
	require.Contains(t, strings.Fields(cg.read(t, "cgroup.procs")), strconv.Itoa(w.pids["binary-runner"]), "the binary-runner is not in its cgroup")
	t.Logf("binary-runner at rest: %d MiB", cg.peak(t)>>20)
	return w, cg, metrics
}

// functionAttack is a call of a function made to use far more than its
// input, and how it must end: code, and a message matching message.
type functionAttack struct {
	name     string
	image    string
	input    string
	deadline time.Duration
	code     codes.Code
	message  string
}

// functionAttacks are the calls made to use far more than their input.
func functionAttacks() []functionAttack {
	var refs strings.Builder
	refs.WriteString("apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n")
	for i := range 3000 {
		fmt.Fprintf(&refs, "    k%d: x # kpt-set: ${big}\n", i)
	}
	refs.WriteString("functionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: f\n  data:\n    big: " + strings.Repeat("v", 20000) + "\n")

	return []functionAttack{
		{"apply-setters: one value, 3,000 references", "apply-setters:v0.2.2", refs.String(), time.Minute,
			codes.ResourceExhausted, `over the call's bound of \d+ MiB|exceeds the message size limit`},
		// The function matches the field's value against a regular
		// expression with a group for each reference: 3 GB in process.
		{"apply-setters: 10,000 references in one field", "apply-setters:v0.2.2",
			"apiVersion: config.kubernetes.io/v1\nkind: ResourceList\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: c\n  data:\n    k: y # kpt-set: " +
				strings.Repeat("${a}", 10000) + "\nfunctionConfig:\n  apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: f\n  data:\n    a: \"1\"\n",
			time.Minute, codes.ResourceExhausted, `over the call's bound of \d+ MiB`},
		{"apply-replacements: one value copied into 800 targets", "apply-replacements:v0.1.5", replacements(strings.Repeat("x", 40000), 800, 1), time.Minute,
			codes.ResourceExhausted, `over the call's bound of \d+ MiB|exceeds the message size limit`},
		{"starlark: a short script concatenating strings", "starlark:v0.5.5", starlark("s = 'x' * 1000000\nl = []\nfor i in range(3000):\n  l.append(s + str(i))"), time.Minute,
			codes.ResourceExhausted, `over the call's bound of \d+ MiB`},
		{"apply-replacements: work past its deadline", "apply-replacements:v0.1.5", replacements("v", 1000, 1500), 2 * time.Second,
			codes.DeadlineExceeded, ""},
	}
}

// Functions made to use far more than their input, on the binary-runner
// run as deploy/ runs it (the sandbox layers a non-root container gets:
// base and landlock; no cgroup of its own for a call) with its budgets
// scaled into a memory cgroup: each passes when the binary-runner was
// never killed, stayed inside its cgroup, answered the attack with the
// code it must, and answered a porch client calling beside the attack,
// and ordinary calls after it. A call past its deadline leaves neither
// weight nor work behind once it is answered.
func TestFunctionAttacksOnTheBinaryRunner(t *testing.T) {
	w, cg, metrics := startRunnerInCgroup(t)
	for _, a := range functionAttacks() {
		t.Run(a.name, func(t *testing.T) {
			require.Less(t, len(a.input), 400<<10, "the attack is a small request")
			stop := porchBeside(t, w)
			_, err := w.call(a.image, a.input, a.deadline)
			st := status.Convert(err)
			t.Logf("%s (%d bytes): %s %q", a.name, len(a.input), st.Code(), st.Message())
			assert.Equal(t, a.code, st.Code())
			if a.message != "" {
				assert.Regexp(t, a.message, st.Message())
			}
			// Answered: its weight and its processes are gone (a
			// deadline's answer may reach the caller first, as the
			// caller's own deadline).
			harness.WaitFor(t, "the call's weight to be released", func() bool {
				return scrape(t, metrics, "fnrunner_admission_in_flight_weight") == 0
			})
			assert.Empty(t, functionProcesses(t, w.pids["binary-runner"]), "the call's processes outlived its answer")
			held(t, w, cg, "binary-runner", runnerLimit, stop)
		})
	}
}
