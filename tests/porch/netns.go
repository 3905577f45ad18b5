package porch

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// netnsEnv marks the copy of the test binary that runs inside the network
// namespace.
const netnsEnv = "FNRUNNER_PORCH_NETNS"

// InNetworkNamespace is the TestMain of a package whose tests run porch: it
// runs the tests in a network namespace of their own, with only loopback,
// so that the control plane, Gitea, porch and the runners talk on
// 127.0.0.1 ports nothing else on the machine uses, and nothing they send
// can leave the machine. The test binary runs itself again in a new
// namespace (root is needed to make one); without root the tests run here
// and skip (harness.NeedRoot), and fail under FNRUNNER_REQUIRE_ALL=1.
func InNetworkNamespace(m *testing.M) {
	if os.Getenv(netnsEnv) == "1" {
		if err := loopbackUp(); err != nil {
			fmt.Fprintf(os.Stderr, "network namespace: %v\n", err)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	if os.Geteuid() != 0 {
		os.Exit(m.Run())
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	// Its own network namespace; it dies with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "running the tests in a network namespace: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// InNamespace says whether this process is the copy in the namespace.
func InNamespace() bool { return os.Getenv(netnsEnv) == "1" }

// loopbackUp brings lo up: a new network namespace has it down.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	req, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, req); err != nil {
		return fmt.Errorf("lo's flags: %w", err)
	}
	req.SetUint16(req.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, req); err != nil {
		return fmt.Errorf("lo up: %w", err)
	}
	return nil
}
