package setimage

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/kptdev/krm-functions-sdk/go/fn"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Kind is the kind of set-image's own functionConfig, in API group
// fn.kpt.dev.
const Kind = "SetImage"

// Data keys of a ConfigMap functionConfig (or of a SetImage's data).
const (
	keyName    = "name"
	keyNewName = "newName"
	keyNewTag  = "newTag"
	keyDigest  = "digest"
)

// Image names the image to replace (Name, without tag or digest) and what
// to replace it with.
type Image struct {
	Name    string `json:"name,omitempty"`
	NewName string `json:"newName,omitempty"`
	NewTag  string `json:"newTag,omitempty"`
	Digest  string `json:"digest,omitempty"`
}

// Config is the functionConfig as the catalog's function reads it.
type Config struct {
	// Image is the image to set: a SetImage's image, then its data (or a
	// ConfigMap's data) key by key.
	Image Image `json:"image,omitempty"`
	// Data is a ConfigMap's data, or a SetImage's data field.
	Data map[string]string `json:"data,omitempty"`
	// AdditionalImageFields are image fields to update besides the
	// standard ones; nil when a SetImage does not have the field (an
	// empty list is not nil).
	AdditionalImageFields types.FsSlice `json:"additionalImageFields,omitempty"`

	// setImage is the SetImage functionConfig, for its image field, which
	// the additional image fields are set with; nil for a ConfigMap.
	setImage *fn.KubeObject
}

// failure ends a run as the catalog's function ends with a non-zero exit
// status: Results are the results it adds on its way out.
type failure struct {
	Results fn.Results
}

// die is the catalog SDK's ResultErrAndDie (kpt-functions-sdk/go/fn of
// 2022-08-12, result.go): an error result for obj (or a general one), then
// the panic its Run turns into the error result "function is terminated:
// ...".
func die(message string, obj *fn.KubeObject) *failure {
	terminated := "function is terminated: " + message
	if obj != nil {
		terminated = fmt.Sprintf("function is terminated by Resource(apiVersion=%v, kind=%v, namespace=%v, name=%v): %v",
			obj.GetAPIVersion(), obj.GetKind(), obj.GetNamespace(), obj.GetName(), message)
	}
	return &failure{Results: fn.Results{
		objectResult(message, obj, fn.Error),
		{Message: terminated, Severity: fn.Error},
	}}
}

// unmatchedFields is the catalog SDK's error for a field of an unexpected
// type (errSubObjectFields): one error result, the function stops.
func unmatchedFields(field string) *failure {
	return &failure{Results: fn.Results{{
		Message:  "SubObject has unmatched field type: `" + field,
		Severity: fn.Error,
	}}}
}

// objectResult is a result for obj the way the catalog SDK makes one
// (ConfigObjectResult): the resource and its file, whose index is -1 when
// kpt gave none; a general result when obj is nil.
func objectResult(message string, obj *fn.KubeObject, severity fn.Severity) *fn.Result {
	r := &fn.Result{Message: message, Severity: severity}
	if obj == nil {
		return r
	}
	r.ResourceRef = &fn.ResourceRef{
		APIVersion: obj.GetAPIVersion(),
		Kind:       obj.GetKind(),
		Name:       obj.GetName(),
		Namespace:  obj.GetNamespace(),
	}
	index := -1
	if i, ok := intAnnotation(obj, "internal.config.kubernetes.io/index"); ok {
		index = i
	}
	r.File = &fn.File{Path: obj.GetAnnotation("internal.config.kubernetes.io/path"), Index: index}
	return r
}

// intAnnotation reads an annotation as the catalog SDK's IndexAnnotation
// does: absent is not ok, anything else is its number (0 if none).
func intAnnotation(obj *fn.KubeObject, key string) (int, bool) {
	v := obj.GetAnnotation(key)
	if v == "" {
		return 0, false
	}
	i, _ := strconv.Atoi(v)
	return i, true
}

// readConfig reads the functionConfig the way the catalog's SDK does
// (runnerProcessor.config): info is an info result to report first
// ("`FunctionConfig` is not given"), if any.
func readConfig(fc *fn.KubeObject) (cfg Config, info *fn.Result, f *failure) {
	switch {
	case fc == nil || fc.IsEmpty():
		return cfg, &fn.Result{Message: "`FunctionConfig` is not given", Severity: fn.Info}, nil
	case isGVK(fc, "", "v1", "ConfigMap"):
		data, ok := stringMap(fc, "data")
		if !ok {
			return cfg, nil, unmatchedFields("data")
		}
		cfg.Data = data
	case isGVK(fc, fn.KptFunctionGroup, "v1alpha1", Kind):
		j, err := fc.CopyToResourceNode().MarshalJSON()
		if err == nil {
			err = json.Unmarshal(j, &cfg)
		}
		if err != nil {
			return cfg, nil, unmatchedFields("")
		}
		cfg.setImage = fc
	default:
		return cfg, nil, die(fmt.Sprintf("unknown FunctionConfig `%v`, expect %v", fc.GetKind(), Kind), fc)
	}
	return cfg, nil, nil
}

// isGVK is the catalog SDK's IsGVK: the group is what comes before the
// first "/" of apiVersion, and a part that is empty on either side matches
// anything.
func isGVK(obj *fn.KubeObject, group, version, kind string) bool {
	objGroup, objVersion, found := strings.Cut(obj.GetAPIVersion(), "/")
	if !found {
		objGroup, objVersion = "", objGroup
	}
	switch {
	case obj.GetKind() != "" && kind != "" && obj.GetKind() != kind:
		return false
	case objGroup != "" && group != "" && objGroup != group:
		return false
	case objVersion != "" && version != "" && objVersion != version:
		return false
	}
	return true
}

// stringMap reads a map of strings field of obj as the catalog SDK's
// NestedStringMapOrDie does: absent is an empty map; a null or anything but
// a map of scalars is not ok; scalars of any type read as their text, a
// null one as "".
func stringMap(obj *fn.KubeObject, field string) (map[string]string, bool) {
	node, err := obj.CopyToResourceNode().Pipe(yaml.Get(field))
	if err != nil {
		return nil, false
	}
	if node == nil {
		return nil, true
	}
	if node.YNode().Kind != yaml.MappingNode {
		return nil, false
	}
	out := map[string]string{}
	content := node.YNode().Content
	for i := 0; i+1 < len(content); i += 2 {
		value := content[i+1]
		if value.Kind != yaml.ScalarNode {
			return nil, false
		}
		if value.Tag == yaml.NodeTagNull {
			out[content[i].Value] = ""
			continue
		}
		out[content[i].Value] = value.Value
	}
	return out, true
}

// applyData sets the image from the data, key by key, as the catalog's
// configDefaultData does; an unknown key ends the run. The catalog ranges
// over a Go map, so which of several unknown keys it names is random;
// sorting makes it the first.
func applyData(cfg *Config) *failure {
	keys := make([]string, 0, len(cfg.Data))
	for k := range cfg.Data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	fields := map[string]*string{
		keyName:    &cfg.Image.Name,
		keyNewName: &cfg.Image.NewName,
		keyNewTag:  &cfg.Image.NewTag,
		keyDigest:  &cfg.Image.Digest,
	}
	for _, k := range keys {
		field, ok := fields[k]
		if !ok {
			return die(fmt.Sprintf("ConfigMap has wrong field name %v", k), nil)
		}
		*field = cfg.Data[k]
	}
	return nil
}

// validate checks that the image says what to replace and with what, as
// the catalog's validateInput does.
//
// As the catalog's code does at 76fe381, newTag and digest may both be
// given (the digest wins in the standard fields, see newImageName).
func validate(image Image) *failure {
	if image.Name == "" {
		return die("must specify `name`", nil)
	}
	if image.NewName == "" && image.NewTag == "" && image.Digest == "" {
		return die("must specify one of `newName`, `newTag`, or `digest`", nil)
	}
	return nil
}

// additionalImage is the SetImage's image field as kustomize's image (with
// its tagSuffix), which the additional image fields are set with: the
// catalog reads it again from the functionConfig, without the data.
func (cfg Config) additionalImage() (types.Image, *failure) {
	var image types.Image
	node, err := cfg.setImage.CopyToResourceNode().Pipe(yaml.Get("image"))
	if err != nil || node == nil || node.YNode().Kind != yaml.MappingNode {
		return image, unmatchedFields("")
	}
	j, err := node.MarshalJSON()
	if err == nil {
		err = json.Unmarshal(j, &image)
	}
	if err != nil {
		return image, unmatchedFields("")
	}
	return image, nil
}
