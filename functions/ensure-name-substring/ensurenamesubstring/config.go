package ensurenamesubstring

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/fnrunner/fnrunner/functions/internal/treesize"
)

// The function's own functionConfig kind.
const (
	ConfigAPIVersion = "fn.kpt.dev/v1alpha1"
	ConfigKind       = "EnsureNameSubstring"
)

// EditMode says where the substring goes in a name that lacks it.
type EditMode string

// The edit modes.
const (
	Prepend EditMode = "prepend"
	Append  EditMode = "append"
)

// Config is what the function does, from either form of functionConfig.
type Config struct {
	// Substring every name must contain.
	Substring string
	// EditMode says where Substring goes when a name lacks it.
	EditMode EditMode
	// AdditionalNameFields are name fields besides metadata.name.
	AdditionalNameFields []types.FieldSpec
}

// customConfig is the EnsureNameSubstring functionConfig.
type customConfig struct {
	Substring string   `json:"substring"`
	EditMode  EditMode `json:"editMode,omitempty"`
	// FieldSpecs is the deprecated name of AdditionalNameFields.
	FieldSpecs           []types.FieldSpec `json:"fieldSpecs,omitempty"`
	AdditionalNameFields []types.FieldSpec `json:"additionalNameFields,omitempty"`
}

// errNoConfig is returned for a ResourceList without a functionConfig.
var errNoConfig = errors.New("no functionConfig: want a ConfigMap with one of data.prepend or data.append, or an " + ConfigAPIVersion + " " + ConfigKind)

// ParseConfig reads the functionConfig: a ConfigMap whose data holds
// exactly one entry, prepend or append, whose value is the substring; or an
// EnsureNameSubstring with substring, editMode (default prepend) and
// additionalNameFields (or its deprecated name fieldSpecs, not both).
func ParseConfig(o *fn.KubeObject) (*Config, error) {
	if o == nil || o.IsEmpty() {
		return nil, errNoConfig
	}
	var (
		cfg *Config
		err error
	)
	switch {
	case o.GetAPIVersion() == "v1" && o.GetKind() == "ConfigMap":
		cfg, err = configFromConfigMap(o)
	case o.GetAPIVersion() == ConfigAPIVersion && o.GetKind() == ConfigKind:
		cfg, err = configFromCustom(o)
	default:
		return nil, fmt.Errorf("functionConfig is %s %s: want v1 ConfigMap or %s %s",
			o.GetAPIVersion(), o.GetKind(), ConfigAPIVersion, ConfigKind)
	}
	if err != nil {
		return nil, err
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

func configFromConfigMap(o *fn.KubeObject) (*Config, error) {
	data, _, err := o.NestedStringMap("data")
	if err != nil {
		return nil, fmt.Errorf("reading ConfigMap data: %w", err)
	}
	if len(data) != 1 {
		return nil, fmt.Errorf("ConfigMap data must have exactly one entry, %q or %q; it has %d", Prepend, Append, len(data))
	}
	var key, value string
	for key, value = range data {
	}
	mode := EditMode(key)
	if mode != Prepend && mode != Append {
		return nil, fmt.Errorf("ConfigMap data key %q: want %q or %q", key, Prepend, Append)
	}
	return &Config{Substring: value, EditMode: mode}, nil
}

func configFromCustom(o *fn.KubeObject) (*Config, error) {
	c, err := decodeCustom(o)
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, err
		}
		return nil, fmt.Errorf("decoding %s: %w", ConfigKind, err)
	}
	if c.FieldSpecs != nil && c.AdditionalNameFields != nil {
		return nil, errors.New("fieldSpecs is the deprecated name of additionalNameFields: set one of them, not both")
	}
	cfg := &Config{Substring: c.Substring, EditMode: c.EditMode, AdditionalNameFields: c.AdditionalNameFields}
	if cfg.EditMode == "" {
		cfg.EditMode = Prepend
	}
	if c.FieldSpecs != nil {
		cfg.AdditionalNameFields = c.FieldSpecs
	}
	return cfg, nil
}

// decodeCustom decodes an EnsureNameSubstring, refusing one over
// maxConfigBytes first: it is read through YAML text and JSON, at a cost
// of hundreds of bytes for each of its bytes.
func decodeCustom(o *fn.KubeObject) (customConfig, error) {
	var c customConfig
	if size := configBytes(o); size > maxConfigBytes {
		return c, fmt.Errorf("%w: an %s of about %d bytes, more than %d", ErrTooLarge, ConfigKind, size, maxConfigBytes)
	}
	err := yaml.Unmarshal([]byte(o.String()), &c)
	return c, err
}

// configBytes is treesize.TextBytes of o's tree, read in place: o is left an object
// of the same nodes.
func configBytes(o *fn.KubeObject) int {
	n := o.MoveToResourceNode()
	size := treesize.TextBytes(n.YNode())
	*o = *fn.MoveToKubeObject(n)
	return size
}

func (c *Config) validate() error {
	if c.Substring == "" {
		return errors.New("substring must not be empty")
	}
	if c.EditMode != Prepend && c.EditMode != Append {
		return fmt.Errorf("editMode %q: want %q or %q", c.EditMode, Prepend, Append)
	}
	return checkPaths(c.AdditionalNameFields)
}

// checkPaths refuses an additional name field without a path.
func checkPaths(fields []types.FieldSpec) error {
	for i, fs := range fields {
		if fs.Path == "" {
			return fmt.Errorf("additionalNameFields[%d]: path is required", i)
		}
	}
	return nil
}

// nameFields are the fields that hold names: metadata.name in every
// resource, then the additional ones.
func (c *Config) nameFields() []types.FieldSpec {
	return append([]types.FieldSpec{{Path: namePath}}, c.AdditionalNameFields...)
}

// ensure returns s with the substring added as the edit mode says, or s
// itself when it already contains the substring (or the edit mode is
// neither prepend nor append, which v0.1.1 leaves unchecked).
func (c *Config) ensure(s string) (string, bool) {
	if strings.Contains(s, c.Substring) {
		return s, false
	}
	switch c.EditMode {
	case Append:
		return s + c.Substring, true
	case Prepend:
		return c.Substring + s, true
	}
	return s, false
}
