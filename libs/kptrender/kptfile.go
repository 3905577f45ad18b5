// Reading a Kptfile and kpt's validation of its pipeline.

package kptrender

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	kptfilev1 "github.com/kptdev/kpt/pkg/api/kptfile/v1"
	"github.com/kptdev/kpt/pkg/kptfile/kptfileutil"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/kustomize/kyaml/kio"
	"sigs.k8s.io/kustomize/kyaml/yaml"
)

// Kptfile is the part of a Kptfile the renderer reads.
type Kptfile struct {
	Metadata struct {
		Name        string            `yaml:"name"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Pipeline struct {
		Mutators   []Function `yaml:"mutators"`
		Validators []Function `yaml:"validators"`
	} `yaml:"pipeline"`
	// kpt is the same Kptfile as kpt's own type, for kpt's validation.
	kpt *kptfilev1.KptFile
}

// Function is one step of a Kptfile pipeline.
type Function struct {
	Image      string            `yaml:"image"`
	Exec       string            `yaml:"exec"`
	ConfigMap  map[string]string `yaml:"configMap"`
	ConfigPath string            `yaml:"configPath"`
	Name       string            `yaml:"name"`
	Selectors  []Selector        `yaml:"selectors"`
	Exclude    []Selector        `yaml:"exclude"`
}

// ReadKptfile reads dir/Kptfile as kpt does (kpt's own decoder: a field
// kpt's Kptfile type lacks, or an old apiVersion, is refused). Its pipeline
// is validated when it runs.
func ReadKptfile(dir string) (*Kptfile, error) {
	data, err := os.ReadFile(filepath.Join(dir, "Kptfile"))
	if err != nil {
		return nil, fmt.Errorf("reading Kptfile: %w", err)
	}
	// kpt's own decoding (kptfileutil): apiVersion and kind, every field
	// known, kpt's messages.
	kkf, err := kptfileutil.DecodeKptfile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("Kptfile in %s: %w", dir, err)
	}
	var kf Kptfile
	if err := yaml.Unmarshal(data, &kf); err != nil {
		return nil, fmt.Errorf("parsing Kptfile: %w", err)
	}
	kf.kpt = kkf
	return &kf, nil
}

// validatePipeline is kpt's validation of the pipeline of the package at
// dir (kptfile/v1 KptFile.Validate), which kpt runs when it comes to run a
// pipeline: functions, image names, configMap and configPath, and each
// configPath naming one KRM resource of the package.
func (kf *Kptfile) validatePipeline(dir string) error {
	kkf := kf.kpt
	if kkf == nil {
		return errors.New("Kptfile not read by ReadKptfile")
	}
	// kpt reads a configPath through a symbolic link, even one out of the
	// package; it is refused here before kpt's validation reads it.
	var fns []kptfilev1.Function
	if kkf.Pipeline != nil {
		fns = append(slices.Clone(kkf.Pipeline.Mutators), kkf.Pipeline.Validators...)
	}
	for _, f := range fns {
		p := filepath.Clean(f.ConfigPath)
		if strings.TrimSpace(f.ConfigPath) == "" || filepath.IsAbs(p) || strings.Contains(p, "..") {
			continue // kpt's validation refuses these itself
		}
		if err := noSymlinkBelow(dir, p); err != nil {
			return fmt.Errorf("Kptfile in %s: function %q: configPath: %w", dir, f.Image, err)
		}
		// kpt's validation indexes the file's first document unchecked: a
		// file without one would crash it.
		if err := hasDocument(filepath.Join(dir, f.ConfigPath)); err != nil {
			return fmt.Errorf("Kptfile in %s: function %q: configPath %q: %w", dir, f.Image, f.ConfigPath, err)
		}
	}
	if err := validateKptfile((*kptfilev1.KptFile).Validate, kkf, dir); err != nil {
		return fmt.Errorf("Kptfile in %s: %w", dir, err)
	}
	return nil
}

// hasDocument says whether the file at p (if there is one: kpt reports a
// missing one) holds a YAML document, read as kpt reads a configPath.
func hasDocument(p string) error {
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	nodes, err := (&kio.ByteReader{Reader: bytes.NewReader(data), PreserveSeqIndent: true, WrapBareSeqNode: true, DisableUnwrapping: true}).Read()
	if err != nil {
		return nil // kpt's validation says what is wrong with it
	}
	if len(nodes) == 0 {
		return errors.New("functionConfig must contain a config, the file has none")
	}
	return nil
}

// validateKptfile runs kpt's KptFile.Validate, given as validate, on the
// package at dir. Its package path parameter is of a type in kpt's
// internal packages, which cannot be named here: P is that type, inferred
// from validate's signature.
func validateKptfile[P ~string](validate func(*kptfilev1.KptFile, filesys.FileSystem, P) error, kf *kptfilev1.KptFile, dir string) error {
	return validate(kf, filesys.MakeFsOnDisk(), P(dir))
}

// name is how kpt names a function: its image, or its exec command.
func (f Function) name() string {
	if f.Image != "" {
		return f.Image
	}
	return f.Exec
}
