package grpcserving

import (
	"flag"
	"fmt"
	"log/slog"
	"sort"
	"strconv"
	"strings"
)

// porchFlag is one flag of porch's function-runner command line and the
// fnrunner services that act on it.
type porchFlag struct {
	name, owner string
	boolean     bool
	deprecated  bool
	// unsupported: no fnrunner service acts on it; owner says why.
	unsupported bool
}

// porchFlags are porch's function-runner flags (the runner porch-server
// calls, one process): every fnrunner service accepts all of them, so that
// an operator can give each the runner's whole command line.
func porchFlags() []porchFlag {
	return []porchFlag{
		{name: "port", owner: "gateway"},
		{name: "disable-runtimes", owner: "gateway"},
		{name: "default-image-prefix", owner: "config-reconciler"},
		{name: "functions", owner: "binary-runner"},
		{name: "kubeconfig", owner: "config-reconciler, pod-manager"},
		{name: "pod-namespace", owner: "pod-manager"},
		{name: "pod-ttl", owner: "pod-manager"},
		{name: "scan-interval", owner: "pod-manager"},
		{name: "warm-up-pod-cache", owner: "pod-manager", boolean: true},
		{name: "enable-private-registries", owner: "pod-manager", boolean: true},
		{name: "registry-auth-secret-path", owner: "pod-manager"},
		{name: "registry-auth-secret-name", owner: "pod-manager"},
		{name: "enable-private-registries-tls", owner: "pod-manager", boolean: true},
		{name: "tls-secret-path", owner: "pod-manager"},
		{name: "max-waitlist-length", owner: "pod-manager"},
		{name: "max-parallel-pods-per-function", owner: "pod-manager"},
		{name: "function-pod-template", owner: "function pods are made from ServiceTemplates (config.porch.kpt.dev/v1alpha1), not from a ConfigMap: the ConfigMap it names is not read; put its pod spec in a ServiceTemplate", unsupported: true},
		{name: "max-request-body-size", owner: "gateway, binary-runner and pod-manager (which passes it to every wrapper-server); the config-reconciler has its own --max-message-size"},
		{name: "config", owner: "no service (porch deprecated it; FunctionConfigs replace it: fnctl from-porch writes them from this file)", deprecated: true},
		{name: "pod-cache-config", owner: "no service (porch deprecated it; FunctionConfigs replace it: fnctl from-porch writes them from this file)", deprecated: true},
	}
}

// ignoredFlag is a porch flag this service does not own: accepted, and
// remembered so the service can say it ignored it.
type ignoredFlag struct {
	porch porchFlag
	into  *Flags
	value string
	set   bool
}

func (f *ignoredFlag) String() string { return f.value }

func (f *ignoredFlag) Set(v string) error {
	if !f.set {
		f.into.ignored = append(f.into.ignored, f.porch)
		f.set = true
	}
	f.value = v
	return nil
}

func (f *ignoredFlag) IsBoolFlag() bool { return f.porch.boolean }

// Parse parses args like the package's Parse, and also accepts every flag of
// porch's function-runner that fs does not define, ignoring it (say so with
// LogIgnoredPorchFlags once the service has its logger).
func (f *Flags) Parse(fs *flag.FlagSet, args []string) error {
	f.ignored = nil
	for _, p := range porchFlags() {
		if fs.Lookup(p.name) != nil {
			continue
		}
		usage := "Porch's function-runner flag, accepted and ignored here: the " + p.owner + " acts on it."
		switch {
		case p.deprecated:
			usage = "Porch's deprecated function-runner flag, accepted and ignored: " + p.owner + " acts on it."
		case p.unsupported:
			usage = "Porch's function-runner flag, accepted and ignored by every service: " + p.owner + "."
		}
		fs.Var(&ignoredFlag{porch: p, into: f}, p.name, usage)
	}
	return Parse(fs, args)
}

// LogIgnoredPorchFlags says, once, which of porch's flags the command line
// gave that this service ignores, and which service acts on each.
func (f *Flags) LogIgnoredPorchFlags(log *slog.Logger) {
	owners := map[string]string{}
	var names []string
	for _, p := range f.ignored {
		if p.deprecated {
			log.Warn("deprecated porch flag accepted and ignored", "flag", "--"+p.name, "why", p.owner)
			continue
		}
		if p.unsupported {
			log.Warn("porch flag accepted and ignored: no fnrunner service acts on it", "flag", "--"+p.name, "why", p.owner)
			continue
		}
		owners["--"+p.name] = p.owner
		names = append(names, "--"+p.name)
	}
	if len(names) == 0 {
		return
	}
	sort.Strings(names)
	log.Info("porch function-runner flags accepted and ignored by this service", "flags", strings.Join(names, " "), "ownedBy", owners)
}

// logLevel is --log-level: slog's names (DEBUG, INFO, WARN, ERROR) or
// porch's numbers 0–5 (0 ERROR, 1 WARN, 2 INFO, 3–5 DEBUG).
type logLevel struct{ level *slog.Level }

func (l logLevel) String() string {
	if l.level == nil {
		return slog.LevelInfo.String()
	}
	return l.level.String()
}

func (l logLevel) Set(v string) error {
	if n, err := strconv.Atoi(v); err == nil {
		switch {
		case n < 0 || n > 5:
			return fmt.Errorf("porch's log levels are 0 to 5, not %d", n)
		case n == 0:
			*l.level = slog.LevelError
		case n == 1:
			*l.level = slog.LevelWarn
		case n == 2:
			*l.level = slog.LevelInfo
		default:
			*l.level = slog.LevelDebug
		}
		return nil
	}
	return l.level.UnmarshalText([]byte(v))
}
