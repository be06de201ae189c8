package ops_test

import (
	"net/url"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// runbookBase is where every alert's runbook_url points: the section of docs/runbook.md named after
// the alert.
const runbookBase = "https://github.com/baton-run/baton/blob/main/docs/runbook.md#"

type ruleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []rule `yaml:"rules"`
	} `yaml:"groups"`
}

type rule struct {
	Record      string            `yaml:"record"`
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func (f ruleFile) alerts() []rule {
	var out []rule
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Alert != "" {
				out = append(out, r)
			}
		}
	}
	return out
}

func (f ruleFile) records() map[string]string {
	out := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			if r.Record != "" {
				out[r.Record] = r.Expr
			}
		}
	}
	return out
}

func loadRules(t *testing.T, root string) ruleFile {
	t.Helper()
	var f ruleFile
	if err := yaml.Unmarshal([]byte(readFile(t, filepath.Join(root, "deploy", "prometheus", "alerts.yml"))), &f); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	return f
}

type alertCases struct{ firing, silent int }

// parseAlertTests counts, per alert, the promtool cases that expect it firing and those that expect
// no alert.
func parseAlertTests(t *testing.T, text string) map[string]alertCases {
	t.Helper()
	var f struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			AlertRuleTest []struct {
				EvalTime  string           `yaml:"eval_time"`
				Alertname string           `yaml:"alertname"`
				ExpAlerts []map[string]any `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal([]byte(text), &f); err != nil {
		t.Fatalf("alerts_test.yml: %v", err)
	}
	if !slices.Contains(f.RuleFiles, "alerts.yml") {
		t.Errorf("alerts_test.yml: rule_files %v does not load alerts.yml", f.RuleFiles)
	}
	out := map[string]alertCases{}
	for _, tc := range f.Tests {
		for _, a := range tc.AlertRuleTest {
			c := out[a.Alertname]
			if len(a.ExpAlerts) > 0 {
				c.firing++
			} else {
				c.silent++
			}
			out[a.Alertname] = c
		}
	}
	return out
}

// The six alerts of the issue (PRD R12, phases 2 and 3), the reconciler-stalled guard, and the three of
// the supervised run (a queue led without a run, runs closed behind the owner's back, tokens that went
// back), the age of the last successful reconcile cycle (issue #12), and the Producer's failure rate
// (issue #31), and runs that fail right after their start (issue #41).
var wantAlerts = []string{
	"BatonQueueNoLeader", "BatonDuplicateDispatcher", "BatonStaleDispatchers", "BatonTakeoverSlow",
	"BatonReconcilerErrors", "BatonReconcilerStalled", "BatonLeadershipFlapping",
	"BatonQueueNoDispatcher", "BatonDispatcherRunsClosing", "BatonFencingTokenRegression",
	"BatonReconcilerSilent", "BatonDispatchProducerFailing", "BatonDispatcherStalled", "BatonDispatchRequestsWaiting",
	"BatonDispatcherRunsFailing",
}

// TestAlertRules checks what promtool does not: every alert has a severity, a summary, a description
// and a runbook_url whose anchor is a section of docs/runbook.md.
func TestAlertRules(t *testing.T) {
	root := repoRoot(t)
	rules := loadRules(t, root)
	anchors := markdownAnchors(readFile(t, filepath.Join(root, "docs", "runbook.md")))
	var names []string
	for _, a := range rules.alerts() {
		names = append(names, a.Alert)
		switch a.Labels["severity"] {
		case "critical", "warning":
		default:
			t.Errorf("%s: severity label %q; want critical or warning", a.Alert, a.Labels["severity"])
		}
		for _, k := range []string{"summary", "description", "runbook_url"} {
			if strings.TrimSpace(a.Annotations[k]) == "" {
				t.Errorf("%s: annotation %s is missing", a.Alert, k)
			}
		}
		u := a.Annotations["runbook_url"]
		if !strings.HasPrefix(u, runbookBase) {
			t.Errorf("%s: runbook_url %q does not start with %s", a.Alert, u, runbookBase)
			continue
		}
		anchor := strings.TrimPrefix(u, runbookBase)
		if _, err := url.Parse(u); err != nil || !anchors[anchor] {
			t.Errorf("%s: runbook_url anchor #%s is not a heading of docs/runbook.md", a.Alert, anchor)
		}
	}
	for _, want := range wantAlerts {
		if !slices.Contains(names, want) {
			t.Errorf("alert %s is missing from alerts.yml (have %v)", want, names)
		}
	}
}

// markdownAnchors returns the anchors GitHub derives from the headings of a Markdown document:
// lower case, punctuation other than '-' and '_' dropped, spaces to '-'.
func markdownAnchors(md string) map[string]bool {
	out := map[string]bool{}
	inFence := false
	for line := range strings.SplitSeq(md, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(h) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
				b.WriteRune(r)
			}
		}
		out[b.String()] = true
	}
	return out
}

// metricRef matches identifiers that look like Baton's metric names in PromQL; recording rules
// (baton:...) are matched whole so that they can be resolved to the rules that define them.
var metricRef = regexp.MustCompile(`\b(?:baton|dispatcher)[a-zA-Z0-9_:]*`)

// metricNames returns the metric names an expression uses, recording rules resolved to the metrics
// their own expressions use. Unknown recording rules are returned as they are, so that the check
// against a scrape reports them.
func metricNames(expr string, records map[string]string) []string {
	seen := map[string]bool{}
	var walk func(string, int)
	walk = func(e string, depth int) {
		for _, m := range metricRef.FindAllString(stripStrings(e), -1) {
			if def, ok := records[m]; ok && depth < 5 {
				walk(def, depth+1)
				continue
			}
			seen[m] = true
		}
	}
	walk(expr, 0)
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// stripStrings removes quoted label values, so that a value that happens to start with "baton" is not
// taken for a metric name.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)

func stripStrings(expr string) string { return quoted.ReplaceAllString(expr, `""`) }

func TestMetricNamesParser(t *testing.T) {
	records := map[string]string{"baton:x:increase10m": `increase(baton_stepdowns_total{cause!~"baton_fake"}[10m])`}
	got := metricNames(`histogram_quantile(0.95, sum by (le) (rate(baton_takeover_latency_seconds_bucket[5m])))
		/ on (project) baton_dispatcher_stale{queue="baton_nope"} + baton:x:increase10m + baton:undefined`, records)
	want := []string{"baton:undefined", "baton_dispatcher_stale", "baton_stepdowns_total", "baton_takeover_latency_seconds_bucket"}
	if !slices.Equal(got, want) {
		t.Fatalf("metricNames = %v, want %v", got, want)
	}
}
