package validate

import (
	"fmt"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Manifest is one rendered object, as YAML, with what identifies it.
type Manifest struct {
	APIVersion, Kind, Name string
	YAML                   []byte
}

// ID names the object in messages: kind/name.
func (m Manifest) ID() string { return m.Kind + "/" + m.Name }

// Render builds the kustomization in dir as `kustomize build` (and `kubectl apply -k`) would, with
// the default load restrictions: files from within the kustomization's root only.
func Render(dir string) ([]Manifest, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	res, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []Manifest
	for _, r := range res.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, Manifest{APIVersion: r.GetApiVersion(), Kind: r.GetKind(), Name: r.GetName(), YAML: b})
	}
	return out, nil
}
