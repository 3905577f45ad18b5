// Package portable_test shows, on this root, cgroup v1 machine, that the
// suites gated on root or cgroup v1 pass elsewhere: each test binary runs
// again as a user that is not root (uid 65534, no capabilities), and as root
// on a cgroup v2 host (a cgroup2 mount on /sys/fs/cgroup in a mount
// namespace of its own). It must end 0, with what it could not check
// skipped and said so (harness.Need), and nothing failed.
package portable_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fnrunner/fnrunner/tests/harness"
)

// suites are the test binaries with tests behind harness.NeedRoot or
// NeedCgroupV1 (the environment variables naming their runfiles), with the
// reasons their skips must give as a user that is not root and on cgroup
// v2. A suite whose every test needs root skips them all.
var suites = []struct {
	env            string
	nonRoot, cgrV2 string
}{
	{"PORTABLE_NODE_TEST", "needs root", "needs cgroup v1"},
	{"PORTABLE_SANDBOX_TEST", "needs root", ""},
	{"PORTABLE_FNSANDBOX_TEST", "needs root", ""},
	{"PORTABLE_MEMLIMIT_TEST", "needs root", "needs cgroup v1"},
	{"PORTABLE_GATEWAY_TEST", "needs root", "needs cgroup v1"},
}

// asNobody is a shell script that runs "$@" as uid 65534 without
// capabilities, in a mount namespace where /root (0700 here, and on the
// path of Bazel's output base) is a tmpfs holding only the real .cache:
// what a user's own checkout and cache would be to that user.
const asNobody = `set -e
real=$(mktemp -d)
mount --bind /root "$real"
mount -t tmpfs -o mode=0755 portable /root
mkdir /root/.cache
mount --bind "$real/.cache" /root/.cache
exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all --bounding-set=-all -- "$@"`

// onCgroupV2 runs "$@" as root with a cgroup2 hierarchy on /sys/fs/cgroup.
const onCgroupV2 = `set -e
mount -t cgroup2 portable /sys/fs/cgroup
exec "$@"`

func TestSuitesSkipWhatTheyCannotCheck(t *testing.T) {
	harness.NeedRoot(t, "running suites as another user and on cgroup v2")
	for _, s := range suites {
		bin := harness.Binary(t, s.env)
		name := filepath.Base(bin)
		for _, run := range []struct {
			how, script, reason string
		}{
			{"not root", asNobody, s.nonRoot},
			{"cgroup v2", onCgroupV2, s.cgrV2},
		} {
			t.Run(name+"/"+run.how, func(t *testing.T) {
				// Below /tmp: the test's own TempDir is in a directory
				// only root may enter.
				home, err := os.MkdirTemp("/tmp", "portable-")
				require.NoError(t, err)
				t.Cleanup(func() { _ = os.RemoveAll(home) })
				require.NoError(t, os.Chmod(home, 0o777))
				cmd := exec.Command("unshare", "--mount", "--propagation", "private", "--", "sh", "-c", run.script, "sh", bin)
				cmd.Dir = filepath.Dir(bin)
				cmd.Env = childEnv(home)
				out, err := cmd.CombinedOutput()
				text := string(out)
				require.NoError(t, err, "%s as %s:\n%s", name, run.how, tail(text))
				assert.NotContains(t, text, "--- FAIL")
				if run.reason != "" {
					assert.Contains(t, text, "FNRUNNER_SKIPPED", "a skip said so")
					assert.Contains(t, text, run.reason)
				}
			})
		}
	}
}

// childEnv is this test's environment for a suite run again: its runfiles
// variables, with a home and temporary directory any user may write, and
// without harness.RequireAllEnv (the skips are the point).
func childEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case harness.RequireAllEnv, "HOME", "TMPDIR", "TEST_TMPDIR", "XDG_CACHE_HOME":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "HOME="+home, "TMPDIR="+home, "TEST_TMPDIR="+home, "XDG_CACHE_HOME="+filepath.Join(home, ".cache"))
}

func tail(s string) string {
	if len(s) > 8000 {
		return "…" + s[len(s)-8000:]
	}
	return s
}
