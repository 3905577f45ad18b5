package main

import (
	"archive/zip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/fnrunner/fnrunner/tests/porch"
	"github.com/fnrunner/fnrunner/tools/bench/report"
)

// porchCmd writes the table of porch's e2e suites against porch's runner
// and fnrunner, side by side, from the runs //tests/porch's two tests
// leave in their outputs (outputs.zip, or the JSON files in it).
func porchCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("porch", flag.ContinueOnError)
	out := fs.String("out", "", "Directory to write porch-e2e-<date>.md into (default: print only).")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return fmt.Errorf("name the outputs of //tests/porch:porch_runner_test and :fnrunner_test (bazel-testlogs/tests/porch/*/test.outputs/outputs.zip)")
	}
	var runs []porch.Run
	for _, p := range fs.Args() {
		rs, err := readRuns(p)
		if err != nil {
			return err
		}
		runs = append(runs, rs...)
	}
	bySuite := map[string][]porch.Run{}
	for _, r := range runs {
		bySuite[r.Suite] = append(bySuite[r.Suite], r)
	}
	suites := make([]string, 0, len(bySuite))
	for s := range bySuite {
		suites = append(suites, s)
	}
	sort.Strings(suites)
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s on %s.\n\nCommand: `tools/bazel test //tests/porch:all && tools/bazel run //tools/bench -- porch --out $PWD/docs/bench $PWD/bazel-testlogs/tests/porch/*/test.outputs/outputs.zip`\n", time.Now().Format("2006-01-02"), report.Machine())
	for _, s := range suites {
		rs := bySuite[s]
		// porch's runner first.
		sort.Slice(rs, func(i, j int) bool { return rs[i].Runner > rs[j].Runner })
		fmt.Fprintf(&b, "\n## porch's test/e2e/%s\n\n%s", s, porch.Table(rs...))
	}
	fmt.Fprint(stdout, b.String())
	if *out == "" {
		return nil
	}
	path := filepath.Join(*out, "porch-e2e-"+time.Now().Format("2006-01-02")+".md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nwrote %s\n", path)
	return nil
}

// readRuns reads a run's JSON file, or every one in an outputs.zip.
func readRuns(path string) ([]porch.Run, error) {
	if strings.HasSuffix(path, ".json") {
		r, err := porch.ReadRun(path)
		return []porch.Run{r}, err
	}
	z, err := zip.OpenReader(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	defer z.Close()
	var runs []porch.Run
	for _, f := range z.File {
		if !strings.HasSuffix(f.Name, ".json") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return nil, err
		}
		var r porch.Run
		err = json.NewDecoder(rc).Decode(&r)
		rc.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", path, f.Name, err)
		}
		runs = append(runs, r)
	}
	return runs, nil
}
