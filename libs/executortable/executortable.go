// Package executortable turns a config snapshot (the FunctionConfigs the
// config-reconciler streams) into one lookup table per executor. The
// reconciler uses it to report conflicts in status and every consumer uses it
// to route, so all of them judge conflicts and precedence the same way.
package executortable

import (
	"context"
	"slices"
	"sort"
	"strconv"
	"strings"

	"google.golang.org/grpc/metadata"

	"github.com/fnrunner/fnrunner/libs/imagematch"
	configpb "github.com/fnrunner/fnrunner/protos/configstream"
)

// Kind is an executor, in the order the gateway tries them.
type Kind string

// The executors.
const (
	Go     Kind = "go"
	Binary Kind = "binary"
	Pod    Kind = "pod"
)

// Header is the gRPC metadata key with which the gateway tells an executor
// service which executor it chose.
const Header = "fnrunner-executor"

// SnapshotHeader is the gRPC metadata key with which the gateway tells an
// executor service the snapshot it routed the call by (Snapshot.String), so
// that the executor decides on that snapshot or a newer one: a FunctionConfig
// the gateway has seen but the executor not yet would otherwise be run as an
// unclaimed image, with the defaults.
const SnapshotHeader = "fnrunner-table-snapshot"

// Snapshot names one snapshot of the config-reconciler's stream: versions
// grow within an epoch (one run of one config-reconciler replica).
type Snapshot struct {
	Epoch   string
	Version uint64
}

// String is the snapshot as SnapshotHeader carries it: "<version>@<epoch>".
func (s Snapshot) String() string { return strconv.FormatUint(s.Version, 10) + "@" + s.Epoch }

// Snapshot names t's snapshot.
func (t *Tables) Snapshot() Snapshot { return Snapshot{Epoch: t.Epoch, Version: t.Version} }

// Covers reports whether t is s's snapshot or a later one. A snapshot of
// another epoch (another replica, or a restart) cannot be compared, and is
// taken as covering it.
func (t *Tables) Covers(s Snapshot) bool { return t.Epoch != s.Epoch || t.Version >= s.Version }

// WithSnapshot returns ctx with t's snapshot in the outgoing metadata.
func WithSnapshot(ctx context.Context, t *Tables) context.Context {
	return metadata.AppendToOutgoingContext(ctx, SnapshotHeader, t.Snapshot().String())
}

// SnapshotOf returns the snapshot an incoming call was routed by, if it
// names one.
func SnapshotOf(ctx context.Context) (Snapshot, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(SnapshotHeader)
	if len(v) != 1 {
		return Snapshot{}, false
	}
	version, epoch, ok := strings.Cut(v[0], "@")
	n, err := strconv.ParseUint(version, 10, 64)
	if !ok || err != nil {
		return Snapshot{}, false
	}
	return Snapshot{Epoch: epoch, Version: n}, true
}

// Kinds returns all executors in routing order.
func Kinds() []Kind { return []Kind{Go, Binary, Pod} }

// Tables are the lookup tables of one snapshot.
type Tables struct {
	// Epoch and Version identify the snapshot.
	Epoch   string
	Version uint64
	// DefaultPrefix is the snapshot's default image prefix.
	DefaultPrefix string
	tables        map[Kind]*imagematch.Table[*configpb.FunctionConfig]
	functions     []*configpb.FunctionConfig
	// Conflicts by executor.
	Conflicts map[Kind][]imagematch.Conflict
	// Invalid claims by owner ("namespace/name"), with the reason.
	Invalid map[string]error
}

// Owner is how a FunctionConfig is named in conflicts and errors.
func Owner(fc *configpb.FunctionConfig) string { return fc.GetNamespace() + "/" + fc.GetName() }

// Build makes the tables of a snapshot.
func Build(s *configpb.Snapshot) *Tables {
	t := &Tables{
		Epoch:         s.GetEpoch(),
		Version:       s.GetVersion(),
		DefaultPrefix: s.GetDefaultImagePrefix(),
		tables:        map[Kind]*imagematch.Table[*configpb.FunctionConfig]{},
		Conflicts:     map[Kind][]imagematch.Conflict{},
		Invalid:       map[string]error{},
	}
	t.functions = s.GetFunctions()
	claims := map[Kind][]imagematch.Claim[*configpb.FunctionConfig]{}
	for _, fc := range s.GetFunctions() {
		add := func(k Kind, tags []string) {
			claims[k] = append(claims[k], imagematch.Claim[*configpb.FunctionConfig]{
				Owner: Owner(fc), Name: fc.GetImage(), Prefixes: fc.GetPrefixes(), Tags: tags, Value: fc,
			})
		}
		if fc.GetGo() != nil {
			add(Go, fc.GetGo().GetTags())
		}
		if fc.GetBinary() != nil {
			add(Binary, fc.GetBinary().GetTags())
		}
		if fc.GetPod() != nil {
			add(Pod, fc.GetPod().GetTags())
		}
	}
	for _, k := range Kinds() {
		table, conflicts, invalid := imagematch.NewTable(t.DefaultPrefix, claims[k])
		t.tables[k] = table
		if len(conflicts) > 0 {
			t.Conflicts[k] = conflicts
		}
		for owner, err := range invalid {
			t.Invalid[owner] = err
		}
	}
	return t
}

// Functions are the snapshot's FunctionConfigs, ordered by namespace and name.
func (t *Tables) Functions() []*configpb.FunctionConfig { return t.functions }

// Lookup returns the FunctionConfig whose executor k runs ref.
//
// A reference that pins a digest is claimed, in every executor, only
// through a claim of that digest: a claim of its tag says nothing of the
// content the digest names (which need not be what the tag names now), so
// such a call is unclaimed unless its digest is claimed, and the
// pod-manager's unclaimed-image rules apply to it.
func (t *Tables) Lookup(k Kind, ref imagematch.Reference) (*configpb.FunctionConfig, bool) {
	table := t.tables[k]
	if table == nil {
		return nil, false
	}
	return table.Lookup(ref)
}

// ClaimsRepository reports whether a FunctionConfig claims ref's repository
// (its prefix and name) for executor k under some tag, whatever ref's own:
// a tag a caller's constraint resolves to may be one it runs. A claim of
// digests only counts not, for no tag is one of them. It errs towards
// true: a claim left out of the table (a conflict, an invalid tag) counts.
func (t *Tables) ClaimsRepository(k Kind, ref imagematch.Reference) bool {
	for _, fc := range t.functions {
		tags, ok := claimTags(k, fc)
		if !ok || fc.GetImage() != ref.Name {
			continue
		}
		if len(tags) > 0 && !slices.ContainsFunc(tags, func(tag string) bool { return !strings.Contains(tag, ":") }) {
			continue // digests ("sha256:…") only
		}
		prefixes := fc.GetPrefixes()
		if len(prefixes) == 0 {
			prefixes = []string{""}
		}
		for _, p := range prefixes {
			if np, err := imagematch.NormalizePrefix(p, t.DefaultPrefix); err == nil && np == ref.Prefix {
				return true
			}
		}
	}
	return false
}

// claimTags are the tags fc claims for executor k, and false when it does
// not claim k at all.
func claimTags(k Kind, fc *configpb.FunctionConfig) ([]string, bool) {
	switch {
	case k == Go && fc.GetGo() != nil:
		return fc.GetGo().GetTags(), true
	case k == Binary && fc.GetBinary() != nil:
		return fc.GetBinary().GetTags(), true
	case k == Pod && fc.GetPod() != nil:
		return fc.GetPod().GetTags(), true
	}
	return nil, false
}

// ConflictsOf lists the conflicts an owner is part of, in a stable order.
func (t *Tables) ConflictsOf(owner string) []string {
	var out []string
	for _, k := range Kinds() {
		for _, c := range t.Conflicts[k] {
			for _, o := range c.Owners {
				if o == owner {
					out = append(out, string(k)+" executor: "+c.String())
				}
			}
		}
	}
	sort.Strings(out)
	return out
}

// Tags are the exact tags any executor's claims name for ref's repository
// (imagematch.Table.Tags), sorted.
func (t *Tables) Tags(ref imagematch.Reference) []string {
	var out []string
	for _, k := range Kinds() {
		for _, tag := range t.tables[k].Tags(ref.Prefix, ref.Name) {
			if !slices.Contains(out, tag) {
				out = append(out, tag)
			}
		}
	}
	sort.Strings(out)
	return out
}
