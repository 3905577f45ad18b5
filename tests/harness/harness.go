// Package harness is the test plumbing shared by fnrunner's tests: where
// Bazel put a test's data (Runfile, Binary, Workspace), what a test needs of
// the machine or the checkout (Need, NeedRoot, NeedCgroupV1, Shared), and
// waiting for a condition that may itself fail the test (WaitFor). The services
// themselves are run by tools/localstack, private registries by
// tests/testregistry.
//
// Each helper has exactly one definition in the repository;
// harness_test.go fails when one is written again elsewhere.
package harness

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Runfile resolves a runfiles path, as $(rootpath) puts in a test's
// environment, to an absolute path. An absolute or empty p is returned as is.
func Runfile(t testing.TB, p string) string {
	t.Helper()
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	root := os.Getenv("TEST_SRCDIR")
	if ws := os.Getenv("TEST_WORKSPACE"); root != "" && ws != "" {
		return filepath.Join(root, ws, p)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

// Binary returns the absolute path of the runfile named by the environment
// variable env, failing the test (never skipping it) when it is not there.
func Binary(t testing.TB, env string) string {
	t.Helper()
	p := Runfile(t, os.Getenv(env))
	if p == "" {
		t.Fatalf("%s is not set: run this test with tools/bazel test", env)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s: %v", env, err)
	}
	return p
}

// Source resolves rel, a path from the repository's root that the test
// declares as data: its runfile under Bazel, the source tree's own under
// plain go test (found as Workspace finds it).
func Source(t testing.TB, rel string) string {
	t.Helper()
	if os.Getenv("TEST_SRCDIR") != "" {
		return Runfile(t, rel)
	}
	return filepath.Join(Workspace(t), rel)
}

// WorkspaceFileEnv names the environment variable that holds the runfiles
// path of //:WORKSPACE; a test that reads the source tree declares
//
//	data = ["//:WORKSPACE"],
//	env = {"FNRUNNER_WORKSPACE_FILE": "$(rootpath //:WORKSPACE)"},
const WorkspaceFileEnv = "FNRUNNER_WORKSPACE_FILE"

// Workspace returns the repository's root directory: the real one behind
// Bazel's sandbox (the runfile of //:WORKSPACE is a symlink into it), or,
// under plain go test, the first directory above the working directory that
// holds a WORKSPACE file.
func Workspace(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(WorkspaceFileEnv); p != "" {
		ws, err := filepath.EvalSymlinks(Runfile(t, p))
		if err != nil {
			t.Fatalf("locating the repository through %s: %v", WorkspaceFileEnv, err)
		}
		return filepath.Dir(ws)
	}
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "WORKSPACE")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no WORKSPACE above the working directory and %s not set", WorkspaceFileEnv)
		}
		dir = parent
	}
}

// RequireAllEnv names the environment variable that makes Need fail a test
// instead of skipping it: set to 1 where everything a test may need is there
// (CI: .ci/run passes --test_env=FNRUNNER_REQUIRE_ALL=1), so that nothing
// goes unchecked unnoticed.
const RequireAllEnv = "FNRUNNER_REQUIRE_ALL"

// skippedMarker starts the line Need writes for each test it skips;
// tools/bazel lists those lines at the end of a test run.
const skippedMarker = "FNRUNNER_SKIPPED"

// Need reports that t cannot check what here, for the reason err: what the
// machine or the checkout lacks (root, cgroup v1, shared data, a kernel
// feature). It skips t, or fails it when RequireAllEnv is 1; a nil err means
// nothing is missing, and Need does nothing. A skip also writes one line to
// stderr, since Bazel runs tests without -v and a skip's message never
// reaches test.log otherwise:
//
//	FNRUNNER_SKIPPED TestName: what not checked: err
func Need(t testing.TB, what string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	msg := fmt.Sprintf("%s not checked: %v", what, err)
	if os.Getenv(RequireAllEnv) == "1" {
		t.Fatalf("%s (%s=1: nothing may be skipped)", msg, RequireAllEnv)
	}
	fmt.Fprintf(os.Stderr, "%s %s: %s\n", skippedMarker, t.Name(), msg)
	t.Skip(msg)
}

// NeedRoot is Need for a test that must run as root (namespaces, cgroups,
// the sandbox's uid layer).
func NeedRoot(t testing.TB, what string) {
	t.Helper()
	if uid := os.Geteuid(); uid != 0 {
		Need(t, what, fmt.Errorf("needs root, and this test runs as uid %d", uid))
	}
}

// NeedCgroupV1 is Need for a test that runs only on a cgroup v1 host. A host
// has cgroup v2 when /sys/fs/cgroup/cgroup.controllers exists.
func NeedCgroupV1(t testing.TB, what string) {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		Need(t, what, errors.New("needs cgroup v1, and this host has cgroup v2"))
	}
}

// Shared returns the path of rel in shared/ beside the repository
// (Workspace's ../shared), data that CI machines have and a fresh clone
// does not; through Need, the test skips when it is missing.
func Shared(t testing.TB, rel string) string {
	t.Helper()
	p := filepath.Join(Workspace(t), "..", "shared", rel)
	if _, err := os.Stat(p); err != nil {
		Need(t, "what reads shared/"+rel, fmt.Errorf("put shared/ beside the repository (CI has it; a fresh clone does not): %w", err))
	}
	return p
}

// Wait bounds WaitFor: a safety net for a hang or a broken build, never a
// timing assertion.
const Wait = 30 * time.Second

// WaitFor calls cond every 20ms until it returns true, and fails the test
// after Wait, naming what it waited for and adding logs (e.g. a service's
// output, read at that moment). Unlike require.Eventually, cond runs on the
// test's goroutine, so it may itself fail the test (t.Fatal, require).
func WaitFor(t testing.TB, what string, cond func() bool, logs ...func() string) {
	t.Helper()
	deadline := time.Now().Add(Wait)
	for !cond() {
		if time.Now().After(deadline) {
			var b strings.Builder
			for _, l := range logs {
				b.WriteString(l())
			}
			t.Fatalf("gave up waiting for %s\n%s", what, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Poll calls f every interval until it returns nil or timeout has passed,
// and returns f's last error: for waits whose reason for not being done
// belongs in the failure message, or that must not fail the test.
func Poll(timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(interval)
	}
}

// DuplicateKeys returns, for each JSON log line of log (after any prefix
// before its first "{") that has a top-level key twice, the key and the
// line.
func DuplicateKeys(log string) []string {
	var dups []string
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, "{")
		if i < 0 {
			continue
		}
		line = line[i:]
		dec := json.NewDecoder(strings.NewReader(line))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			continue
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			key, _ := tok.(string)
			if seen[key] {
				dups = append(dups, key+" in "+line)
			}
			seen[key] = true
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil && err != io.EOF {
				break
			}
		}
	}
	return dups
}
