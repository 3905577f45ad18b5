// Package kubelet plays the node for function pods in tests where there is
// no kubelet: for each pod it starts the real wrapper-server on its own
// 127.x.y.z address, running the real function binary that the pod's
// entrypoint names, then reports the pod Running and Ready with that IP and
// writes its EndpointSlice. It can fail pods (crash loop, image pull) instead.
// Everything above it, the pod-manager included, is production code.
package kubelet

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kubelet runs pods of one namespace.
type Kubelet struct {
	Client    client.Client
	Namespace string
	// WrapperServer is the wrapper-server binary.
	WrapperServer string
	// SandboxHelper, when set, is the fnsandbox helper each wrapper-server
	// gets (--sandbox-helper), as the image ships it beside the
	// wrapper-server; unset, the wrapper-servers run functions unsandboxed
	// (and log so).
	SandboxHelper string
	// WrapperArgs are added to every wrapper-server's flags, before the
	// pod's own (e.g. --sandbox-read-write-paths for a test's record
	// function).
	WrapperArgs []string
	// Entrypoints maps an image entrypoint (argv[0] after "--") to a local binary.
	Entrypoints map[string]string
	// Images are image configs by repository (an image without tag or
	// digest): their Env and WorkingDir are the container's, under the pod
	// spec's env, as a container runtime makes them. An image not here
	// runs with this process's environment and working directory.
	Images map[string]v1.Config

	mu      sync.Mutex
	next    int
	running map[string]*exec.Cmd // by pod name
	fail    map[string]string    // image substring → waiting reason
	failOne map[string]string    // the same, for the first such pod only
	// unschedulable and neverReady: image substrings whose pods are not
	// scheduled, or run without ever passing readiness.
	unschedulable, neverReady []string
	started                   []string // pods started, in order
}

// StartedPods returns the pods whose wrapper-server was started, in order.
func (k *Kubelet) StartedPods() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string(nil), k.started...)
}

// FailImages makes pods whose image contains substr fail with reason
// (CrashLoopBackOff, ImagePullBackOff, ErrImagePull, ...).
func (k *Kubelet) FailImages(substr, reason string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.fail == nil {
		k.fail = map[string]string{}
	}
	k.fail[substr] = reason
}

// FailFirstImage makes the first pod whose image contains substr fail with
// reason; later pods of that image run normally.
func (k *Kubelet) FailFirstImage(substr, reason string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.failOne == nil {
		k.failOne = map[string]string{}
	}
	k.failOne[substr] = reason
}

// Unschedulable leaves pods whose image contains substr unscheduled, as
// the scheduler reports a pod no node can take.
func (k *Kubelet) Unschedulable(substr string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.unschedulable = append(k.unschedulable, substr)
}

// NeverReady runs pods whose image contains substr without their readiness
// probe ever passing.
func (k *Kubelet) NeverReady(substr string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.neverReady = append(k.neverReady, substr)
}

// Run plays the node until ctx ends, then stops every wrapper-server.
func (k *Kubelet) Run(ctx context.Context) {
	defer k.stopAll()
	for {
		k.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Running returns the names of the pods that have a wrapper-server.
func (k *Kubelet) Running() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for n := range k.running {
		out = append(out, n)
	}
	return out
}

func (k *Kubelet) sync(ctx context.Context) {
	var pods corev1.PodList
	if err := k.Client.List(ctx, &pods, client.InNamespace(k.Namespace)); err != nil {
		return
	}
	live := map[string]bool{}
	for i := range pods.Items {
		p := &pods.Items[i]
		live[p.Name] = true
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodRunning || p.Status.Phase == corev1.PodFailed {
			continue
		}
		k.start(ctx, p)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, cmd := range k.running {
		if !live[name] {
			stop(cmd)
			delete(k.running, name)
		}
	}
}

func (k *Kubelet) start(ctx context.Context, p *corev1.Pod) {
	k.mu.Lock()
	if k.running == nil {
		k.running = map[string]*exec.Cmd{}
	}
	if _, ok := k.running[p.Name]; ok {
		k.mu.Unlock()
		return
	}
	k.next++
	// Loopback is 127.0.0.0/8: past 127.0.0.255 the addresses go on in
	// the next octets (a bench starts hundreds of pods; "127.0.0.256"
	// was no address, and those pods never became ready).
	n := 10 + k.next
	ip := fmt.Sprintf("127.%d.%d.%d", (n>>16)&0xff, (n>>8)&0xff, n&0xff)
	var reason string
	for substr, r := range k.fail {
		if strings.Contains(podImage(p), substr) {
			reason = r
		}
	}
	for substr, r := range k.failOne {
		if strings.Contains(podImage(p), substr) {
			reason = r
			delete(k.failOne, substr)
		}
	}
	unschedulable, neverReady := contains(k.unschedulable, podImage(p)), contains(k.neverReady, podImage(p))
	if unschedulable || neverReady {
		k.running[p.Name] = nil
	}
	k.mu.Unlock()

	switch {
	case unschedulable:
		// As the scheduler writes it; again on a conflict (the pod-manager
		// may have written the pod meanwhile).
		for range 20 {
			p.Status.Phase = corev1.PodPending
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/1 nodes are available: 1 Insufficient cpu.", LastTransitionTime: metav1.Now()}}
			err := k.Client.Status().Update(ctx, p)
			if err == nil || !apierrors.IsConflict(err) || k.Client.Get(ctx, client.ObjectKeyFromObject(p), p) != nil {
				return
			}
		}
		return
	case neverReady:
		k.setStatus(ctx, p, corev1.PodRunning, ip, false, nil)
		return
	}
	if reason != "" {
		k.setStatus(ctx, p, corev1.PodPending, "", false, &corev1.ContainerStateWaiting{Reason: reason, Message: "test kubelet: " + reason})
		k.mu.Lock()
		k.running[p.Name] = nil
		k.mu.Unlock()
		return
	}
	args, err := k.wrapperArgs(p, ip)
	if err != nil {
		k.setStatus(ctx, p, corev1.PodFailed, "", false, nil)
		return
	}
	cmd := exec.Command(k.WrapperServer, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	k.containerEnv(cmd, p, ip)
	if err := cmd.Start(); err != nil {
		k.setStatus(ctx, p, corev1.PodFailed, "", false, nil)
		return
	}
	k.mu.Lock()
	k.running[p.Name] = cmd
	k.started = append(k.started, p.Name)
	k.mu.Unlock()
	// Like a real kubelet, report Ready only once the readiness probe (the
	// template's gRPC probe on 9446) passes.
	if !probe(ctx, ip+":9446") {
		k.setStatus(ctx, p, corev1.PodRunning, ip, false, nil)
		return
	}
	k.setStatus(ctx, p, corev1.PodRunning, ip, true, nil)
	k.writeEndpointSlice(ctx, p, ip)
}

// wrapperArgs are the function container's args, with the entrypoint mapped
// to a local binary and the listeners bound to the pod's IP: the gRPC one,
// and the metrics one when the template gives one (":9094" becomes
// "<pod IP>:9094"; pods share this host's ports).
func (k *Kubelet) wrapperArgs(p *corev1.Pod, ip string) ([]string, error) {
	for _, c := range p.Spec.Containers {
		if c.Name != "function" {
			continue
		}
		args := []string{"--listen-host=" + ip, "--metrics-address="}
		if k.SandboxHelper != "" {
			args = append(args, "--sandbox-helper="+k.SandboxHelper)
		}
		args = append(append(args, k.WrapperArgs...), c.Args...)
		for i := 0; i < len(args) && args[i] != "--"; i++ {
			name, value, hasValue := strings.Cut(strings.TrimLeft(args[i], "-"), "=")
			switch {
			case name != "metrics-address" || !strings.HasPrefix(args[i], "-"):
			case hasValue:
				args[i] = "--metrics-address=" + onPodIP(value, ip)
			case i+1 < len(args):
				args[i+1] = onPodIP(args[i+1], ip)
			}
		}
		for i, a := range args {
			if a == "--" && i+1 < len(args) {
				local, ok := k.Entrypoints[args[i+1]]
				if !ok {
					return nil, fmt.Errorf("no local binary for entrypoint %q", args[i+1])
				}
				args[i+1] = local
				return args, nil
			}
		}
	}
	return nil, fmt.Errorf("pod %s has no function container with an entrypoint", p.Name)
}

// onPodIP binds a listen address on every interface (":9094",
// "0.0.0.0:9094", "[::]:9094") to the pod's IP.
func onPodIP(address, ip string) string {
	host, port, err := net.SplitHostPort(address)
	if err != nil || (host != "" && !net.ParseIP(host).IsUnspecified()) {
		return address
	}
	return net.JoinHostPort(ip, port)
}

func (k *Kubelet) setStatus(ctx context.Context, p *corev1.Pod, phase corev1.PodPhase, ip string, ready bool, waiting *corev1.ContainerStateWaiting) {
	now := metav1.Now()
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	p.Status.Phase = phase
	p.Status.PodIP = ip
	if ip != "" {
		p.Status.PodIPs = []corev1.PodIP{{IP: ip}}
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: status, LastTransitionTime: now}}
	cs := corev1.ContainerStatus{Name: "function", Image: podImage(p), Ready: ready}
	if waiting != nil {
		cs.State.Waiting = waiting
	} else {
		cs.State.Running = &corev1.ContainerStateRunning{StartedAt: now}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	_ = k.Client.Status().Update(ctx, p)
}

func (k *Kubelet) writeEndpointSlice(ctx context.Context, p *corev1.Pod, ip string) {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: p.Name + "-test", Namespace: p.Namespace, Labels: map[string]string{discoveryv1.LabelServiceName: p.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9446)}},
	}
	if err := k.Client.Create(ctx, es); err != nil && !apierrors.IsAlreadyExists(err) {
		return
	}
}

// containerEnv gives cmd the function container's environment and working
// directory: the image config's Env and WorkingDir, then the container's
// env (literal values) over them. An address of all a pod's interfaces
// (OTEL_EXPORTER_PROMETHEUS_HOST=0.0.0.0, porch's) becomes ip, the pod's
// own here: the pods share the host's network.
func (k *Kubelet) containerEnv(cmd *exec.Cmd, p *corev1.Pod, ip string) {
	image := podImage(p)
	// name[:tag][@digest]: the repository is what precedes both.
	repo, _, _ := strings.Cut(image, "@")
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	cfg, ok := k.Images[repo]
	if !ok {
		return
	}
	env := append([]string(nil), cfg.Env...)
	for _, c := range p.Spec.Containers {
		if c.Name != "function" {
			continue
		}
		for _, e := range c.Env {
			v := e.Value
			if e.Name == "OTEL_EXPORTER_PROMETHEUS_HOST" && (v == "0.0.0.0" || v == "::") {
				v = ip
			}
			env = append(env, e.Name+"="+v) // the later one wins, as in exec
		}
	}
	cmd.Env = env
	cmd.Dir = cfg.WorkingDir
}

func contains(substrs []string, s string) bool {
	for _, sub := range substrs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func podImage(p *corev1.Pod) string {
	for _, c := range p.Spec.Containers {
		if c.Name == "function" {
			return c.Image
		}
	}
	return ""
}

func (k *Kubelet) stopAll() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for name, cmd := range k.running {
		stop(cmd)
		delete(k.running, name)
	}
}

func stop(cmd *exec.Cmd) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
	}
}

// probe waits (bounded) for gRPC health SERVING at address.
func probe(ctx context.Context, address string) bool {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return false
	}
	defer conn.Close()
	hc := healthpb.NewHealthClient(conn)
	for i := 0; i < 500; i++ {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		r, err := hc.Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil && r.GetStatus() == healthpb.HealthCheckResponse_SERVING {
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}
