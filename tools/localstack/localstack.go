// Package localstack runs fnrunner's services as processes on loopback: a
// config-reconciler (reading FunctionConfig files, or a cluster), a
// binary-runner with a functions directory, a pod-manager, and a gateway in
// front of them. It backs the README's run command (tools/local), the bench
// (tools/bench) and the tests that run the real binaries (tests/stack,
// tests/pods). Any service can be stopped, killed, restarted with other
// flags, or started again as another replica.
package localstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Binaries are the service executables. Gateway and ConfigReconciler are
// always run; BinaryRunner and PodManager when set. WrapperServer is not
// run by Start: it runs inside function pods (tests/kubelet starts one per
// pod, with the pod's args, as a node does); StartWrapperServer runs one on
// its own.
// Fnsandbox, when set, is the binary-runner's and the wrapper-server's
// --sandbox-helper.
type Binaries struct {
	Gateway, BinaryRunner, ConfigReconciler string
	PodManager, WrapperServer               string
	Fnsandbox                               string
}

// Config says what to run.
type Config struct {
	Binaries Binaries
	// ConfigDir holds the FunctionConfig files (the reconciler's --config-dir).
	// Empty: none is given, and ConfigReconcilerArgs say where the
	// FunctionConfigs come from (e.g. --kubeconfig).
	ConfigDir string
	// FunctionsDir holds the function binaries (the binary-runner's --functions).
	FunctionsDir string
	// GatewayPort is where porch (or fnctl) connects; 0 picks a free port.
	GatewayPort int
	// LogLevel of every service (default WARN).
	LogLevel string
	// Output, if set, also gets every service's log lines, prefixed by its name.
	Output io.Writer
	// GatewayArgs, BinaryRunnerArgs, ConfigReconcilerArgs and PodManagerArgs
	// are added to those services' flags.
	GatewayArgs, BinaryRunnerArgs, ConfigReconcilerArgs, PodManagerArgs []string
	// InternalArgs are added to every service started by Start (e.g. the
	// --tls-* flags).
	InternalArgs []string
}

// NoBinaryRunner is the gateway's --binary-runner-address when no
// binary-runner runs: nothing listens on port 1.
const NoBinaryRunner = "127.0.0.1:1"

// Stack is the running services.
type Stack struct {
	// GatewayAddress is the gateway's host:port.
	GatewayAddress string
	// ConfigAddress is the config-reconciler's host:port.
	ConfigAddress string
	// PodManagerAddress is the pod-manager's host:port, if one runs.
	PodManagerAddress string
	// BinaryRunnerAddress is the binary-runner's host:port, if one runs.
	BinaryRunnerAddress string
	cfg                 Config
	procs               []*process
}

type process struct {
	name string
	bin  string
	// fixed are the flags localstack gives (port, addresses, log level);
	// args are the caller's. Restart keeps both; Replace changes args.
	fixed, args []string
	// address is where it serves gRPC health, if it does.
	address string
	cmd     *exec.Cmd
	out     *LogBuffer
	// killed: stopped by Kill, so a non-zero exit is expected.
	killed bool
	done   chan error
}

// FreeAddress returns a loopback host:port that nothing listens on now, for
// a service started next. It is picked below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range), so that no process's outgoing connection
// can take the port before the service binds it, as a port the kernel hands
// out for ":0" can be; when the range leaves no room, the kernel picks.
// Processes on the machine that pick ports this way (tests run in
// parallel) never pick the same one: each reserves its ports, until it
// exits, with a lock (see reservePort).
func FreeAddress() (string, error) {
	low := ephemeralStart()
	for range 100 {
		if low <= 10000 {
			break
		}
		port := 10000 + rand.IntN(low-10000)
		if !reservePort(port) {
			continue // another process's
		}
		l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
		if err != nil {
			continue // taken: try another
		}
		l.Close()
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// portLocks is where processes picking ports with FreeAddress reserve
// them: a directory every test on the machine shares (/tmp, not a test's
// own temporary directory).
const portLocks = "/tmp/fnrunner-ports"

// reservePort reserves port for this process, until it exits, and says
// whether it could: an exclusive lock on a file named for the port, whose
// descriptor is never closed (a raw one: an os.File's finalizer would close
// it), so the kernel lets the lock go with the process. A port it cannot
// reserve (no directory, no file) is not handed out.
func reservePort(port int) bool {
	if err := os.MkdirAll(portLocks, 0o777|os.ModeSticky); err != nil {
		return false
	}
	_ = os.Chmod(portLocks, 0o777|os.ModeSticky) // every uid's tests share it, whatever the umask
	name := filepath.Join(portLocks, strconv.Itoa(port))
	if fd, err := syscall.Open(name, syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o444); err == nil {
		syscall.Close(fd) // made readable by all
	}
	fd, err := syscall.Open(name, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		syscall.Close(fd)
		return false
	}
	return true
}

// ephemeralStart is the first port of the kernel's ephemeral range (0 when
// it cannot be read).
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b))
	if len(fields) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(fields[0])
	return n
}

// portOf is the port of a host:port, for --port flags.
func portOf(address string) string {
	_, port, _ := net.SplitHostPort(address)
	return port
}

// Start starts the services and returns without waiting for them to be
// ready (see WaitServing). Call Stop (also after an error) to end them.
func Start(cfg Config) (*Stack, error) {
	if cfg.LogLevel == "" {
		cfg.LogLevel = "WARN"
	}
	s := &Stack{cfg: cfg}
	var err error
	if s.ConfigAddress, err = FreeAddress(); err != nil {
		return s, err
	}
	if cfg.GatewayPort == 0 {
		if s.GatewayAddress, err = FreeAddress(); err != nil {
			return s, err
		}
	} else {
		s.GatewayAddress = net.JoinHostPort("127.0.0.1", fmt.Sprint(cfg.GatewayPort))
	}
	reconciler := []string{"--port=" + portOf(s.ConfigAddress)}
	if cfg.ConfigDir != "" {
		reconciler = append([]string{"--config-dir=" + cfg.ConfigDir}, reconciler...)
	}
	if err := s.start("config-reconciler", cfg.Binaries.ConfigReconciler, s.ConfigAddress,
		s.common(reconciler...), cfg.extra(cfg.ConfigReconcilerArgs)); err != nil {
		return s, err
	}
	runnerAddress := NoBinaryRunner
	if cfg.Binaries.BinaryRunner != "" {
		if runnerAddress, err = FreeAddress(); err != nil {
			return s, err
		}
		s.BinaryRunnerAddress = runnerAddress
		if err := s.start("binary-runner", cfg.Binaries.BinaryRunner, runnerAddress,
			s.binaryRunnerFlags(runnerAddress), cfg.extra(cfg.BinaryRunnerArgs)); err != nil {
			return s, err
		}
	}
	var podManagers []string
	if cfg.Binaries.PodManager != "" {
		if s.PodManagerAddress, err = s.StartPodManager("pod-manager", cfg.extra(cfg.PodManagerArgs)...); err != nil {
			return s, err
		}
		podManagers = append(podManagers, s.PodManagerAddress)
	}
	return s, s.start("gateway", cfg.Binaries.Gateway, s.GatewayAddress,
		s.gatewayFlags(s.GatewayAddress, runnerAddress, podManagers), cfg.extra(cfg.GatewayArgs))
}

// extra are a service's own args after the ones every internal service gets.
func (c Config) extra(own []string) []string {
	return append(append([]string(nil), c.InternalArgs...), own...)
}

// gatewayFlags are a gateway's flags: its port, the config-reconciler, the
// binary-runner and the pod-manager replicas (none: no pod executor).
func (s *Stack) gatewayFlags(address, binaryRunner string, podManagers []string) []string {
	flags := []string{"--port=" + portOf(address), "--health-interval=100ms",
		"--config-address=" + s.ConfigAddress, "--binary-runner-address=" + binaryRunner}
	if len(podManagers) > 0 {
		flags = append(flags, "--pod-manager-address="+strings.Join(podManagers, ","))
	}
	return s.common(flags...)
}

// sandboxFlags name the fnsandbox helper to a function runner, when the
// stack has one.
func (s *Stack) sandboxFlags() []string {
	if s.cfg.Binaries.Fnsandbox == "" {
		return nil
	}
	return []string{"--sandbox-helper=" + s.cfg.Binaries.Fnsandbox}
}

// common adds the flags every service gets to flags: each listens on
// loopback alone (FreeAddress's host), where the stack dials it.
func (s *Stack) common(flags ...string) []string {
	return append(flags, "--listen-host=127.0.0.1", "--metrics-address=", "--log-level="+s.cfg.LogLevel)
}

// StartPodManager starts a pod-manager named name (e.g. "pod-manager-1",
// another replica) on a free port, reading the config-reconciler, with args
// (the caller's: --kubeconfig, --owner, ...) added, and returns its
// address. It does not wait for it to be ready (see WaitHealthy).
func (s *Stack) StartPodManager(name string, args ...string) (string, error) {
	address, err := FreeAddress()
	if err != nil {
		return "", err
	}
	return address, s.start(name, s.cfg.Binaries.PodManager, address,
		s.common("--port="+portOf(address), "--config-address="+s.ConfigAddress), args)
}

// StartBinaryRunner starts another binary-runner named name on a free port,
// reading the config-reconciler and the stack's functions directory, with
// args added, and returns its address. It does not wait for it to be ready
// (see WaitHealthy).
func (s *Stack) StartBinaryRunner(name string, args ...string) (string, error) {
	address, err := FreeAddress()
	if err != nil {
		return "", err
	}
	return address, s.start(name, s.cfg.Binaries.BinaryRunner, address, s.binaryRunnerFlags(address), args)
}

// binaryRunnerFlags are a binary-runner's flags: its port, the stack's
// functions directory, the config-reconciler and the sandbox helper.
func (s *Stack) binaryRunnerFlags(address string) []string {
	return s.common(append(s.sandboxFlags(), "--functions="+s.cfg.FunctionsDir, "--port="+portOf(address), "--config-address="+s.ConfigAddress)...)
}

// StartWrapperServer starts a wrapper-server named name on a free loopback
// port that runs entrypoint once per call, as in a function pod, with args
// added before "--", and returns its address. It does not wait for it to be
// ready (see WaitHealthy).
func (s *Stack) StartWrapperServer(name string, entrypoint []string, args ...string) (string, error) {
	address, err := FreeAddress()
	if err != nil {
		return "", err
	}
	return address, s.start(name, s.cfg.Binaries.WrapperServer, address,
		s.common(append(s.sandboxFlags(), "--port="+portOf(address))...), append(append([]string(nil), args...), append([]string{"--"}, entrypoint...)...))
}

// StartGateway starts another gateway named name on a free port, reading
// the config-reconciler, in front of the given pod-manager replicas (and no
// binary-runner), with args added, and returns its address. It does not
// wait for it to be ready (see WaitHealthy).
func (s *Stack) StartGateway(name string, podManagers []string, args ...string) (string, error) {
	address, err := FreeAddress()
	if err != nil {
		return "", err
	}
	return address, s.start(name, s.cfg.Binaries.Gateway, address, s.gatewayFlags(address, NoBinaryRunner, podManagers), args)
}

// WaitServing waits until the gateway's health says SERVING, a service
// exits, or ctx ends.
func (s *Stack) WaitServing(ctx context.Context) error { return s.WaitHealthy(ctx, "gateway") }

// WaitHealthy waits until the health of the service named name says
// SERVING, a service exits, or ctx ends.
func (s *Stack) WaitHealthy(ctx context.Context, name string) error {
	p, err := s.find(name)
	if err != nil {
		return err
	}
	conn, err := grpc.NewClient(p.address, grpc.WithTransportCredentials(insecure.NewCredentials()))
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
			return fmt.Errorf("%s not SERVING (last: %v, %v): %w", name, resp.GetStatus(), err, ctx.Err())
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

// Log returns one service's output (of every run, if it was restarted).
func (s *Stack) Log(name string) string {
	p, err := s.find(name)
	if err != nil {
		return err.Error()
	}
	return p.out.String()
}

// StopService sends SIGTERM to one service (e.g. "gateway", "binary-runner"
// or "config-reconciler") and waits for it to exit; a non-zero exit is an
// error. The service is no longer part of the stack.
func (s *Stack) StopService(name string, timeout time.Duration) error {
	for i, p := range s.procs {
		if p.name != name {
			continue
		}
		s.procs = append(s.procs[:i:i], s.procs[i+1:]...)
		return p.terminate(timeout)
	}
	return fmt.Errorf("no service %q", name)
}

// Replace stops one service as StopService does, then starts it again with
// the same port and addresses but with args in place of the caller's flags
// it had.
func (s *Stack) Replace(name string, timeout time.Duration, args ...string) error {
	p, err := s.find(name)
	if err != nil {
		return err
	}
	if err := s.StopService(name, timeout); err != nil {
		return err
	}
	return s.startWith(p.name, p.bin, p.address, p.out, p.fixed, args)
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
		return s.startWith(p.name, p.bin, p.address, p.out, p.fixed, p.args)
	}
	return fmt.Errorf("no service %q", name)
}

// WaitExit waits for a service to end of its own accord (a crash) and
// returns how it ended; Restart starts it again.
func (s *Stack) WaitExit(ctx context.Context, name string) (*os.ProcessState, error) {
	p, err := s.find(name)
	if err != nil {
		return nil, err
	}
	select {
	case err := <-p.done:
		p.done <- err
		return p.cmd.ProcessState, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%s still running: %w", name, ctx.Err())
	}
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
		if err := s.procs[i].terminate(timeout); err != nil {
			errs = append(errs, err)
		}
	}
	s.procs = nil
	return errors.Join(errs...)
}

// terminate sends SIGTERM and waits for a clean exit; a process killed on
// purpose (Kill) and not restarted may exit as it did.
func (p *process) terminate(timeout time.Duration) error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.done <- err
		if err != nil && !p.killed {
			return fmt.Errorf("%s did not exit cleanly on SIGTERM: %w\n%s", p.name, err, p.out.String())
		}
		return nil
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		return fmt.Errorf("%s did not stop within %v of SIGTERM\n%s", p.name, timeout, p.out.String())
	}
}

// start runs a service: fixed are localstack's flags, args the caller's.
func (s *Stack) start(name, bin, address string, fixed, args []string) error {
	if _, err := s.find(name); err == nil {
		return fmt.Errorf("a service %q is already running", name)
	}
	return s.startWith(name, bin, address, &LogBuffer{prefix: name + ": ", echo: s.cfg.Output}, fixed, args)
}

func (s *Stack) startWith(name, bin, address string, out *LogBuffer, fixed, args []string) error {
	cmd := exec.Command(bin, append(append([]string(nil), fixed...), args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, bin: bin, fixed: fixed, args: args, address: address, cmd: cmd, out: out, done: make(chan error, 1)}
	go func() { p.done <- cmd.Wait() }()
	s.procs = append(s.procs, p)
	return nil
}

// LogBuffer keeps a process's output, written and read concurrently, and
// optionally echoes it, line-prefixed (the zero value echoes nothing).
type LogBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	prefix  string
	echo    io.Writer
	partial []byte
}

func (l *LogBuffer) Write(p []byte) (int, error) {
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

func (l *LogBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
