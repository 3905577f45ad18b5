package porch

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Gitea as porch's suites expect it (test/e2e/suiteutils): user nephio,
// password secret, on localhost:3000, with the repositories porch-test
// (one commit on main) and test-blueprints (porch's test bundle, every
// branch and tag), made as porch's scripts/install-dev-gitea-setup.sh makes
// them.
const (
	GiteaAddress  = "127.0.0.1:3000"
	giteaUser     = "nephio"
	giteaPassword = "secret"
)

// Gitea is a running Gitea.
type Gitea struct {
	dir string
	bin string
	ini string
	cmd *exec.Cmd
	log *lockedBuffer
}

// StartGitea writes a headless configuration (sqlite, no SSH, no mailer,
// offline) under dir, creates the user, starts the server and makes the
// two repositories. static is Gitea's STATIC_ROOT_PATH (its options and
// templates); bundle is porch's test-blueprints.bundle.
func StartGitea(ctx context.Context, bin, static, bundle, dir string) (*Gitea, error) {
	g := &Gitea{dir: dir, bin: bin, ini: filepath.Join(dir, "custom/conf/app.ini"), log: &lockedBuffer{}}
	for _, d := range []string{"custom/conf", "data", "repos", "log", "tmp", "home"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	secrets := map[string]string{}
	for _, s := range []string{"SECRET_KEY", "INTERNAL_TOKEN", "JWT_SECRET"} {
		out, err := g.command(ctx, "generate", "secret", s).Output()
		if err != nil {
			return nil, fmt.Errorf("gitea generate secret %s: %w", s, err)
		}
		secrets[s] = strings.TrimSpace(string(out))
	}
	if err := os.WriteFile(g.ini, []byte(giteaINI(dir, static, secrets)), 0o600); err != nil {
		return nil, err
	}
	for _, args := range [][]string{
		{"migrate"},
		{"admin", "user", "create", "--admin", "--username", giteaUser, "--password", giteaPassword, "--email", "gitea@local.domain", "--must-change-password=false"},
	} {
		if out, err := g.command(ctx, args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("gitea %s: %w: %s", args[0], err, out)
		}
	}
	g.cmd = g.command(context.Background(), "web")
	g.cmd.Stdout, g.cmd.Stderr = g.log, g.log
	if err := g.cmd.Start(); err != nil {
		return nil, fmt.Errorf("gitea web: %w", err)
	}
	if err := waitHTTP(ctx, "http://"+GiteaAddress+"/api/healthz", 2*time.Minute); err != nil {
		g.Stop()
		return nil, fmt.Errorf("gitea did not become healthy: %w\n%s", err, g.log.String())
	}
	if err := g.repositories(ctx, bundle); err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

// Stop stops Gitea.
func (g *Gitea) Stop() {
	if g.cmd == nil || g.cmd.Process == nil {
		return
	}
	_ = g.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = g.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = g.cmd.Process.Kill()
		<-done
	}
}

// Log is what Gitea's web server printed.
func (g *Gitea) Log() string { return g.log.String() }

func (g *Gitea) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.bin, append([]string{"--config", g.ini}, args...)...)
	cmd.Env = append(g.env(), "GITEA_WORK_DIR="+g.dir, "GITEA_CUSTOM="+filepath.Join(g.dir, "custom"), "GITEA_TEMP="+filepath.Join(g.dir, "tmp"),
		// Gitea refuses root unless told.
		"GITEA_I_AM_BEING_UNSAFE_RUNNING_AS_ROOT=true")
	return cmd
}

// env is what Gitea and git run with: no system or user git configuration.
func (g *Gitea) env() []string {
	return []string{"PATH=" + os.Getenv("PATH"), "HOME=" + filepath.Join(g.dir, "home"), "TMPDIR=" + filepath.Join(g.dir, "tmp"),
		"GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0"}
}

// repositories makes porch-test and test-blueprints as porch's
// install-dev-gitea-setup.sh does.
func (g *Gitea) repositories(ctx context.Context, bundle string) error {
	for _, name := range []string{"porch-test", "test-blueprints"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+GiteaAddress+"/api/v1/user/repos", strings.NewReader(fmt.Sprintf(`{"name":%q}`, name)))
		if err != nil {
			return err
		}
		req.SetBasicAuth(giteaUser, giteaPassword)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("creating %s: %w", name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			return fmt.Errorf("creating %s: %s", name, resp.Status)
		}
	}
	remote := func(name string) string {
		return fmt.Sprintf("http://%s:%s@localhost:3000/%s/%s.git", giteaUser, giteaPassword, giteaUser, name)
	}
	work := filepath.Join(g.dir, "work")
	author := []string{"-c", "user.name=" + giteaUser, "-c", "user.email=" + giteaUser + "@local.domain"}
	steps := []struct {
		dir  string
		args []string
	}{
		{g.dir, []string{"clone", "-q", remote("porch-test"), filepath.Join(work, "porch-test")}},
		{filepath.Join(work, "porch-test"), []string{"switch", "-q", "-c", "main"}},
		{filepath.Join(work, "porch-test"), []string{"commit", "-q", "--allow-empty", "-m", "first commit"}},
		{filepath.Join(work, "porch-test"), []string{"push", "-q", "-u", "origin", "main"}},
		{g.dir, []string{"clone", "-q", bundle, "-b", "main", filepath.Join(work, "test-blueprints")}},
		{filepath.Join(work, "test-blueprints"), []string{"remote", "rename", "origin", "upstream"}},
		{filepath.Join(work, "test-blueprints"), []string{"remote", "add", "origin", remote("test-blueprints")}},
		{filepath.Join(work, "test-blueprints"), []string{"push", "-q", "-u", "origin", "--all"}},
		{filepath.Join(work, "test-blueprints"), []string{"push", "-q", "-u", "origin", "--tags"}},
	}
	for _, s := range steps {
		args := s.args
		if args[0] == "commit" {
			args = append(author, args...)
		}
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir, cmd.Env = s.dir, g.env()
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", strings.Join(s.args, " "), err, out)
		}
	}
	return os.RemoveAll(work)
}

func giteaINI(dir, static string, secrets map[string]string) string {
	return fmt.Sprintf(`APP_NAME = porch-e2e
RUN_USER = %s
RUN_MODE = prod
WORK_PATH = %s
I_AM_BEING_UNSAFE_RUNNING_AS_ROOT = true

[server]
PROTOCOL = http
HTTP_ADDR = 127.0.0.1
HTTP_PORT = 3000
DOMAIN = localhost
ROOT_URL = http://localhost:3000/
APP_DATA_PATH = %[2]s/data
STATIC_ROOT_PATH = %[3]s
DISABLE_SSH = true
START_SSH_SERVER = false
LFS_START_SERVER = false
OFFLINE_MODE = true

[database]
DB_TYPE = sqlite3
PATH = %[2]s/data/gitea.db
SQLITE_JOURNAL_MODE = WAL

[repository]
ROOT = %[2]s/repos
ENABLE_PUSH_CREATE_USER = true
ENABLE_PUSH_CREATE_ORG = true
DEFAULT_BRANCH = main

[security]
INSTALL_LOCK = true
SECRET_KEY = %[4]s
INTERNAL_TOKEN = %[5]s
PASSWORD_COMPLEXITY = off
MIN_PASSWORD_LENGTH = 6

[oauth2]
ENABLED = false
JWT_SECRET = %[6]s

[service]
DISABLE_REGISTRATION = true
ENABLE_NOTIFY_MAIL = false

[mailer]
ENABLED = false

[cache]
ADAPTER = memory

[session]
PROVIDER = memory

[indexer]
ISSUE_INDEXER_TYPE = db
REPO_INDEXER_ENABLED = false

[actions]
ENABLED = false

[packages]
ENABLED = false

[picture]
DISABLE_GRAVATAR = true
ENABLE_FEDERATED_AVATAR = false

[cron]
ENABLED = false

[cron.update_checker]
ENABLED = false

[log]
MODE = console
LEVEL = warn
ROOT_PATH = %[2]s/log
`, currentUser(), dir, static, secrets["SECRET_KEY"], secrets["INTERNAL_TOKEN"], secrets["JWT_SECRET"])
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	if os.Geteuid() == 0 {
		return "root"
	}
	return fmt.Sprint(os.Geteuid())
}

// waitHTTP polls url until it answers 200.
func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", url, last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
