package script_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/functions/starlark/bounds"
	"github.com/fnrunner/fnrunner/functions/starlark/script"
)

// resourceList is one ConfigMap and a StarlarkRun with source.
func resourceList(source string) []byte {
	var indented strings.Builder
	for _, line := range strings.Split(source, "\n") {
		indented.WriteString("    " + line + "\n")
	}
	return []byte(`apiVersion: config.kubernetes.io/v1
kind: ResourceList
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: cm
  data:
    a: b
functionConfig:
  apiVersion: fn.kpt.dev/v1alpha1
  kind: StarlarkRun
  metadata:
    name: script
  source: |
` + indented.String())
}

// run runs source bounded by b; it returns the output ResourceList and the
// error result's message ("" when the script succeeded).
func run(t *testing.T, b bounds.Bounds, source string) (string, string) {
	t.Helper()
	// fn.Run's error only says that a result is an error.
	out, _ := fn.Run(script.Process(b), resourceList(source))
	rl, err := fn.ParseResourceList(out)
	require.NoError(t, err)
	for _, r := range rl.Results {
		if r.Severity == fn.Error {
			return string(out), r.Message
		}
	}
	return string(out), ""
}

func defaults() bounds.Bounds {
	return bounds.Bounds{MaxSteps: bounds.DefaultMaxSteps, MaxDepth: bounds.DefaultMaxDepth}
}

// The catalog's behaviour stays: the script edits ctx.resource_list, and
// the dialect has while, top-level control, set and recursion.
func TestScriptAsTheCatalogRunsIt(t *testing.T) {
	out, failure := run(t, defaults(), `
def fact(n):
  if n <= 1:
    return 1
  return n * fact(n - 1)
i = 0
while i < 3:
  i += 1
s = set([1, 2])
for r in ctx.resource_list["items"]:
  r["metadata"]["annotations"] = {"fact": str(fact(5)), "i": str(i), "set": str(len(s))}
`)
	require.Empty(t, failure)
	assert.Contains(t, out, `fact: "120"`)
	assert.Contains(t, out, `i: "3"`)
	assert.Contains(t, out, `set: "2"`)
}

// Hostile scripts end in an error result the caller can read, and the
// process goes on (this test is that process).
func TestHostileScriptsFail(t *testing.T) {
	for _, tc := range []struct {
		name, source, want string
		bounds             bounds.Bounds
	}{
		{"unbounded recursion", "def f(n):\n  return f(n + 1)\nf(0)", "call stack deeper than 10000", defaults()},
		{"infinite loop", "while True:\n  pass", "too many steps: the script took more than 200000", bounds.Bounds{MaxSteps: 200_000, MaxDepth: 100}},
		{"fail()", `fail("no")`, "no", defaults()},
		{"a ResourceList that holds itself", "l = []\nl.append(l)\nl.append(l)\nctx.resource_list['items'][0]['data'] = {'x': l}", "holds itself", defaults()},
		{"a ResourceList nested too deep", "v = 'x'\nfor i in range(5000):\n  v = [v]\nctx.resource_list['items'][0]['data'] = {'x': v}", "nests deeper", defaults()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, failure := run(t, tc.bounds, tc.source)
			assert.Contains(t, failure, tc.want)
		})
	}
}

// ctx.environment is empty whatever this process has.
func TestEnvironmentIsEmpty(t *testing.T) {
	t.Setenv("SECRET_TOKEN", "hunter2")
	out, failure := run(t, defaults(), `
for r in ctx.resource_list["items"]:
  r["metadata"]["annotations"] = {"env": str(len(ctx.environment))}
`)
	require.Empty(t, failure)
	assert.Contains(t, out, `env: "0"`)
	assert.NotContains(t, out, "hunter2")
}

func TestHTTPReachesOnlyAllowedHosts(t *testing.T) {
	allowed := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/redirect" {
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
			return
		}
		fmt.Fprint(w, "hello from allowed")
	}))
	defer allowed.Close()
	var reached atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		reached.Add(1)
		fmt.Fprint(w, "secret from other")
	}))
	defer other.Close()
	_, allowedPort, err := net.SplitHostPort(allowed.Listener.Addr().String())
	require.NoError(t, err)
	get := func(url string) string {
		return `
load("http.star", "http")
body = http.get("` + url + `").body()
for r in ctx.resource_list["items"]:
  r["metadata"]["annotations"] = {"body": body}
`
	}
	withHosts := func(hosts ...string) bounds.Bounds {
		b := defaults()
		b.AllowedHosts = hosts
		return b
	}

	for _, tc := range []struct {
		name    string
		bounds  bounds.Bounds
		url     string
		want    string // in the output, or else
		failure string // in the error result
	}{
		{"no hosts allowed", defaults(), allowed.URL, "", "host not allowed"},
		{"the allowed host", withHosts("127.0.0.1:" + allowedPort), allowed.URL, "hello from allowed", ""},
		{"another port of the allowed host", withHosts("127.0.0.1:" + allowedPort), other.URL, "", "host not allowed"},
		{"a name for the allowed address", withHosts("127.0.0.1:" + allowedPort), "http://localhost:" + allowedPort, "", "host not allowed"},
		{"a redirect elsewhere", withHosts("127.0.0.1:" + allowedPort), allowed.URL + "/redirect?to=" + other.URL, "", "host not allowed"},
		{"xlsx.get_url, which uses http.Get", withHosts("127.0.0.1:" + allowedPort), "", "", "host not allowed"},
		{"metadata endpoint", withHosts("127.0.0.1:" + allowedPort), "http://169.254.169.254/latest/meta-data/", "", "host not allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			source := get(tc.url)
			if tc.url == "" {
				source = "load('xlsx.star', 'xlsx')\nxlsx.get_url('" + other.URL + "')"
			}
			out, failure := run(t, tc.bounds, source)
			if tc.failure != "" {
				assert.Contains(t, failure, tc.failure)
				assert.NotContains(t, out, "secret from other")
				return
			}
			require.Empty(t, failure)
			assert.Contains(t, out, tc.want)
		})
	}
	assert.Zero(t, reached.Load(), "a script reached a host not allowed")
}
