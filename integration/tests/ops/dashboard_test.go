package ops_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID          int    `json:"id"`
	Type        string `json:"type"`
	Title       string `json:"title"`
	Description string `json:"description"`
	Datasource  *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
	FieldConfig struct {
		Defaults struct {
			Unit string `json:"unit"`
		} `json:"defaults"`
	} `json:"fieldConfig"`
	Targets []struct {
		Expr       string `json:"expr"`
		RefID      string `json:"refId"`
		Datasource *struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's panels
}

func loadDashboard(t *testing.T, root string) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(root, "deploy", "grafana", "baton-dashboard.json"))), &d); err != nil {
		t.Fatalf("baton-dashboard.json: %v", err)
	}
	return d
}

// allPanels flattens rows.
func (d dashboard) allPanels() []panel {
	var out []panel
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			out = append(out, p)
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

// expressions returns every PromQL expression of the dashboard: panel targets and variable queries.
func (d dashboard) expressions() []string {
	var out []string
	for _, p := range d.allPanels() {
		for _, tg := range p.Targets {
			out = append(out, tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		switch q := v.Query.(type) {
		case map[string]any:
			if s, ok := q["query"].(string); ok && v.Type == "query" {
				out = append(out, s)
			}
		case string:
			if v.Type == "query" {
				out = append(out, q)
			}
		}
	}
	return out
}

func TestDashboard(t *testing.T) {
	root := repoRoot(t)
	d := loadDashboard(t, root)
	if d.Title == "" || d.UID == "" {
		t.Errorf("dashboard title %q, uid %q: both are needed for provisioning", d.Title, d.UID)
	}
	ids := map[int]bool{}
	graphs := 0
	for _, p := range d.allPanels() {
		name := fmt.Sprintf("panel %d (%s %q)", p.ID, p.Type, p.Title)
		if ids[p.ID] {
			t.Errorf("%s: duplicate panel id", name)
		}
		ids[p.ID] = true
		if strings.TrimSpace(p.Title) == "" {
			t.Errorf("%s: no title", name)
		}
		if len(strings.TrimSpace(p.Description)) < 40 {
			t.Errorf("%s: description %q is missing or too short to help on-call", name, p.Description)
		}
		if p.Type == "row" {
			continue
		}
		graphs++
		if p.FieldConfig.Defaults.Unit == "" {
			t.Errorf("%s: no unit (fieldConfig.defaults.unit)", name)
		}
		if p.Datasource == nil || p.Datasource.UID != "${DS_PROMETHEUS}" {
			t.Errorf("%s: datasource %+v; want uid ${DS_PROMETHEUS}", name, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: no query", name)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s target %s: empty expression", name, tg.RefID)
			}
			if tg.Datasource != nil && tg.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("%s target %s: datasource uid %q; want ${DS_PROMETHEUS}", name, tg.RefID, tg.Datasource.UID)
			}
		}
	}
	if graphs < 12 {
		t.Errorf("%d panels; the issue asks for at least a dozen views", graphs)
	}
	hasDS := false
	for _, v := range d.Templating.List {
		if v.Name == "DS_PROMETHEUS" && v.Type == "datasource" {
			hasDS = true
		}
	}
	if !hasDS {
		t.Error("no datasource variable DS_PROMETHEUS: ${DS_PROMETHEUS} would not resolve in a provisioned dashboard")
	}

	// Every subject the issue asks for has a panel.
	titles := ""
	for _, p := range d.allPanels() {
		titles += strings.ToLower(p.Title) + "\n"
	}
	for _, want := range []string{"leaders per queue", "dispatcher runs per queue", "current leader", "takeovers",
		"takeover latency p50 / p95", "stale dispatcher", "terminated", "cleanup errors", "workers evicted",
		"live workers", "step-downs", "reconcile cycle duration", "reconcile cycles by result"} {
		if !strings.Contains(titles, want) {
			t.Errorf("no panel titled with %q", want)
		}
	}

	// The provisioned datasource is the variable's default, and the provider points where compose
	// mounts the dashboard.
	var ds struct {
		Datasources []struct {
			UID, Type, URL string
		} `yaml:"datasources"`
	}
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(root, "deploy", "grafana", "provisioning", "datasources", "prometheus.yaml"))), &ds); err != nil {
		t.Fatal(err)
	}
	if len(ds.Datasources) != 1 || ds.Datasources[0].UID != "prometheus" || ds.Datasources[0].Type != "prometheus" {
		t.Errorf("provisioned datasources %+v; want one prometheus datasource with uid prometheus", ds.Datasources)
	}
}

// TestDashboardQueriesParse runs every dashboard expression through promtool's PromQL parser, as
// recording rules of a throwaway rule file (Grafana's variables replaced by plain values).
func TestDashboardQueriesParse(t *testing.T) {
	root := repoRoot(t)
	d := loadDashboard(t, root)
	repl := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h",
		"$project", ".*", "$queue", ".*", "${DS_PROMETHEUS}", "prometheus")
	type rec struct {
		Record string `yaml:"record"`
		Expr   string `yaml:"expr"`
	}
	var rules []rec
	for i, e := range d.expressions() {
		if strings.HasPrefix(e, "label_values(") {
			// Grafana's own function: check the selector inside it.
			inner := strings.TrimSuffix(strings.TrimPrefix(e, "label_values("), ")")
			sel, _, _ := strings.Cut(inner, ", ")
			e = "count(" + sel + ")"
		}
		rules = append(rules, rec{Record: fmt.Sprintf("dashboard:expr_%d", i), Expr: repl.Replace(e)})
	}
	out, err := yaml.Marshal(map[string]any{"groups": []map[string]any{{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Log(strings.TrimSpace(runPromtool(t, root, "check", "rules", path)))
}
