package spec_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/libs/sandbox/spec"
)

func TestArgsParseRoundTrip(t *testing.T) {
	for _, s := range []spec.Spec{
		{UID: -1, GID: -1, Argv: []string{"/fn"}},
		{
			Limits:   spec.Limits{Processes: 1, AddressSpace: 2, FileSize: 3, OpenFiles: 4, CPUSeconds: 5},
			Landlock: true, ReadOnly: []string{"/usr", "/a,b"}, ReadWrite: []string{"/dev/null"}, PrivateDir: "/tmp/x",
			ConnectPorts: []uint16{443, 8080}, UID: 7, GID: 8, Namespaces: true, Cgroup: true, MemoryMax: 1 << 30, PidsMax: 64,
			// The function's own flags stay its own.
			Argv: []string{"/fn", "-landlock", "--", "-uid=0"},
		},
		{Landlock: true, AnyConnect: true, UID: -1, GID: -1, Path: "/usr/bin/fn", Argv: []string{"fn"}},
		// A value with spaces, "=" and a newline stays one value.
		{UID: -1, GID: -1, WorkDir: "/work dir", Env: []string{"HOME=/tmp/x", "A=b=c d", "NL=1\n2"}, Argv: []string{"/fn", "a b"}},
	} {
		got, err := spec.Parse(s.Args())
		require.NoError(t, err)
		assert.Equal(t, s, got)
		got, err = spec.Decode(s.Encode())
		require.NoError(t, err)
		assert.Equal(t, s, got)
	}
	_, err := spec.Decode(nil)
	assert.Error(t, err, "a warm helper that got no call")
}

func TestParseRefuses(t *testing.T) {
	for _, args := range [][]string{nil, {"--"}, {"-bogus", "--", "/fn"}, {"-connect=70000", "--", "/fn"}} {
		_, err := spec.Parse(args)
		assert.Error(t, err, "%q", args)
	}
}

func TestReportRoundTrip(t *testing.T) {
	r := spec.Report{{Layer: "base", Available: true, Detail: "fine"}, {Layer: "uid", Detail: "not root: no CAP_SETUID"}}
	got, err := spec.ParseReport(r.String())
	require.NoError(t, err)
	assert.Equal(t, r, got)
	_, err = spec.ParseReport("base maybe\n")
	assert.Error(t, err)
}

func TestHelperReports(t *testing.T) {
	for _, tc := range []struct {
		name, out string
		want      spec.HelperReport
	}{
		{"signal", spec.SignalReport(25) + "\n", spec.HelperReport{Signal: 25}},
		{"failure", spec.ErrorReport("starting /fn: no such file") + "\n", spec.HelperReport{Failure: "fnsandbox: starting /fn: no such file"}},
		{"memory", spec.MemoryReport(96<<20) + "\n" + spec.SignalReport(9) + "\n", spec.HelperReport{Signal: 9, MemoryLimit: 96 << 20}},
		{"nothing", "", spec.HelperReport{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, spec.ParseHelperReport(tc.out))
		})
	}
}

func TestWarmHelperAnswers(t *testing.T) {
	require.NoError(t, spec.ParseAcceptance([]byte(spec.Accepted)))
	var refused *spec.RefusedError
	require.ErrorAs(t, spec.ParseAcceptance(spec.FormatRefusal("changed", true)), &refused)
	assert.Equal(t, "changed", refused.Reason)
	assert.True(t, refused.HelperAtFault)
	require.ErrorAs(t, spec.ParseAcceptance(spec.FormatRefusal("bad spec", false)), &refused)
	assert.Equal(t, "bad spec", refused.Reason)
	assert.False(t, refused.HelperAtFault)
	err := spec.ParseAcceptance(spec.FormatExit(0))
	require.Error(t, err)
	assert.False(t, errors.As(err, &refused), "an exit code is no refusal")

	code, err := spec.ParseExit(spec.FormatExit(137))
	require.NoError(t, err)
	assert.Equal(t, 137, code)
	for _, bad := range []string{spec.Accepted, "exit 256", "exit -1", "exit"} {
		_, err := spec.ParseExit([]byte(bad))
		assert.Error(t, err, bad)
	}
}
