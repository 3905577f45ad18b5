package setimage

import (
	"errors"
	"fmt"
	"regexp"
	"sort"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

// Kind is the kind of set-image's own functionConfig, in API group
// fn.kpt.dev.
const Kind = "SetImage"

// Data keys of a ConfigMap functionConfig.
const (
	keyName    = "name"
	keyNewName = "newName"
	keyNewTag  = "newTag"
	keyDigest  = "digest"
)

// Config is the SetImage functionConfig.
type Config struct {
	// Image names the image to replace (Name, without tag or digest) and
	// what to replace it with (NewName, NewTag or Digest).
	Image types.Image `json:"image,omitempty"`
	// AdditionalImageFields are image fields to update besides the
	// standard ones.
	AdditionalImageFields types.FsSlice `json:"additionalImageFields,omitempty"`
}

var (
	configMapKind = schema.GroupKind{Kind: "ConfigMap"}
	setImageKind  = schema.GroupKind{Group: fn.KptFunctionGroup, Kind: Kind}
)

// configFrom reads and validates the functionConfig.
func configFrom(fc *fn.KubeObject) (Config, error) {
	var cfg Config
	switch {
	case fc == nil || fc.IsEmpty():
		// Nothing configured: validation says what is missing.
	case fc.IsGroupKind(configMapKind):
		image, err := imageFromData(fc)
		if err != nil {
			return cfg, err
		}
		cfg.Image = image
	case fc.IsGroupKind(setImageKind):
		if err := sigsyaml.Unmarshal([]byte(fc.String()), &cfg); err != nil {
			return cfg, fmt.Errorf("invalid %s functionConfig: %w", Kind, err)
		}
	default:
		return cfg, fmt.Errorf("unknown FunctionConfig `%v`, expect `%v` or `ConfigMap.v1`", fc.GroupKind(), setImageKind)
	}
	return cfg, validate(cfg.Image)
}

// imageFromData reads the image from a ConfigMap's data.
func imageFromData(cm *fn.KubeObject) (types.Image, error) {
	var image types.Image
	data, err := stringData(cm)
	if err != nil {
		return image, err
	}
	fields := map[string]*string{
		keyName:    &image.Name,
		keyNewName: &image.NewName,
		keyNewTag:  &image.NewTag,
		keyDigest:  &image.Digest,
	}
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field, ok := fields[k]
		if !ok {
			return image, fmt.Errorf("ConfigMap has wrong field name %v", k)
		}
		*field = data[k]
	}
	return image, nil
}

// stringData returns the scalar values of a ConfigMap's data as strings,
// whatever their YAML type.
func stringData(cm *fn.KubeObject) (map[string]string, error) {
	data, err := cm.CopyToResourceNode().Pipe(yaml.Lookup("data"))
	if err != nil {
		return nil, fmt.Errorf("ConfigMap data: %w", err)
	}
	out := map[string]string{}
	if data == nil || yaml.IsMissingOrNull(data) {
		return out, nil
	}
	if data.YNode().Kind != yaml.MappingNode {
		return nil, errors.New("ConfigMap data must be a map")
	}
	err = data.VisitFields(func(f *yaml.MapNode) error {
		if f.Value.YNode().Kind != yaml.ScalarNode {
			return fmt.Errorf("ConfigMap data %q must be a string", f.Key.YNode().Value)
		}
		out[f.Key.YNode().Value] = f.Value.YNode().Value
		return nil
	})
	return out, err
}

// validate checks that image says what to replace and with what.
func validate(image types.Image) error {
	if image.Name == "" {
		return errors.New("must specify `name`")
	}
	if image.NewName == "" && image.NewTag == "" && image.Digest == "" {
		return errors.New("must specify one of `newName`, `newTag`, or `digest`")
	}
	if image.NewTag != "" && image.Digest != "" {
		return errors.New("must not specify both `newTag` and `digest`")
	}
	// kustomize matches images with this regular expression built from the
	// name; one that does not compile would make it panic.
	if _, err := regexp.Compile("^" + image.Name + "(:[a-zA-Z0-9_.{}-]*)?(@sha256:[a-zA-Z0-9_.{}-]*)?$"); err != nil {
		return fmt.Errorf("invalid image `name` %q: %w", image.Name, err)
	}
	return nil
}
