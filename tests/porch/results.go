package porch

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Status is how one of porch's tests ended.
type Status string

// The statuses `go test -v` prints.
const (
	Pass Status = "PASS"
	Fail Status = "FAIL"
	Skip Status = "SKIP"
)

// Run is one suite's run against one runner.
type Run struct {
	Suite  string            `json:"suite"`
	Runner string            `json:"runner"`
	Tests  map[string]Status `json:"tests"`
	// Took is the suite binary's wall time.
	Took time.Duration `json:"took"`
	// Complete: the suite binary printed its final PASS, FAIL or ok line.
	Complete bool `json:"complete"`
}

// A status line of the suites (they have one top-level test, TestE2E).
var resultLine = regexp.MustCompile(`^(?:    )*--- (PASS|FAIL|SKIP): (TestE2E(?:/\S+)?) \(\d+\.\d+s\)$`)

// Parse reads `go test -v` output: every test and subtest's status.
func Parse(suite, runner, output string, took time.Duration) Run {
	r := Run{Suite: suite, Runner: runner, Tests: map[string]Status{}, Took: took}
	sc := bufio.NewScanner(strings.NewReader(output))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	last := ""
	for sc.Scan() {
		line := sc.Text()
		if m := resultLine.FindStringSubmatch(line); m != nil {
			r.Tests[m[2]] = Status(m[1])
		}
		if strings.TrimSpace(line) != "" {
			last = line
		}
	}
	// The test binary's last line is PASS or FAIL when it ran to the end.
	r.Complete = last == "PASS" || last == "FAIL"
	return r
}

// Reason is why a porch test may fail with a runner; there are three.
type Reason string

// The reasons.
const (
	// UnavailableFunction: the test names a function version nobody can
	// have offline (no module on the proxy, no source).
	UnavailableFunction Reason = "unavailable-function"
	// PorchDefect: porch's side fails, whichever runner answers (the
	// beta.61.1 constant).
	PorchDefect Reason = "porch-defect"
	// PodCache: a choice of porch's pod cache fnrunner differs on by
	// design; the pod-test issue covers it.
	PodCache Reason = "pod-cache"
)

// Expected is one entry of expected.yaml.
type Expected struct {
	Suite string `json:"suite"`
	Test  string `json:"test"`
	// Runners it fails with: porch, fnrunner or both.
	Runners []string `json:"runners"`
	Reason  Reason   `json:"reason"`
	Why     string   `json:"why"`
}

// ReadExpected reads and checks expected.yaml.
func ReadExpected(path string) ([]Expected, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var list []Expected
	if err := yaml.UnmarshalStrict(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	for _, e := range list {
		switch e.Reason {
		case UnavailableFunction, PorchDefect, PodCache:
		default:
			return nil, fmt.Errorf("%s: %s %s: reason %q is none of %s, %s, %s", path, e.Suite, e.Test, e.Reason, UnavailableFunction, PorchDefect, PodCache)
		}
		if e.Why == "" || len(e.Runners) == 0 {
			return nil, fmt.Errorf("%s: %s %s: runners and why are required", path, e.Suite, e.Test)
		}
		for _, r := range e.Runners {
			if r != "porch" && r != "fnrunner" {
				return nil, fmt.Errorf("%s: %s %s: runner %q is neither porch nor fnrunner", path, e.Suite, e.Test, r)
			}
		}
		k := e.Suite + " " + e.Test
		if seen[k] {
			return nil, fmt.Errorf("%s: %s twice", path, k)
		}
		seen[k] = true
	}
	return list, nil
}

// Allowed says whether test of suite may fail with runner.
func Allowed(list []Expected, suite, test, runner string) (Expected, bool) {
	for _, e := range list {
		if e.Suite != suite {
			continue
		}
		if e.Test != test && !strings.HasPrefix(test, e.Test+"/") {
			continue
		}
		for _, r := range e.Runners {
			if r == runner {
				return e, true
			}
		}
	}
	return Expected{}, false
}

// Table is a Markdown table of runs of one suite side by side.
func Table(runs ...Run) string {
	names := map[string]bool{}
	for _, r := range runs {
		for n := range r.Tests {
			names[n] = true
		}
	}
	sorted := make([]string, 0, len(names))
	for n := range names {
		sorted = append(sorted, n)
	}
	sort.Strings(sorted)
	var b strings.Builder
	b.WriteString("| test |")
	for _, r := range runs {
		fmt.Fprintf(&b, " %s |", r.Runner)
	}
	b.WriteString("\n|---|")
	for range runs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, n := range sorted {
		fmt.Fprintf(&b, "| %s |", n)
		for _, r := range runs {
			s := string(r.Tests[n])
			if s == "" {
				s = "—"
			}
			fmt.Fprintf(&b, " %s |", s)
		}
		b.WriteString("\n")
	}
	b.WriteString("| **pass / skip / fail, suite time** |")
	for _, r := range runs {
		var p, s, f int
		for _, st := range r.Tests {
			switch st {
			case Pass:
				p++
			case Skip:
				s++
			case Fail:
				f++
			}
		}
		fmt.Fprintf(&b, " %d / %d / %d, %s |", p, s, f, r.Took.Round(time.Second))
	}
	b.WriteString("\n")
	return b.String()
}

// WriteRun writes a run as JSON (for the other runner's test and the bench).
func WriteRun(path string, r Run) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadRun reads what WriteRun wrote.
func ReadRun(path string) (Run, error) {
	var r Run
	b, err := os.ReadFile(path)
	if err != nil {
		return r, err
	}
	return r, json.Unmarshal(b, &r)
}
