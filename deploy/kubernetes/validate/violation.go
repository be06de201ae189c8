package validate

import "time"

// The rules, as Violation.Rule names them. doc.go says what each holds.
const (
	RuleStrict       = "strict"
	RuleGrace        = "grace"
	RuleStartup      = "startup"
	RuleProbes       = "probes"
	RulePorts        = "ports"
	RuleServiceLinks = "service-links"
	RulePDB          = "pdb"
	RuleEnv          = "env"
	RuleImages       = "images"
	RuleVersion      = "version"
	RuleStrategy     = "strategy"
	RuleSecurity     = "security"
	RuleMemory       = "memory"
	RuleEgress       = "egress"
	RuleRBAC         = "rbac"
)

// Rules lists every rule; each has a bad fixture under testdata/bad/<rule>.
func Rules() []string {
	return []string{RuleStrict, RuleGrace, RuleStartup, RuleProbes, RulePorts, RuleServiceLinks, RulePDB, RuleEnv,
		RuleImages, RuleVersion, RuleStrategy, RuleSecurity, RuleMemory, RuleEgress, RuleRBAC}
}

// GraceMargin is what terminationGracePeriodSeconds keeps beyond the worker's graceful stop: the
// kubelet counts the grace period from SIGTERM, and the process still exits, its runtime stops and the
// container runtime reaps it after the stop's bound. The compose stack keeps 6s (stop_grace_period
// 25s for a 19s stop).
const GraceMargin = 5 * time.Second

// Violation is one object breaking one rule.
type Violation struct {
	Rule    string // one of Rules
	Object  string // kind/name, and the container where it matters
	Message string // what is wrong and what the rule wants
}

func (v Violation) Error() string { return v.Rule + ": " + v.Object + ": " + v.Message }
