// Package localstack runs fnrunner's three core services as processes on
// loopback: a config-reconciler reading FunctionConfig files, a
// binary-runner with a functions directory, and a gateway in front. It backs
// the README's run command (tools/local) and the end-to-end tests
// (tests/stack).
package localstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Binaries are the service executables.
type Binaries struct {
	Gateway, BinaryRunner, ConfigReconciler string
}

// Config says what to run.
type Config struct {
	Binaries Binaries
	// ConfigDir holds the FunctionConfig files (the reconciler's --config-dir).
	ConfigDir string
	// FunctionsDir holds the function binaries (the binary-runner's --functions).
	FunctionsDir string
	// GatewayPort is where porch (or fnctl) connects; 0 picks a free port.
	GatewayPort int
	// LogLevel of every service (default WARN).
	LogLevel string
	// Output, if set, also gets every service's log lines, prefixed by its name.
	Output io.Writer
	// GatewayArgs and BinaryRunnerArgs are added to those services' flags.
	GatewayArgs, BinaryRunnerArgs []string
	// InternalArgs are added to all three (e.g. the --tls-* flags).
	InternalArgs []string
}

// Stack is the running services.
type Stack struct {
	// GatewayAddress is the gateway's host:port.
	GatewayAddress string
	procs          []*process
}

type process struct {
	name string
	bin  string
	args []string
	cmd  *exec.Cmd
	out  *logBuffer
	// killed: stopped by Kill, so a non-zero exit is expected.
	killed bool
	done   chan error
}

// Start starts the services. Call Stop (also after an error) to end them.
func Start(cfg Config) (*Stack, error) {
	if cfg.LogLevel == "" {
		cfg.LogLevel = "WARN"
	}
	configPort, err := freePort()
	if err != nil {
		return nil, err
	}
	runnerPort, err := freePort()
	if err != nil {
		return nil, err
	}
	if cfg.GatewayPort == 0 {
		if cfg.GatewayPort, err = freePort(); err != nil {
			return nil, err
		}
	}
	loop := func(p int) string { return "127.0.0.1:" + strconv.Itoa(p) }
	s := &Stack{GatewayAddress: loop(cfg.GatewayPort)}
	common := append([]string{"--metrics-address=", "--log-level=" + cfg.LogLevel}, cfg.InternalArgs...)
	steps := []struct {
		name, bin string
		args      []string
	}{
		{"config-reconciler", cfg.Binaries.ConfigReconciler, append([]string{
			"--config-dir=" + cfg.ConfigDir, "--port=" + strconv.Itoa(configPort)}, common...)},
		{"binary-runner", cfg.Binaries.BinaryRunner, append(append([]string{
			"--functions=" + cfg.FunctionsDir, "--port=" + strconv.Itoa(runnerPort),
			"--config-address=" + loop(configPort)}, common...), cfg.BinaryRunnerArgs...)},
		{"gateway", cfg.Binaries.Gateway, append(append([]string{
			"--port=" + strconv.Itoa(cfg.GatewayPort), "--health-interval=100ms",
			"--config-address=" + loop(configPort), "--binary-runner-address=" + loop(runnerPort)}, common...), cfg.GatewayArgs...)},
	}
	for _, st := range steps {
		if err := s.start(st.name, st.bin, cfg.Output, st.args...); err != nil {
			return s, err
		}
	}
	return s, nil
}

// WaitServing waits until the gateway's health says SERVING, a service
// exits, or ctx ends.
func (s *Stack) WaitServing(ctx context.Context) error {
	conn, err := grpc.NewClient(s.GatewayAddress, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return nil
		}
		for _, p := range s.procs {
			select {
			case err := <-p.done:
				p.done <- err
				return fmt.Errorf("%s exited: %v\n%s", p.name, err, p.out.String())
			default:
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("gateway not SERVING (last: %v, %v): %w", resp.GetStatus(), err, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Logs returns every service's output.
func (s *Stack) Logs() string {
	var b strings.Builder
	for _, p := range s.procs {
		fmt.Fprintf(&b, "--- %s\n%s\n", p.name, p.out.String())
	}
	return b.String()
}

// StopService sends SIGTERM to one service ("gateway", "binary-runner" or
// "config-reconciler") and waits for it to exit.
func (s *Stack) StopService(name string, timeout time.Duration) error {
	for i, p := range s.procs {
		if p.name != name {
			continue
		}
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		s.procs = append(s.procs[:i:i], s.procs[i+1:]...)
		select {
		case err := <-p.done:
			return err
		case <-time.After(timeout):
			_ = p.cmd.Process.Kill()
			return fmt.Errorf("%s did not stop within %v of SIGTERM", name, timeout)
		}
	}
	return fmt.Errorf("no service %q", name)
}

// Kill sends SIGKILL to one service, as a crash or an OOM kill would, and
// waits for it to be gone; Restart starts it again.
func (s *Stack) Kill(name string) error {
	p, err := s.find(name)
	if err != nil {
		return err
	}
	p.killed = true
	_ = p.cmd.Process.Kill()
	err = <-p.done
	p.done <- err
	return nil
}

// Restart starts a service that was killed again, with the same flags (and
// so the same port).
func (s *Stack) Restart(name string) error {
	for i, p := range s.procs {
		if p.name != name {
			continue
		}
		select {
		case err := <-p.done:
			p.done <- err
		default:
			return fmt.Errorf("%s is still running", name)
		}
		s.procs = append(s.procs[:i:i], s.procs[i+1:]...)
		return s.startWith(p.name, p.bin, p.out, p.args...)
	}
	return fmt.Errorf("no service %q", name)
}

// Pid is the process id of a service, e.g. to read its /proc entries.
func (s *Stack) Pid(name string) (int, error) {
	p, err := s.find(name)
	if err != nil {
		return 0, err
	}
	return p.cmd.Process.Pid, nil
}

func (s *Stack) find(name string) (*process, error) {
	for _, p := range s.procs {
		if p.name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("no service %q", name)
}

// Stop sends SIGTERM to every service, the last started first, and reports
// any that did not exit cleanly within timeout.
func (s *Stack) Stop(timeout time.Duration) error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		p := s.procs[i]
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-p.done:
			if err != nil && p.killed {
				// A service killed on purpose (Kill) and not restarted.
				continue
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("%s did not exit cleanly on SIGTERM: %w\n%s", p.name, err, p.out.String()))
			}
		case <-time.After(timeout):
			_ = p.cmd.Process.Kill()
			errs = append(errs, fmt.Errorf("%s did not stop within %v of SIGTERM\n%s", p.name, timeout, p.out.String()))
		}
	}
	s.procs = nil
	return errors.Join(errs...)
}

func (s *Stack) start(name, bin string, echo io.Writer, args ...string) error {
	return s.startWith(name, bin, &logBuffer{prefix: name + ": ", echo: echo}, args...)
}

func (s *Stack) startWith(name, bin string, out *logBuffer, args ...string) error {
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, bin: bin, args: args, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	s.procs = append(s.procs, p)
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// logBuffer keeps a process's output and optionally echoes it, line-prefixed.
type logBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	prefix  string
	echo    io.Writer
	partial []byte
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Write(p)
	if l.echo != nil {
		l.partial = append(l.partial, p...)
		for {
			i := bytes.IndexByte(l.partial, '\n')
			if i < 0 {
				break
			}
			fmt.Fprintf(l.echo, "%s%s\n", l.prefix, l.partial[:i])
			l.partial = l.partial[i+1:]
		}
	}
	return len(p), nil
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
