package hostile_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/status"

	"github.com/fnrunner/fnrunner/tools/bench/report"
)

var benchOut = flag.String("bench-out", "", "Directory BenchmarkAttacks writes attacks.md to (docs/bench); empty: print only.")

// BenchmarkAttacks measures each service's peak under each attack beside
// its limit: the gateway under the transport attacks, the binary-runner
// under the function attacks, each in a memory cgroup with its budgets
// scaled into it as the tests run them, a porch client calling beside.
// It prints a markdown table and, with -bench-out, writes it to
// attacks.md. It asserts nothing (the tests do). Run it with tools/bazel
// run //tools/bench:attacks -- -bench-out=$PWD/docs/bench.
func BenchmarkAttacks(b *testing.B) {
	var table strings.Builder
	fmt.Fprintf(&table, "`tools/bazel run //tools/bench:attacks -- -bench-out=$PWD/docs/bench`\n\n")
	fmt.Fprintf(&table, "Measured %s on %s. Each service runs in a cgroup v1 memory cgroup, its budgets scaled into it:\n", time.Now().UTC().Format("2006-01-02"), report.Machine())
	fmt.Fprintf(&table, "the gateway with %d MiB in flight and %d MiB queued in %d MiB (deploy/: 1,024 and 128 MiB in 1,408 MiB);\n", scaledInFlight>>20, scaledQueue>>20, gatewayLimit>>20)
	fmt.Fprintf(&table, "the binary-runner with %d MiB in flight and %d MiB queued in %d MiB, sandbox layers base and landlock (deploy/: 672 and 96 MiB in 1,024 MiB).\n", runnerInFlight>>20, runnerQueue>>20, runnerLimit>>20)
	fmt.Fprintf(&table, "Peak is the cgroup's highest charge during the attack (memory.max_usage_in_bytes, reset before each). A porch client calls set-namespace beside each attack.\n\n")
	fmt.Fprintf(&table, "| service | attack | answer | peak | cgroup limit | porch's calls beside | failed | OOM kills |\n|---|---|---|---|---|---|---|---|\n")
	row := func(service, attack, answer string, peak, limit int64, calls, failed int64, kills string) {
		line := fmt.Sprintf("| %s | %s | %s | %d MiB | %d MiB | %d | %d | %s |\n", service, attack, answer, peak>>20, limit>>20, calls, failed, kills)
		fmt.Print(line)
		table.WriteString(line)
	}

	w, cg := startGatewayInCgroup(b)
	for _, a := range transportAttacks(w) {
		stop := porchBeside(b, w)
		a.run(b)
		calls, failed := stop()
		row("gateway", a.name, "streams ended or connections closed", cg.peak(b), gatewayLimit, calls, failed, cg.oomKills(b))
	}
	w, cg, _ = startRunnerInCgroup(b)
	for _, a := range functionAttacks() {
		stop := porchBeside(b, w)
		_, err := w.call(a.image, a.input, a.deadline)
		calls, failed := stop()
		row("binary-runner", fmt.Sprintf("%s (%d bytes)", a.name, len(a.input)), status.Code(err).String(), cg.peak(b), runnerLimit, calls, failed, cg.oomKills(b))
	}

	fmt.Println()
	fmt.Println(table.String())
	if *benchOut != "" {
		if err := os.MkdirAll(*benchOut, 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*benchOut, "attacks.md"), []byte(table.String()), 0o644); err != nil {
			b.Fatal(err)
		}
		fmt.Printf("wrote attacks.md to %s\n", *benchOut)
	}
}
