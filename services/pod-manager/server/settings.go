package server

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/fnrunner/fnrunner/libs/apis/config/v1alpha1"
	"github.com/fnrunner/fnrunner/libs/executortable"
	"github.com/fnrunner/fnrunner/libs/templatemerge"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
	"github.com/fnrunner/fnrunner/services/pod-manager/podcache"
)

// errBadOverrides: a FunctionConfig's templateOverrides cannot be read.
var errBadOverrides = errors.New("templateOverrides")

// podSettings are one FunctionConfig's pod settings, decoded.
type podSettings struct {
	// function has the limits and TTL filled in (flag defaults where the
	// FunctionConfig gives none); Key and Spec are the call's.
	function      podcache.Function
	overrides     *v1alpha1.TemplateOverrides
	overridesHash string
	err           error
}

// settingsCache decodes each FunctionConfig's pod settings once per
// executor table, not once per call.
type settingsCache struct {
	mu     sync.Mutex
	tables *executortable.Tables
	byFC   map[*configpb.FunctionConfig]podSettings
}

// of returns fc's settings under tables (fc nil: an unclaimed image, which
// gets the flag defaults).
func (c *settingsCache) of(tables *executortable.Tables, fc *configpb.FunctionConfig, opts Options) (podSettings, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tables != tables {
		c.tables, c.byFC = tables, map[*configpb.FunctionConfig]podSettings{}
	}
	s, ok := c.byFC[fc]
	if !ok {
		s = decode(fc, opts)
		c.byFC[fc] = s
	}
	return s, s.err
}

// decode fills in a FunctionConfig's pod settings over the flag defaults.
func decode(fc *configpb.FunctionConfig, opts Options) podSettings {
	s := podSettings{function: podcache.Function{
		MaxParallelExecutions:   opts.MaxParallelExecutions,
		PreferredMaxQueueLength: opts.PreferredMaxQueueLength,
		MaxCallsPerPod:          opts.MaxCallsPerPod,
		TTL:                     opts.TTL,
	}}
	p := fc.GetPod()
	if p.GetMaxParallelExecutions() > 0 {
		s.function.MaxParallelExecutions = int(p.GetMaxParallelExecutions())
	}
	if p.GetPreferredMaxQueueLength() > 0 {
		s.function.PreferredMaxQueueLength = int(p.GetPreferredMaxQueueLength())
	}
	if p.GetTimeToLiveSeconds() > 0 {
		s.function.TTL = time.Duration(p.GetTimeToLiveSeconds()) * time.Second
	}
	if raw := p.GetTemplateOverridesJson(); len(raw) > 0 {
		s.overrides = &v1alpha1.TemplateOverrides{}
		if err := readOverrides(raw, s.overrides, opts); err != nil {
			s.err = fmt.Errorf("FunctionConfig %s/%s: %w", fc.GetNamespace(), fc.GetName(), err)
			return s
		}
	}
	h := sha256.New()
	_ = json.NewEncoder(h).Encode(s.overrides)
	s.overridesHash = hex.EncodeToString(h.Sum(nil))[:12]
	return s
}

// readOverrides decodes a FunctionConfig's templateOverrides into o and
// checks them against the pod-manager's allow-lists.
func readOverrides(raw []byte, o *v1alpha1.TemplateOverrides, opts Options) error {
	if err := json.Unmarshal(raw, o); err != nil {
		return fmt.Errorf("%w: %w", errBadOverrides, err)
	}
	if sa := o.ServiceAccountName; sa != "" && !slices.Contains(opts.OverrideServiceAccounts, "*") && !slices.Contains(opts.OverrideServiceAccounts, sa) {
		return fmt.Errorf("templateOverrides.serviceAccountName %q: %w: not allowed (--allowed-override-service-accounts)", sa, templatemerge.ErrOverrideRefused)
	}
	if o.SecurityContext != nil && opts.DenyOverrideSecurityContext {
		return fmt.Errorf("templateOverrides.securityContext: %w: not allowed (--allow-override-security-context=false)", templatemerge.ErrOverrideRefused)
	}
	if err := opts.OverridePolicy.Check(o); err != nil {
		return fmt.Errorf("%w (%s)", err, overrideFlag(err))
	}
	return nil
}

// overrideFlag names the flag that allows what err, a refusal of
// opts.OverridePolicy, refuses.
func overrideFlag(err error) string {
	var refused *templatemerge.RefusedError
	if !errors.As(err, &refused) {
		return "no flag allows it"
	}
	switch refused.Rule {
	case templatemerge.RuleSecrets:
		return "--allowed-override-secrets"
	case templatemerge.RuleConfigMaps:
		return "--allowed-override-configmaps"
	case templatemerge.RuleCPU:
		return "--max-override-cpu"
	case templatemerge.RuleMemory:
		return "--max-override-memory"
	}
	return "no flag allows it"
}
