package ops_test

import (
	"bytes"
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/cmd/demo-worker/contract"
	"github.com/baton-run/baton/integration/servers/harness"
)

// Docker cannot pull or run images on the machines the tests run on, so docker-compose.yml is checked
// statically, and the demo workers' configuration by the real binary.

type composeService struct {
	Image       string            `yaml:"image"`
	Build       *composeBuild     `yaml:"build"`
	Command     []string          `yaml:"command"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Expose      []string          `yaml:"expose"`
	Volumes     []string          `yaml:"volumes"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
	// Keys the checks below do not read; listed so that KnownFields catches a misspelt key.
	Hostname        string         `yaml:"hostname"`
	Restart         string         `yaml:"restart"`
	StopSignal      string         `yaml:"stop_signal"`
	StopGracePeriod string         `yaml:"stop_grace_period"`
	Healthcheck     map[string]any `yaml:"healthcheck"`
}

type composeBuild struct {
	Context    string `yaml:"context"`
	Dockerfile string `yaml:"dockerfile"`
}

type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
	// Extension fields (x-*), the anchors the services merge.
	Extensions map[string]any `yaml:",inline"`
}

func loadCompose(t *testing.T, root string) composeFile {
	t.Helper()
	var c composeFile
	dec := yaml.NewDecoder(bytes.NewReader([]byte(readFile(t, filepath.Join(root, "docker-compose.yml")))))
	dec.KnownFields(true) // a misspelt key fails here rather than being ignored by the test
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	for k := range c.Extensions {
		if !strings.HasPrefix(k, "x-") {
			t.Errorf("docker-compose.yml: unknown top-level key %s", k)
		}
	}
	return c
}

// imageTag splits an image reference; the tag is empty when there is none.
func imageTag(ref string) (repo, tag string) {
	if i := strings.Index(ref, "@"); i >= 0 {
		ref = ref[:i]
	}
	slash := strings.LastIndex(ref, "/")
	if colon := strings.LastIndex(ref, ":"); colon > slash {
		return ref[:colon], ref[colon+1:]
	}
	return ref, ""
}

var hasDigit = regexp.MustCompile(`[0-9]`)

func TestComposeImagesPinned(t *testing.T) {
	root := repoRoot(t)
	c := loadCompose(t, root)
	for name, s := range c.Services {
		if s.Image == "" {
			t.Errorf("service %s: no image (a built service must name its image too, with a tag)", name)
			continue
		}
		_, tag := imageTag(s.Image)
		switch {
		case tag == "" || tag == "latest":
			t.Errorf("service %s: image %s is not pinned to a version", name, s.Image)
		case s.Build == nil && !hasDigit.MatchString(tag):
			t.Errorf("service %s: image %s: tag %q is not a version", name, s.Image, tag)
		}
	}
	// The images the demo worker is built from are pinned as well.
	for _, line := range strings.Split(readFile(t, filepath.Join(root, "deploy", "demo-worker.Dockerfile")), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.EqualFold(f[0], "FROM") {
			continue
		}
		if _, tag := imageTag(f[1]); tag == "" || tag == "latest" || !hasDigit.MatchString(tag) {
			t.Errorf("demo-worker.Dockerfile: base image %s is not pinned to a version", f[1])
		}
	}
}

// TestComposeWiring checks what ties the stack together: the etcd members, the workers' endpoints,
// the workers' HTTP port against Prometheus' targets, the mounts of Prometheus and Grafana.
func TestComposeWiring(t *testing.T) {
	root := repoRoot(t)
	c := loadCompose(t, root)

	for name, s := range c.Services {
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on %s, which does not exist", name, dep)
			}
		}
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			switch {
			case strings.HasPrefix(src, "./"):
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("service %s mounts %s, which is not in the repository", name, src)
				}
			case c.Volumes == nil || !hasKey(c.Volumes, src):
				t.Errorf("service %s mounts volume %s, which is not declared", name, src)
			}
		}
	}

	// etcd: three members that list each other.
	var members []string
	for name := range c.Services {
		if strings.HasPrefix(name, "etcd") {
			members = append(members, name)
		}
	}
	slices.Sort(members)
	if len(members) != 3 {
		t.Fatalf("etcd members %v; want 3", members)
	}
	var initial []string
	for _, m := range members {
		initial = append(initial, m+"=http://"+m+":2380")
	}
	for _, m := range members {
		cmd := strings.Join(c.Services[m].Command, " ")
		for _, want := range []string{"--name=" + m, "--initial-cluster=" + strings.Join(initial, ","),
			"--advertise-client-urls=http://" + m + ":2379", "--initial-advertise-peer-urls=http://" + m + ":2380"} {
			if !strings.Contains(cmd, want) {
				t.Errorf("etcd member %s: command lacks %s", m, want)
			}
		}
	}

	workers := demoWorkerServices(t, c)
	prom := prometheusTargets(t, root)
	var wantTargets []string
	for _, w := range workers {
		s := c.Services[w]
		env := s.Environment
		// The endpoints name services of this file.
		var wantEtcd []string
		for _, m := range members {
			wantEtcd = append(wantEtcd, "http://"+m+":2379")
		}
		if env["BATON_ETCD_ENDPOINTS"] != strings.Join(wantEtcd, ",") {
			t.Errorf("%s: BATON_ETCD_ENDPOINTS=%q; want every member: %s", w, env["BATON_ETCD_ENDPOINTS"], strings.Join(wantEtcd, ","))
		}
		for _, v := range []string{"BATON_TEMPORAL_ADDRESS", "BATON_REDIS_ADDR"} {
			host, _, err := net.SplitHostPort(env[v])
			if err != nil {
				t.Errorf("%s: %s=%q: %v", w, v, env[v], err)
			} else if _, ok := c.Services[host]; !ok {
				t.Errorf("%s: %s=%q names no service", w, v, env[v])
			}
		}
		if env["BATON_PROJECT"] == "" || env["BATON_QUEUES"] == "" {
			t.Errorf("%s: BATON_PROJECT and BATON_QUEUES must be set", w)
		}
		// The HTTP port: the worker listens on it, the service exposes it, Prometheus scrapes it.
		_, port, err := net.SplitHostPort(env["BATON_HTTP_ADDR"])
		if err != nil || port == "" {
			t.Errorf("%s: BATON_HTTP_ADDR=%q is not [host]:port", w, env["BATON_HTTP_ADDR"])
			continue
		}
		if !slices.Contains(s.Expose, port) {
			t.Errorf("%s: expose %v lacks the HTTP port %s", w, s.Expose, port)
		}
		published := false
		for _, p := range s.Ports {
			if strings.HasSuffix(p, ":"+port) {
				published = true
			}
		}
		if !published {
			t.Errorf("%s: ports %v do not publish the HTTP port %s", w, s.Ports, port)
		}
		wantTargets = append(wantTargets, w+":"+port)
		if !slices.Contains(s.Command, "-server-id="+w) {
			t.Errorf("%s: command %v; want -server-id=%s, so that status and alerts name the container", w, s.Command, w)
		}
	}
	slices.Sort(wantTargets)
	if !slices.Equal(prom, wantTargets) {
		t.Errorf("prometheus.yml scrapes %v; the demo workers serve /metrics at %v", prom, wantTargets)
	}

	// Prometheus reads deploy/prometheus (configuration and rules) at the paths of its command line.
	p := c.Services["prometheus"]
	if !slices.Contains(p.Volumes, "./deploy/prometheus:/etc/prometheus:ro") ||
		!slices.Contains(p.Command, "--config.file=/etc/prometheus/prometheus.yml") {
		t.Errorf("prometheus: volumes %v, command %v; want deploy/prometheus at /etc/prometheus and --config.file=/etc/prometheus/prometheus.yml", p.Volumes, p.Command)
	}
	// Grafana: provisioning, and the dashboard where the provider looks for it.
	g := c.Services["grafana"]
	var provider struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "baton.yaml"))), &provider); err != nil {
		t.Fatal(err)
	}
	if len(provider.Providers) != 1 {
		t.Fatalf("dashboard providers %+v; want 1", provider.Providers)
	}
	wantDash := "./deploy/grafana/baton-dashboard.json:" + provider.Providers[0].Options.Path + "/baton-dashboard.json:ro"
	for _, want := range []string{"./deploy/grafana/provisioning:/etc/grafana/provisioning:ro", wantDash} {
		if !slices.Contains(g.Volumes, want) {
			t.Errorf("grafana: volumes %v lack %s", g.Volumes, want)
		}
	}
	var ds struct {
		Datasources []struct {
			URL string `yaml:"url"`
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yaml"))), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana datasource %+v; want http://prometheus:9090 (the prometheus service)", ds.Datasources)
	}
}

func hasKey(m map[string]any, k string) bool { _, ok := m[k]; return ok }

// demoWorkerServices returns the services built from deploy/demo-worker.Dockerfile; there must be 3.
func demoWorkerServices(t *testing.T, c composeFile) []string {
	t.Helper()
	var out []string
	for name, s := range c.Services {
		if s.Build != nil && s.Build.Dockerfile == "deploy/demo-worker.Dockerfile" && s.Build.Context == "." {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	if len(out) != 3 {
		t.Fatalf("demo worker services %v; want 3 built from deploy/demo-worker.Dockerfile", out)
	}
	return out
}

func prometheusTargets(t *testing.T, root string) []string {
	t.Helper()
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(root, "deploy", "prometheus", "prometheus.yml"))), &cfg); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cfg.RuleFiles, "alerts.yml") {
		t.Errorf("prometheus.yml rule_files %v do not load alerts.yml", cfg.RuleFiles)
	}
	var out []string
	for _, sc := range cfg.ScrapeConfigs {
		if sc.JobName == "prometheus" {
			continue
		}
		for _, s := range sc.StaticConfigs {
			out = append(out, s.Targets...)
		}
	}
	slices.Sort(out)
	return out
}

// TestComposeWorkerConfig checks the demo workers' environment against the variables the worker reads,
// then hands the exact environment and command to the real binary (with -h, which parses and
// validates every variable and flag and starts nothing): `run` as the containers start it, and
// `status` as the drill runs it inside a container.
func TestComposeWorkerConfig(t *testing.T) {
	root := repoRoot(t)
	c := loadCompose(t, root)
	known := map[string]bool{}
	for _, v := range baton.EnvVars() {
		known[v[0]] = true
	}
	for _, v := range clients.EnvVars() {
		known[v] = true
	}
	for _, v := range contract.Env() { // the demo worker's own, beyond baton.EnvVars and clients.EnvVars
		known[v] = true
	}
	bin := demoWorker(t)
	for _, w := range demoWorkerServices(t, c) {
		s := c.Services[w]
		env := []string{}
		for _, kv := range os.Environ() {
			if !strings.HasPrefix(kv, "BATON_") {
				env = append(env, kv)
			}
		}
		for k, v := range s.Environment {
			if !known[k] {
				t.Errorf("%s: %s is not a variable of the demo worker (baton.EnvVars, clients.EnvVars, contract.Env)", w, k)
			}
			env = append(env, k+"="+v)
		}
		if len(s.Command) == 0 || s.Command[0] != "run" {
			t.Errorf("%s: command %v; want run ...", w, s.Command)
			continue
		}
		for _, args := range [][]string{append(slices.Clone(s.Command), "-h"), {"status", "-h"}} {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			cmd := exec.CommandContext(ctx, bin, args...)
			cmd.Env = env
			out, err := cmd.CombinedOutput()
			cancel()
			if err != nil {
				t.Errorf("%s: demo-worker %s with the service's environment: %v\n%s", w, strings.Join(args, " "), err, harness.Tail(string(out), 2000))
			}
		}
	}
	// The Dockerfile's entrypoint and port agree with the services.
	df := readFile(t, filepath.Join(root, "deploy", "demo-worker.Dockerfile"))
	for _, want := range []string{`ENTRYPOINT ["/usr/local/bin/demo-worker"]`, "EXPOSE 8080", "./cmd/demo-worker"} {
		if !strings.Contains(df, want) {
			t.Errorf("demo-worker.Dockerfile lacks %s", want)
		}
	}
}
