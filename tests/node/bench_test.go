package node_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/node"
)

var (
	benchCold = flag.Int("node-bench-cold", 8, "BenchmarkNodePod: cold calls per pod address mode, each a function of its own.")
	benchWarm = flag.Int("node-bench-warm", 200, "BenchmarkNodePod: warm calls per pod address mode, one at a time.")
)

// BenchmarkNodePod: the pod executor on the real node, deploy/overlays/local
// as the node tests deploy it (tools/bazel run //tools/bench:node). Cold
// calls, each of a function of its own (a pod scheduled, its sandbox and
// network made, the init container run, the function started and probed,
// its address answering; the images are on the node already, so no pull),
// and warm calls on one pod, under --pod-address=service-dns (deploy/'s
// default: the pod's Service through kube-proxy) and then pod-ip, each
// with the pod-manager's own health checks of the starting pod (its
// default) and with the pod's Ready condition only. The first
// cold call, which pulls the wrapper-server's and the function's images, is
// printed apart. Prints; asserts nothing.
func BenchmarkNodePod(b *testing.B) {
	n := node.Start(b)
	ctx := context.Background()
	c := n.Kube.Client
	conn := deployOverlay(b, n, "deploy/overlays/local", nil)
	rl := setNamespaceInput
	bin := harness.Binary(b, "FNRUNNER_SET_NAMESPACE")
	newFunction := func(name string) string {
		require.NoError(b, node.PushBinaryImage(n.Registry+"/fns/"+name+":node", bin, "/set-namespace", []string{"/set-namespace"}, nil))
		return claimForPods(b, n, name)
	}
	call := func(image string) time.Duration {
		var start time.Time
		_, err := callClaimed(b, conn, image, rl, 2*time.Minute, &start)
		require.NoError(b, err, "%s\n%s", image, podReport(ctx, c))
		return time.Since(start)
	}
	// Until kube-proxy serves the gateway's NodePort (untimed).
	err := harness.Poll(time.Minute, time.Second, func() error {
		_, err := callClaimed(b, conn, "set-namespace:v0.4.5", rl, 20*time.Second, nil)
		return err
	})
	require.NoError(b, err, "\n%s", podReport(ctx, c))
	out := os.Stdout
	fmt.Fprintf(out, "set-namespace v0.4.5 through a pod on the real node (kubelet + containerd), 2 KiB, one call at a time\n\n")
	fmt.Fprintf(out, "| pod address | calls | n | p50 | min | max |\n|---|---|---|---|---|---|\n")
	first := call(newFunction("bench-first"))
	fmt.Fprintf(out, "| service-dns | first cold call (pulls the wrapper-server's and set-namespace's images) | 1 | %v | | |\n", first.Round(time.Millisecond))

	// Each address mode runs twice: the pod-manager asking the starting
	// pod's wrapper-server itself (its default), and the pod's Ready
	// condition only.
	noProbe := "--pod-probe-interval=0"
	modes := []struct {
		name, label string
		args        func([]string) []string
	}{
		{name: "service-dns", label: "service-dns"},
		{name: "service-dns-ready", label: "service-dns, Ready condition only (`" + noProbe + "`)", args: func(a []string) []string {
			return append(a, noProbe)
		}},
		{name: "pod-ip-ready", label: "pod-ip, Ready condition only (`" + noProbe + "`)", args: func(a []string) []string {
			return append(a, "--pod-address=pod-ip")
		}},
		{name: "pod-ip", label: "pod-ip", args: func(a []string) []string {
			return slices.DeleteFunc(a, func(s string) bool { return s == noProbe })
		}},
	}
	prev := "bench-first"
	for _, m := range modes {
		mode := m.label
		if m.args != nil {
			// The roll (untimed): the pod-manager's pod replaced, the
			// gateway reconnected, the last function's pod adopted.
			podManagerRolled(b, n, conn, rl, prev, m.args)
		}
		var cold []time.Duration
		var image string
		for i := range *benchCold {
			prev = fmt.Sprintf("bench-%s-%d", m.name, i)
			image = newFunction(prev)
			cold = append(cold, call(image))
			if i < *benchCold-1 {
				// Room on the node for the next ones (untimed): each
				// pod requests CPU. The claim goes first, or a
				// pod-manager that starts later warms a pod for it
				// again. The last serves the warm calls.
				require.NoError(b, client.IgnoreNotFound(c.Delete(ctx, functionConfigRef(prev))))
				for _, p := range functionPods(b, c, prev) {
					require.NoError(b, client.IgnoreNotFound(c.Delete(ctx, &p)))
				}
			}
		}
		var warm []time.Duration
		for range *benchWarm {
			warm = append(warm, call(image))
		}
		for _, row := range []struct {
			name string
			lat  []time.Duration
		}{{"cold", cold}, {"warm", warm}} {
			slices.Sort(row.lat)
			if len(row.lat) == 0 {
				continue
			}
			round := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
			fmt.Fprintf(out, "| %s | %s | %d | %v | %v | %v |\n", mode, row.name, len(row.lat),
				round(row.lat[len(row.lat)/2]), round(row.lat[0]), round(row.lat[len(row.lat)-1]))
		}
	}
}
