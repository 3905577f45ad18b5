package pods_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"

	pb "github.com/fnrunner/fnrunner/protos/evaluator"
	"github.com/fnrunner/fnrunner/tools/bench/load"
	"github.com/fnrunner/fnrunner/tools/procstat"
)

// BenchmarkPodPath prints what the pod executor costs; it asserts nothing.
// Run it with tools/bazel run //tools/bench:pods. Beside the latencies, the
// pod-manager's CPU (utime+stime): idle, for the cold call and per warm call
// through the gateway, its idle rate taken off (the figures its CPU request
// cites).
func BenchmarkPodPath(b *testing.B) {
	f := start(b)
	image := f.host + "/fns/steady:v1"
	const n = 200
	pm, err := f.stack.Pid("pod-manager")
	if err != nil {
		b.Fatal(err)
	}
	cpu := func() time.Duration {
		d, err := procstat.CPUTime(pm)
		if err != nil {
			b.Fatal(err)
		}
		return d
	}
	const idleFor = 30 * time.Second
	for i := 0; i < b.N; i++ {
		idle0 := cpu()
		time.Sleep(idleFor)
		idleRate := float64(cpu()-idle0) / float64(idleFor) // CPU seconds a second
		// Cold: no pod yet; pod creation, test kubelet start, readiness, call.
		cpu0 := cpu()
		start := time.Now()
		if _, err := f.call(b, image); err != nil {
			b.Fatal(err)
		}
		cold := time.Since(start)
		coldCPU := cpu() - cpu0 - time.Duration(idleRate*float64(cold))

		// Warm, through the gateway: gateway → pod-manager → wrapper-server.
		cpu1, warmStart := cpu(), time.Now()
		viaGateway := load.Run(context.Background(), n, 1, load.Evaluate(f.gateway, image, []byte(input), time.Minute))
		warmCPU := (cpu() - cpu1 - time.Duration(idleRate*float64(time.Since(warmStart)))) / n
		// The same pod's wrapper-server called directly.
		var pod corev1.Pod
		for _, p := range f.pods(b) {
			if strings.HasPrefix(p.Name, "steady-") {
				pod = p
			}
		}
		conn, err := grpc.NewClient(pod.Status.PodIP+":9446", grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		direct := load.Run(context.Background(), n, 1, load.Evaluate(pb.NewFunctionEvaluatorClient(conn), image, []byte(input), time.Minute))
		conn.Close()
		if viaGateway.Errors+direct.Errors > 0 {
			b.Fatalf("errors: gateway %v, direct %v", viaGateway.FirstError, direct.FirstError)
		}
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(cold), "cold-ms")
		b.ReportMetric(ms(viaGateway.P50), "gateway-p50-ms")
		b.ReportMetric(ms(direct.P50), "direct-p50-ms")
		b.ReportMetric(float64(viaGateway.P50)/float64(direct.P50), "gateway/direct")
		b.Logf("cold pod to first result: %v; warm p50 via gateway %v (p99 %v), direct to the wrapper-server %v (p99 %v): %.2fx",
			cold.Round(time.Millisecond), viaGateway.P50, viaGateway.P99, direct.P50, direct.P99, float64(viaGateway.P50)/float64(direct.P50))
		b.Logf("pod-manager CPU: idle %.1f millicores (over %v); the cold call %v; a warm call through the gateway %v (%d calls, one at a time)",
			idleRate*1000, idleFor, coldCPU.Round(10*time.Microsecond), warmCPU.Round(time.Microsecond), n)
	}
}
