package main

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// sections are the reference's services, in the order of the Bazel
// target's -service flags, each with the variable that names its binary
// to this test (BUILD.bazel).
var sections = []struct{ name, env string }{
	{"gateway", "FNRUNNER_GATEWAY"},
	{"config-reconciler", "FNRUNNER_CONFIG_RECONCILER"},
	{"binary-runner", "FNRUNNER_BINARY_RUNNER"},
	{"pod-manager", "FNRUNNER_POD_MANAGER"},
	{"wrapper-server", "FNRUNNER_WRAPPER_SERVER"},
}

// TestFlagsReferenceIsCurrent regenerates docs/flags.md from the service
// binaries and fails when the checked-in file differs.
func TestFlagsReferenceIsCurrent(t *testing.T) {
	var services []Service
	for _, s := range sections {
		services = append(services, Service{Name: s.name, Binary: harness.Binary(t, s.env)})
	}
	want, err := Generate(services)
	require.NoError(t, err)
	got, err := os.ReadFile(harness.Binary(t, "FNRUNNER_FLAGS_MD"))
	require.NoError(t, err)
	if string(got) == want {
		return
	}
	gotLines, wantLines := strings.Split(string(got), "\n"), strings.Split(want, "\n")
	for i := 0; i < max(len(gotLines), len(wantLines)); i++ {
		g, w := line(gotLines, i), line(wantLines, i)
		if g != w {
			t.Fatalf("docs/flags.md is stale: run\n\n\t%s\n\nfirst difference, line %d:\n  docs/flags.md: %s\n  --help gives:  %s", UpdateCommand, i+1, g, w)
		}
	}
}

func line(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end of file)"
}

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		out    string
		header string
		flags  []Flag
	}{
		{
			name: "header and flags",
			out: "Usage: svc [flags]\n\nDoes things.\n\nFlags:\n" +
				"  -address string\n    \tWhere to listen. (default \"localhost:1\")\n" +
				"  -debug\n    \tLog more.\n" +
				"  -wait duration\n    \tHow long. (default 10s)\n",
			header: "Usage: svc [flags]\n\nDoes things.",
			flags: []Flag{
				{Name: "address", Type: "string", Default: "localhost:1", Usage: "Where to listen."},
				{Name: "debug", Usage: "Log more."},
				{Name: "wait", Type: "duration", Default: "10s", Usage: "How long."},
			},
		},
		{
			name:   "a default the usage itself names stays in the usage",
			out:    "Usage: svc [flags]\n\nFlags:\n  -paths value\n    \tPaths (default \"/bin,/lib\").\n",
			header: "Usage: svc [flags]",
			flags:  []Flag{{Name: "paths", Type: "value", Usage: "Paths (default \"/bin,/lib\")."}},
		},
		{
			name:   "a usage of several lines",
			out:    "Flags:\n  -n int\n    \tFirst line.\n    \tSecond line. (default 2)\n",
			header: "",
			flags:  []Flag{{Name: "n", Type: "int", Default: "2", Usage: "First line. Second line."}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Parse(tc.out)
			require.NoError(t, err)
			assert.Equal(t, tc.header, h.Header)
			assert.Equal(t, tc.flags, h.Flags)
		})
	}
}

func TestParseRefusesWhatIsNoUsage(t *testing.T) {
	_, err := Parse("Usage: svc\n")
	require.ErrorContains(t, err, "no flags")
	_, err = Parse("Flags:\n  -n int\n    \tA number.\nstray line\n")
	require.ErrorContains(t, err, "stray line")
}

func TestNormalise(t *testing.T) {
	p := probes[0]
	dirs := []string{"/cache/bazel-out/bin/svc_"}
	for _, tc := range []struct {
		name, def, want string
	}{
		{"none", "", ""},
		{"fixed", "4", "4"},
		{"GOMAXPROCS", p.gomaxprocs, cpusPlaceholder},
		{"host name", "node-7", hostPlaceholder},
		{"beside the binary", "/cache/bazel-out/bin/svc_/fnsandbox", exeDirPlaceholder + "/fnsandbox"},
		{"temp dir", p.tmp + "/calls", tempDirPlaceholder + "/calls"},
		{"home dir", p.home + "/.kube/config", homeDirPlaceholder + "/.kube/config"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, normalise(tc.def, p, "node-7", dirs))
		})
	}
}

func TestItemEscapesMarkdown(t *testing.T) {
	f := Flag{Name: "owner", Type: "string", Default: "<host name>", Usage: "Lease fnrunner-pod-manager-<owner>; \"*\" is any; a|b."}
	assert.Equal(t, "- `--owner` (string, default `<host name>`): Lease fnrunner-pod-manager-\\<owner\\>; \"\\*\" is any; a\\|b.\n", item(f))
	assert.Equal(t, "- `--debug` (bool): Log more.\n", item(Flag{Name: "debug", Usage: "Log more."}))
}
