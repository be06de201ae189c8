package validate

import (
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// repoRoot is the repository's root, seen from this package's directory.
var repoRoot = filepath.Join(kubernetesDir, "..", "..")

// The dev overlay runs the compose stack's servers: the same images, so that a version bump in
// docker-compose.yml that the overlay misses fails here.
func TestDevOverlayRunsTheComposeStacksImages(t *testing.T) {
	var compose struct {
		Services map[string]struct {
			Image string `json:"image"`
		} `json:"services"`
	}
	b, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	var images []string
	for _, s := range compose.Services {
		images = append(images, s.Image)
	}
	o := decodeOverlay(t, "dev")
	for _, d := range o.Deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			if !slices.Contains(images, c.Image) {
				t.Errorf("Deployment/%s container %s: image %s is not one of docker-compose.yml's %v", d.Name, c.Name, c.Image, images)
			}
		}
	}
}

// The dev overlay's Temporal server gets the compose stack's dynamic config, value for value.
func TestDevTemporalHasTheStagingDynamicConfig(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "temporal", "dynamicconfig", "baton-staging.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var staging map[string][]struct {
		Value any `json:"value"`
	}
	if err := yaml.Unmarshal(b, &staging); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for k, vs := range staging {
		if len(vs) != 1 {
			t.Fatalf("%s has %d values; the dev server takes one per key", k, len(vs))
		}
		v, err := yaml.Marshal(vs[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		want[k] = strings.TrimSpace(string(v))
	}
	got := map[string]string{}
	for _, d := range decodeOverlay(t, "dev").Deployments {
		if d.Name != "temporal" {
			continue
		}
		for _, a := range d.Spec.Template.Spec.Containers[0].Command {
			if kv, ok := strings.CutPrefix(a, "--dynamic-config-value="); ok {
				k, v, _ := strings.Cut(kv, "=")
				got[k] = v
			}
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("the dev Temporal's --dynamic-config-value %v; deploy/temporal/dynamicconfig/baton-staging.yaml says %v", got, want)
	}
}

func decodeOverlay(t *testing.T, name string) *Objects {
	t.Helper()
	ms, err := Render(filepath.Join(kubernetesDir, "overlays", name))
	if err != nil {
		t.Fatal(err)
	}
	o, bad := Decode(ms)
	if len(bad) > 0 {
		t.Fatal(bad)
	}
	return o
}
