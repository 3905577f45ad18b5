package porch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"testing"
)

// RunAndCheck runs both suites against the runner porch-server calls
// (runner: "porch" or "fnrunner"), prints each suite's table, writes the
// runs as JSON to the test's undeclared outputs, and fails the test for
// every failure expected.yaml does not give a reason for, and for every
// entry of expected.yaml for this runner whose test no longer fails.
func RunAndCheck(t *testing.T, e *Env, runner, expectedPath string) []Run {
	t.Helper()
	return RunAndCheckSuites(t, e, runner, expectedPath, e.Suites(t))
}

// RunAndCheckSuites is RunAndCheck for the suites given.
func RunAndCheckSuites(t *testing.T, e *Env, runner, expectedPath string, suites []Suite) []Run {
	t.Helper()
	expected, err := ReadExpected(expectedPath)
	if err != nil {
		t.Fatal(err)
	}
	var runs []Run
	for _, s := range suites {
		// The suites' output goes to stderr: rules_go reads the test's
		// stdout into test.xml, and porch's test names are not ours.
		fmt.Fprintf(os.Stderr, "=== porch's %s suite against %s\n", s.Name, runner)
		out, took, err := e.Run(context.Background(), s, os.Stderr)
		if err != nil {
			t.Fatalf("running porch's %s suite: %v\n%s", s.Name, err, e.logs())
		}
		r := Parse(s.Name, runner, out, took)
		runs = append(runs, r)
		fmt.Printf("\n### porch's %s suite against %s\n\n%s\n", s.Name, runner, Table(r))
		if !r.Complete {
			t.Errorf("porch's %s suite did not finish (timed out or crashed)\n%s", s.Name, e.logs())
		}
		if err := e.exited(); err != nil {
			t.Errorf("during porch's %s suite: %v", s.Name, err)
		}
		check(t, expected, r)
		if dir := os.Getenv("TEST_UNDECLARED_OUTPUTS_DIR"); dir != "" {
			if err := WriteRun(filepath.Join(dir, fmt.Sprintf("%s-%s.json", runner, s.Name)), r); err != nil {
				t.Error(err)
			}
		}
	}
	return runs
}

func check(t *testing.T, expected []Expected, r Run) {
	t.Helper()
	names := make([]string, 0, len(r.Tests))
	for n := range r.Tests {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if r.Tests[n] != Fail || hasFailingSubtest(r, n) {
			continue
		}
		if _, ok := Allowed(expected, r.Suite, n, r.Runner); !ok {
			t.Errorf("porch's %s suite: %s fails against %s, and tests/porch/expected.yaml gives no reason", r.Suite, n, r.Runner)
		}
	}
	for _, x := range expected {
		if x.Suite != r.Suite || !slices.Contains(x.Runners, r.Runner) {
			continue
		}
		if st, ok := r.Tests[x.Test]; ok && st != Fail {
			t.Errorf("porch's %s suite: %s is expected to fail against %s (%s: %s) but ended %s: drop it from tests/porch/expected.yaml", r.Suite, x.Test, r.Runner, x.Reason, x.Why, st)
		}
		if _, ok := r.Tests[x.Test]; !ok {
			t.Errorf("porch's %s suite: expected.yaml names %s, which did not run", r.Suite, x.Test)
		}
		if r.Runner == "fnrunner" && x.Reason != PodCache && !slices.Contains(x.Runners, "porch") {
			t.Errorf("expected.yaml: %s %s fails with fnrunner only, for %s: only a pod-cache difference may be fnrunner's alone", x.Suite, x.Test, x.Reason)
		}
	}
}

// hasFailingSubtest: a parent fails when a subtest does; the subtest is the one judged.
func hasFailingSubtest(r Run, name string) bool {
	for n, st := range r.Tests {
		if st == Fail && len(n) > len(name) && n[:len(name)+1] == name+"/" {
			return true
		}
	}
	return false
}
