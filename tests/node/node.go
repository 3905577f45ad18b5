// Package node runs a real Kubernetes node for tests, on this machine: etcd
// and kube-apiserver (envtest's), kube-controller-manager, kube-scheduler,
// kubelet, kube-proxy and CoreDNS (the cluster DNS) built from the Go module
// proxy, and Debian's containerd, runc, CNI plugins and iptables unpacked
// into a private directory (never installed).
//
// Everything the node does happens in namespaces the test creates and
// removes: one network namespace holds the node's processes, its bridge, its
// pods' addresses and its Service rules, joined to the test's network
// namespace by one veth pair with a /30 (the only route out of the node; no
// default route, so no pod reaches an address outside); one mount namespace
// holds its mounts (pod volumes, container root filesystems, /var/log/pods),
// so that they vanish with its processes; its cgroups live under one cgroup
// of their own, removed at the end. kube-apiserver and etcd run in the
// test's network namespace on the host end of the veth, where the test's
// clients and the node's processes both reach them.
package node

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/fnrunner/fnrunner/tests/harness"
	"github.com/fnrunner/fnrunner/tests/kubetest"
)

// The node's address plan. The veth's /30 is the only link between the
// node and the test; pods and Services are addressed inside the node.
const (
	PodCIDR     = "10.198.0.0/16"
	ServiceCIDR = "10.197.0.0/16"
	// ServiceAPIAddress is the kubernetes Service's address, the first of
	// ServiceCIDR.
	ServiceAPIAddress = "10.197.0.1"
	// ClusterDomain is the kubelet's --cluster-domain.
	ClusterDomain = "cluster.local"
)

// Node is a running node and its control plane.
type Node struct {
	// Name is the Node object's name.
	Name string
	// Kube is the control plane: kube-apiserver and etcd.
	Kube *kubetest.Environment
	// Registry is host:port of a plain-HTTP registry the node pulls from
	// (go-containerregistry's, on the host end of the veth).
	Registry string
	// HostIP is the test's end of the veth; NodeIP the node's.
	HostIP, NodeIP string

	dir     string
	id      string
	netns   string
	veth    string
	holder  *exec.Cmd
	procs   []*process
	stopped bool
	// before is the host's state the node must not change (hostState).
	before map[string]string
}

// hostState is what of the host a node could change by mistake: the kernel
// parameters kubelet wants set, and whether the paths kubelet and
// containerd write to by default exist.
func hostState() map[string]string {
	st := map[string]string{}
	for _, k := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes"} {
		b, _ := os.ReadFile("/proc/sys/" + k)
		st["sysctl "+k] = strings.TrimSpace(string(b))
	}
	for _, p := range []string{"/var/lib/kubelet", "/usr/libexec/kubernetes", "/run/containerd", "/var/lib/cni", "/run/xtables.lock"} {
		_, err := os.Lstat(p)
		st["path "+p] = strconv.FormatBool(err == nil)
	}
	return st
}

// Options change the node's control plane.
type Options struct {
	// APIServerArgs are kube-apiserver flags beside the node's own (name
	// without dashes → value), e.g. the aggregation layer's.
	APIServerArgs map[string]string
	// CRDDirectoryPaths are CRD files or directories installed before
	// Start returns.
	CRDDirectoryPaths []string
}

// Start brings a node up, waits until it is Ready, and tears it down (and
// checks that nothing is left behind) when the test ends. It skips the test
// (harness.Need: fails it under harness.RequireAllEnv=1) when this machine
// cannot run a node: not root, or cgroup v2.
func Start(t testing.TB) *Node {
	t.Helper()
	return StartWith(t, Options{})
}

// StartWith is Start with opts.
func StartWith(t testing.TB, opts Options) *Node {
	t.Helper()
	// Network, mount and cgroup namespaces, containerd; kubelet runs on
	// cgroup v1 (these machines'): the node does not set up cgroup v2 yet.
	harness.NeedRoot(t, "a real node")
	harness.NeedCgroupV1(t, "a real node")
	bins := map[string]string{}
	for _, b := range []string{"KUBELET", "KUBE_PROXY", "KUBE_SCHEDULER", "KUBE_CONTROLLER_MANAGER", "COREDNS", "NODE_PAUSE"} {
		bins[b] = harness.Binary(t, "FNRUNNER_"+b)
	}
	// FNRUNNER_NODE_ROOT names usr/bin/containerd of the unpacked packages.
	containerd := harness.Binary(t, "FNRUNNER_NODE_ROOT")
	root := filepath.Dir(filepath.Dir(filepath.Dir(containerd)))
	for _, p := range []string{"usr/bin/containerd", "usr/sbin/runc", "usr/bin/containerd-shim-runc-v2", "usr/lib/cni/bridge", "usr/sbin/xtables-legacy-multi"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Fatalf("the node's packages at %s: %v", root, err)
		}
	}
	// A run killed before its cleanup (a timeout, a crash) leaves its node
	// behind; its processes are gone, so remove what they named.
	sweepStale(t)
	n := &Node{id: fmt.Sprintf("fnr%d", os.Getpid()), before: hostState()}
	n.Name = "node-" + n.id
	// A short directory: containerd's socket path must fit in 108 bytes.
	dir, err := os.MkdirTemp("", n.id+"-")
	if err != nil {
		t.Fatal(err)
	}
	n.dir = dir
	octet, err := freeOctet()
	if err != nil {
		t.Fatal(err)
	}
	n.HostIP, n.NodeIP = fmt.Sprintf("10.199.%d.1", octet), fmt.Sprintf("10.199.%d.2", octet)
	t.Cleanup(func() { n.teardown(t) })

	// iptables as Debian's alternatives would name it (the packages are
	// unpacked, not installed): the legacy backend, in the node's network
	// namespace only.
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"} {
		if err := os.Symlink(filepath.Join(root, "usr/sbin/xtables-legacy-multi"), filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := n.network(filepath.Join(bin, "iptables"), filepath.Join(root, "usr/lib/x86_64-linux-gnu")); err != nil {
		t.Fatalf("node network: %v", err)
	}
	n.Kube = n.startControlPlane(t, opts)
	// Registered after the control plane's: the node stops first, so that
	// kube-apiserver is not stopped with the node's watches open.
	t.Cleanup(n.stop)
	if n.Registry, err = n.registry(t); err != nil {
		t.Fatalf("registry: %v", err)
	}
	pauseImage := n.Registry + "/fnrunner/pause:1"
	if err := PushBinaryImage(pauseImage, bins["NODE_PAUSE"], "/pause", []string{"/pause"}, nil); err != nil {
		t.Fatalf("pause image: %v", err)
	}
	if err := n.startHolder(); err != nil {
		t.Fatalf("node namespaces: %v", err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(kubeconfig, n.Kube.KubeConfig, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ca, n.Kube.Config.CAData, 0o644); err != nil {
		t.Fatal(err)
	}
	env := []string{
		"PATH=" + bin + ":" + filepath.Join(root, "usr/bin") + ":" + filepath.Join(root, "usr/sbin") + ":/usr/sbin:/usr/bin:/sbin:/bin",
		"LD_LIBRARY_PATH=" + filepath.Join(root, "usr/lib/x86_64-linux-gnu"),
		"XTABLES_LIBDIR=" + filepath.Join(root, "usr/lib/x86_64-linux-gnu/xtables"),
	}
	sock := filepath.Join(dir, "containerd.sock")
	if err := n.writeContainerdConfig(root, pauseImage, sock); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name string
		args []string
	}{
		{"containerd", []string{containerd, "--config", filepath.Join(dir, "containerd.toml")}},
		{"kube-controller-manager", []string{bins["KUBE_CONTROLLER_MANAGER"],
			"--kubeconfig=" + kubeconfig, "--leader-elect=false", "--root-ca-file=" + ca, "--controllers=*,-serviceaccount-token,-csrsigning,-csrapproving,-nodeipam",
			"--bind-address=" + n.NodeIP, "--use-service-account-credentials=false", "--cluster-name=" + n.id,
			"--flex-volume-plugin-dir=" + filepath.Join(dir, "volume-plugins")}},
		// The cluster DNS, on the node's address: Services and their
		// endpoints only (no forward: nothing outside the node is asked).
		{"coredns", []string{bins["COREDNS"], "-conf", filepath.Join(dir, "Corefile")}},
		{"kube-scheduler", []string{bins["KUBE_SCHEDULER"], "--kubeconfig=" + kubeconfig, "--leader-elect=false", "--bind-address=" + n.NodeIP}},
		{"kubelet", []string{bins["KUBELET"], "--config=" + filepath.Join(dir, "kubelet.yaml"), "--kubeconfig=" + kubeconfig,
			"--hostname-override=" + n.Name, "--node-ip=" + n.NodeIP, "--root-dir=" + filepath.Join(dir, "kubelet"),
			"--cert-dir=" + filepath.Join(dir, "kubelet-pki")}},
		{"kube-proxy", []string{bins["KUBE_PROXY"], "--config=" + filepath.Join(dir, "kube-proxy.yaml")}},
	}
	if err := n.writeKubeletConfig(sock); err != nil {
		t.Fatal(err)
	}
	corefile := fmt.Sprintf(".:53 {\n    bind %s\n    errors\n    kubernetes %s {\n        kubeconfig %s\n    }\n}\n", n.NodeIP, ClusterDomain, kubeconfig)
	if err := os.WriteFile(filepath.Join(dir, "Corefile"), []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := n.makeCgroups(); err != nil {
		t.Fatalf("the node's cgroup: %v", err)
	}
	if err := n.writeKubeProxyConfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, s := range steps {
		p, err := n.start(s.name, s.args, env)
		if err != nil {
			t.Fatalf("starting %s: %v", s.name, err)
		}
		if s.name == "containerd" {
			if err := harness.Poll(30*time.Second, 250*time.Millisecond, func() error {
				if err := p.running(); err != nil {
					return err
				}
				_, err := os.Stat(sock)
				return err
			}); err != nil {
				t.Fatalf("containerd did not start: %v\n%s", err, p.tail())
			}
		}
	}
	if err := n.waitReady(3 * time.Minute); err != nil {
		t.Fatalf("node %s not Ready: %v\n%s", n.Name, err, n.logs())
	}
	return n
}

// startControlPlane starts kube-apiserver and etcd on the host's end of
// the veth.
func (n *Node) startControlPlane(t testing.TB, opts Options) *kubetest.Environment {
	t.Helper()
	args := map[string]string{
		"advertise-address":         n.HostIP,
		"service-cluster-ip-range":  ServiceCIDR,
		"allow-privileged":          "true",
		"enable-admission-plugins":  "ServiceAccount,NodeRestriction",
		"disable-admission-plugins": "",
	}
	maps.Copy(args, opts.APIServerArgs)
	return kubetest.Start(t, kubetest.Options{
		Address: n.HostIP,
		// Pods reach kube-apiserver through the kubernetes Service.
		ServingHosts:      []string{n.HostIP, ServiceAPIAddress, "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc." + ClusterDomain, "localhost", "127.0.0.1"},
		APIServerArgs:     args,
		CRDDirectoryPaths: opts.CRDDirectoryPaths,
	})
}

// network creates the node's network namespace and the veth pair, and
// drops in the namespace every packet that would leave it for anything but
// the test's end of the veth (iptables: the unpacked one; libs: its
// libraries).
func (n *Node) network(iptables, libs string) error {
	n.netns, n.veth = "fnrunner-"+n.id, n.id+"h"
	cmds := [][]string{
		{"ip", "netns", "add", n.netns},
		{"ip", "link", "add", n.veth, "type", "veth", "peer", "name", n.id + "n"},
		{"ip", "link", "set", n.id + "n", "netns", n.netns},
		{"ip", "addr", "add", n.HostIP + "/30", "dev", n.veth},
		{"ip", "link", "set", n.veth, "up"},
		{"ip", "-n", n.netns, "link", "set", "lo", "up"},
		{"ip", "-n", n.netns, "link", "set", n.id + "n", "name", "eth0"},
		{"ip", "-n", n.netns, "addr", "add", n.NodeIP + "/30", "dev", "eth0"},
		{"ip", "-n", n.netns, "link", "set", "eth0", "up"},
		// Service addresses are routed at the veth so that a node process
		// can connect to one (kube-proxy rewrites the destination after the
		// route is chosen); no packet leaves for them: kube-proxy's rules
		// answer every Service address.
		{"ip", "-n", n.netns, "route", "add", ServiceCIDR, "dev", "eth0"},
		{"ip", "netns", "exec", n.netns, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		// Pod addresses are routed to the node, as a cluster's control
		// plane reaches them: kube-apiserver's pods/proxy (porch's metrics
		// test scrapes through it). The route goes with the veth. Replaced,
		// not added: two nodes in one network namespace (node tests of two
		// runs) share the pod CIDR, and the newer one has it.
		{"ip", "route", "replace", PodCIDR, "via", n.NodeIP, "dev", n.veth},
	}
	for _, c := range cmds {
		if out, err := hostCommand(c[0], c[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(c, " "), err, out)
		}
	}
	for _, chain := range []string{"OUTPUT", "FORWARD"} {
		cmd := hostCommand("ip", "netns", "exec", n.netns, iptables, "-w", "-A", chain, "-o", "eth0", "!", "-d", n.HostIP, "-j", "DROP")
		// Its lock file too is the node's, not the host's /run/xtables.lock.
		cmd.Env = append(cmd.Env, "LD_LIBRARY_PATH="+libs, "XTABLES_LIBDIR="+filepath.Join(libs, "xtables"), "XTABLES_LOCKFILE="+filepath.Join(n.dir, "xtables.lock"))
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("dropping the node's traffic to other addresses (%s): %w: %s", chain, err, out)
		}
	}
	return nil
}

// sweepStale removes the nodes of runs whose test process is gone: their
// network namespace (fnrunner-fnr<pid>), veth and cgroups.
func sweepStale(t testing.TB) {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		pid, ok := strings.CutPrefix(e.Name(), "fnrunner-fnr")
		if !ok {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its test still runs
		}
		stale := &Node{id: "fnr" + pid, netns: e.Name(), veth: "fnr" + pid + "h"}
		t.Logf("removing the node a run (pid %s) left behind", pid)
		stale.killCgroups()
		_ = hostCommand("ip", "netns", "del", stale.netns).Run()
		_ = hostCommand("ip", "link", "del", stale.veth).Run()
		if err := stale.removeCgroups(); err != nil {
			t.Logf("stale node %s: %v", pid, err)
		}
	}
	// The files of nodes whose run is over (containerd's root with the
	// images): a run killed before its teardown left them, and a failed
	// run kept them to be looked at until this one.
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "fnr*-*"))
	for _, d := range dirs {
		pid, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(d), "fnr"), "-")
		if _, err := strconv.Atoi(pid); err != nil {
			continue // not a node's
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its test still runs
		}
		if err := os.RemoveAll(d); err != nil {
			t.Logf("stale node files %s: %v", d, err)
		}
	}
}

// freeOctet picks x for the veth's 10.199.x.0/30, one no address of this
// host is in.
func freeOctet() (int, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return 0, err
	}
	used := map[int]bool{}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ip4 := ipn.IP.To4(); ip4 != nil && ip4[0] == 10 && ip4[1] == 199 {
				used[int(ip4[2])] = true
			}
		}
	}
	start := os.Getpid() % 250
	for i := 0; i < 250; i++ {
		if o := (start+i)%250 + 1; !used[o] {
			return o, nil
		}
	}
	return 0, errors.New("no free 10.199.x.0/30 for the node's veth")
}

// hostPath is where the host's tools (ip, nsenter, unshare, mount, sysctl)
// are found: Bazel's strict action environment leaves the sbin directories
// out of PATH.
const hostPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostCommand is exec.Command with the host's tools on hostPath.
func hostCommand(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	for _, dir := range filepath.SplitList(hostPath) {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			cmd.Path, cmd.Err = p, nil
			break
		}
	}
	// The last PATH wins.
	cmd.Env = append(os.Environ(), "PATH="+hostPath)
	return cmd
}

// registry serves go-containerregistry's registry over plain HTTP on the
// host end of the veth.
func (n *Node) registry(t testing.TB) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(n.HostIP, "0"))
	if err != nil {
		return "", err
	}
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	// Only the test pushes (from its end of the veth); the node and its
	// pods (masqueraded to the node's address) pull.
	guard := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		read := r.Method == http.MethodGet || r.Method == http.MethodHead
		if host != n.HostIP && !(read && host == n.NodeIP) {
			http.Error(w, "denied", http.StatusForbidden)
			return
		}
		reg.ServeHTTP(w, r)
	})
	srv := &http.Server{Handler: guard, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String(), nil
}

// startHolder starts the process that holds the node's namespaces: in its
// network namespace, a private mount namespace with the node's own
// /var/log, /var/lib/cni and /run/netns (pod network namespaces) mounted
// over the host's. Every node process joins it (nsenter).
func (n *Node) startHolder() error {
	for _, d := range []string{"var-log"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	// A sysfs of the node's network namespace (its interfaces under
	// /sys/class/net), with the host's cgroup hierarchies kept at
	// /sys/fs/cgroup (a fresh sysfs has none).
	//
	// kubelet writes below /var/lib/kubelet and /run whatever its flags
	// say, and containerd's shims below /run/containerd: a tmpfs over /run
	// and /var/lib keeps them off the host. kubelet also sets six kernel
	// parameters that are the host's, not the namespace's (vm.overcommit_memory,
	// kernel.panic, ...): files holding the values it wants are mounted over
	// them, so it finds them set (protectKernelDefaults makes it check, not
	// write) and the host's stay as they are.
	script := `set -e
dir=$1
mount --make-rprivate /
mkdir -p "$dir/cgroup"
mount --rbind /sys/fs/cgroup "$dir/cgroup"
mount -t sysfs sysfs /sys
mount --rbind "$dir/cgroup" /sys/fs/cgroup
umount -l "$dir/cgroup"
mount --bind "$dir/var-log" /var/log
mount -t tmpfs -o mode=0755 tmpfs /run
mount -t tmpfs -o mode=0755 tmpfs /var/lib
mkdir -p "$dir/sysctl"
for kv in vm/overcommit_memory=1 vm/panic_on_oom=0 kernel/panic=10 kernel/panic_on_oops=1 kernel/keys/root_maxkeys=1000000 kernel/keys/root_maxbytes=25000000; do
  k=${kv%%=*}; f="$dir/sysctl/$(echo "$k" | tr / _)"
  echo "${kv#*=}" > "$f"
  mount --bind -o ro "$f" "/proc/sys/$k"
done
echo ready
exec sleep infinity
`
	cmd := hostCommand("nsenter", "--net="+filepath.Join("/run/netns", n.netns), "--", "unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", n.dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	n.holder = cmd
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		return fmt.Errorf("namespace holder: %q %v: %s", line, err, stderr.String())
	}
	return nil
}

// process is one node process and its log.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	// exited is closed once the process has exited (err holds why).
	exited chan struct{}
	err    error
}

// running says why p is not running, or nil.
func (p *process) running() error {
	select {
	case <-p.exited:
		return fmt.Errorf("%s exited: %v", p.name, p.err)
	default:
		return nil
	}
}

func (p *process) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return fmt.Sprintf("--- %s (%s):\n%s", p.name, p.log, b)
}

// start starts a node process inside the holder's namespaces.
func (n *Node) start(name string, args, env []string) (*process, error) {
	logPath := filepath.Join(n.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	holder := strconv.Itoa(n.holder.Process.Pid)
	// nsenter, unshare and sh exec'd one into the next and into sleep, so
	// the holder's pid is the process that holds the namespaces.
	cmd := hostCommand("nsenter", append([]string{"--target", holder, "--mount", "--net", "--"}, args...)...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{name: name, cmd: cmd, log: logPath, exited: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	n.procs = append(n.procs, p)
	return p, nil
}

func (n *Node) logs() string {
	var b strings.Builder
	for _, p := range n.procs {
		b.WriteString(p.tail())
		b.WriteString("\n")
	}
	return b.String()
}

func (n *Node) waitReady(timeout time.Duration) error {
	return harness.Poll(timeout, 250*time.Millisecond, func() error {
		for _, p := range n.procs {
			if err := p.running(); err != nil {
				return err
			}
		}
		var node corev1.Node
		if err := n.Kube.Client.Get(context.Background(), client.ObjectKey{Name: n.Name}, &node); err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				if c.Status == corev1.ConditionTrue {
					return nil
				}
				//lint:ignore ST1005 Ready is the condition's name
				return fmt.Errorf("Ready %s: %s: %s", c.Status, c.Reason, c.Message)
			}
		}
		return errors.New("no Ready condition yet")
	})
}

// stop stops every node process, the containers included.
func (n *Node) stop() {
	if n.stopped {
		return
	}
	n.stopped = true
	// The pods' processes first: every process in the node's cgroups.
	n.killCgroups()
	for i := len(n.procs) - 1; i >= 0; i-- {
		p := n.procs[i]
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.exited
		}
	}
	// containerd's shims outlive it: they are found by the socket they were
	// started with.
	n.killShims()
	n.killCgroups()
	if n.holder != nil {
		_ = syscall.Kill(-n.holder.Process.Pid, syscall.SIGKILL)
		_ = n.holder.Wait()
	}
}

// teardown stops the node if it still runs, removes the network namespace,
// the veth and the cgroups, and checks that nothing is left.
func (n *Node) teardown(t testing.TB) {
	n.stop()
	if n.netns != "" {
		_ = hostCommand("ip", "netns", "del", n.netns).Run()
	}
	if n.veth != "" {
		_ = hostCommand("ip", "link", "del", n.veth).Run()
	}
	if err := n.removeCgroups(); err != nil {
		t.Errorf("removing the node's cgroups: %v", err)
	}
	if left := n.leftovers(); len(left) > 0 {
		t.Errorf("the node left behind: %s", strings.Join(left, "; "))
	}
	if !t.Failed() {
		_ = os.RemoveAll(n.dir)
	} else {
		t.Logf("node files kept in %s (the next node test removes them)", n.dir)
	}
}

// ContainerProcesses lists the pids of a container's processes (id is the
// runtime's container ID, without its "containerd://" scheme), found by
// their cgroups, which name the container.
func ContainerProcesses(id string) []int {
	var pids []int
	if id == "" {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err == nil && strings.Contains(string(cg), id) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// KillContainer SIGKILLs every process of a container, as the runtime (or
// the kernel's OOM killer taking its init) ends it, and returns how many it
// signalled.
func KillContainer(id string) int {
	pids := ContainerProcesses(id)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	return len(pids)
}

// PodLogs returns what a container of pod wrote, its restarts included:
// the kubelet's log files below the node's /var/log/pods.
func (n *Node) PodLogs(pod *corev1.Pod, container string) string {
	dir := filepath.Join(n.dir, "var-log", "pods", pod.Namespace+"_"+pod.Name+"_"+string(pod.UID), container)
	entries, _ := os.ReadDir(dir)
	var b strings.Builder
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		b.Write(data)
	}
	return b.String()
}
