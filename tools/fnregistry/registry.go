package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"golang.org/x/mod/semver"
	"sigs.k8s.io/yaml"
)

// RegistryPath is the registry's path from the repository's root.
const RegistryPath = "functions/registry.yaml"

// How the go executor runs a function (Function.GoExecutor).
const (
	InProcess = "process"
	AsBinary  = "binary"
	AsScript  = "script"
)

// Unstable is the version of an entry that answers as the catalog's
// :unstable tag did at a commit its comment names.
const Unstable = "unstable"

// BuildModule is Function.Build for a binary that is its module's main
// package.
const BuildModule = "module"

// Registry is functions/registry.yaml.
type Registry struct {
	Functions []Function `json:"functions"`
}

// Function is one entry of the registry (the file's header says what each
// field means).
type Function struct {
	Name       string   `json:"name"`
	Image      string   `json:"image,omitempty"`
	Version    string   `json:"version"`
	Tags       []string `json:"tags"`
	Module     string   `json:"module,omitempty"`
	Build      string   `json:"build"`
	GoExecutor string   `json:"goExecutor"`
	Processor  string   `json:"processor,omitempty"`
	// ReadFrom says, for each tag, where the behaviour it answers with
	// was read.
	ReadFrom map[string]string `json:"readFrom"`
}

// ErrInvalid is wrapped by every error Check returns.
var ErrInvalid = errors.New("invalid registry")

// Load reads and checks the registry at path.
func Load(path string) (*Registry, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data)
}

// Parse decodes a registry, refusing unknown fields, and checks it.
func Parse(data []byte) (*Registry, error) {
	var r Registry
	if err := yaml.UnmarshalStrict(data, &r); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err := r.Check(); err != nil {
		return nil, err
	}
	return &r, nil
}

// Check says what is wrong with the registry: entries out of order or
// repeated, and fields that disagree with each other.
func (r *Registry) Check() error {
	var errs []error
	for i, f := range r.Functions {
		if i > 0 && r.Functions[i-1].Name >= f.Name {
			errs = append(errs, fmt.Errorf("%q: entries must be sorted by name, without repeats", f.Name))
		}
		if err := f.check(); err != nil {
			errs = append(errs, fmt.Errorf("%q: %w", f.Name, err))
		}
	}
	if len(r.Functions) == 0 {
		errs = append(errs, errors.New("no functions"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

func (f Function) check() error {
	var errs []error
	if f.Name == "" || strings.Trim(f.Name, "abcdefghijklmnopqrstuvwxyz0123456789-") != "" {
		errs = append(errs, errors.New("name must be lower-case letters, digits and dashes"))
	}
	if f.Version != Unstable && (!semver.IsValid(f.Version) || semver.Canonical(f.Version) != f.Version) {
		errs = append(errs, fmt.Errorf("version %q is neither a full semantic version nor %q", f.Version, Unstable))
	}
	if f.Image != "" && f.Image == f.Name {
		errs = append(errs, errors.New("image is the name: leave it out"))
	}
	if !slices.Contains(f.Tags, f.Version) {
		errs = append(errs, fmt.Errorf("tags %v do not include the version %s", f.Tags, f.Version))
	}
	errs = append(errs, f.checkTags()...)
	switch {
	case f.Build == BuildModule && f.Module == "":
		errs = append(errs, errors.New(`build "module" needs a module`))
	case f.Build != BuildModule && f.Build != "functions/"+f.Name:
		errs = append(errs, fmt.Errorf(`build is %q: want "module" or "functions/%s"`, f.Build, f.Name))
	}
	switch f.GoExecutor {
	case InProcess:
		if _, _, ok := f.processor(); !ok {
			errs = append(errs, fmt.Errorf(`processor %q: want "<import path>.<function>"`, f.Processor))
		}
	case AsBinary, AsScript:
		if f.Processor != "" {
			errs = append(errs, fmt.Errorf("a processor is only for goExecutor %q", InProcess))
		}
	default:
		errs = append(errs, fmt.Errorf("goExecutor %q: want %q, %q or %q", f.GoExecutor, InProcess, AsBinary, AsScript))
	}
	return errors.Join(errs...)
}

// checkTags refuses a tag that is a constraint, and a tag without a
// readFrom: a claim covers only the versions whose behaviour was read.
func (f Function) checkTags() []error {
	var errs []error
	for _, tag := range f.Tags {
		if tag != Unstable && !semver.IsValid(tag) {
			errs = append(errs, fmt.Errorf("tag %q is neither a version nor %q: a constraint claims versions nobody read", tag, Unstable))
		}
		if strings.TrimSpace(f.ReadFrom[tag]) == "" {
			errs = append(errs, fmt.Errorf("readFrom must say where the behaviour of %s was read", tag))
		}
	}
	for _, tag := range slices.Sorted(maps.Keys(f.ReadFrom)) {
		if !slices.Contains(f.Tags, tag) {
			errs = append(errs, fmt.Errorf("readFrom names %s, which is not among the tags", tag))
		}
	}
	return errs
}

// processor splits Processor into its package's import path and the
// function's name.
func (f Function) processor() (pkg, name string, ok bool) {
	i := strings.LastIndex(f.Processor, ".")
	if i <= 0 || i == len(f.Processor)-1 || strings.LastIndex(f.Processor, "/") > i {
		return "", "", false
	}
	return f.Processor[:i], f.Processor[i+1:], true
}

// ImageName is the catalog image name the function answers for: Image, or
// else Name.
func (f Function) ImageName() string {
	if f.Image != "" {
		return f.Image
	}
	return f.Name
}

// Own says that fnrunner wrote the function: no catalog module is served
// for it.
func (f Function) Own() bool { return f.Module == "" }

// Label is the Bazel label of the function's binary.
func (f Function) Label() string {
	if f.Build == BuildModule {
		return "//functions:" + f.Name
	}
	return "//" + f.Build
}
