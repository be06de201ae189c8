package validate

import (
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/baton-run/baton/cmd/demo-worker/contract"
)

// Dir renders the kustomization in dir and checks it: strict decoding, then every rule. An error is
// a kustomization that does not build; the violations are what the build holds against the rules.
func Dir(dir string) ([]Violation, error) {
	ms, err := Render(dir)
	if err != nil {
		return nil, err
	}
	o, bad := Decode(ms)
	return append(bad, Check(o)...), nil
}

// Check holds decoded objects to Baton's rules.
func Check(o *Objects) []Violation {
	ws := workers(o)
	if len(ws) == 0 {
		return []Violation{{RuleEnv, "(render)", "no container sets a BATON_* variable: there is no Baton worker to check"}}
	}
	var out []Violation
	for _, w := range ws {
		out = append(out, w.bad...)
		for _, rule := range []func(*worker) []Violation{checkGrace, checkStartup, checkProbes, checkPorts,
			checkPod, checkVersion, checkSecurity, checkMemory} {
			out = append(out, rule(w)...)
		}
		out = append(out, checkSelectedBy(o, w)...)
	}
	out = append(out, checkImages(o)...)
	out = append(out, checkRBAC(o)...)
	out = append(out, checkPodMonitors(o, ws)...)
	return out
}

func violation(rule string, w *worker, format string, args ...any) []Violation {
	return []Violation{{rule, w.id(), fmt.Sprintf(format, args...)}}
}

// checkGrace: the kubelet waits for the worker's whole graceful stop before it kills it.
func checkGrace(w *worker) []Violation {
	if w.checked.Config().Project == "" {
		return nil // the configuration does not load: RuleEnv says why
	}
	stop, err := w.duration("shutdown-timeout", contract.EnvShutdownTimeout, contract.DefaultShutdownTimeout(w.checked))
	if err != nil {
		return violation(RuleGrace, w, "%v", err)
	}
	if least := contract.MinShutdownTimeout(w.checked); stop < least {
		return violation(RuleGrace, w, "the shutdown timeout %v is below the worker's least %v (contract.MinShutdownTimeout): the worker would refuse it", stop, least)
	}
	grace := time.Duration(corev1.DefaultTerminationGracePeriodSeconds) * time.Second
	if g := w.dep.Spec.Template.Spec.TerminationGracePeriodSeconds; g != nil {
		grace = time.Duration(*g) * time.Second
	}
	if need := stop + GraceMargin; grace < need {
		return violation(RuleGrace, w, "terminationGracePeriodSeconds is %v, less than the worker's graceful stop %v "+
			"(-shutdown-timeout: the drain, then the Node's stop budget baton.CheckedConfig.StopBudget %v) plus GraceMargin %v = %v: "+
			"the kubelet would kill it in the middle of its hand-over", grace, stop, w.checked.StopBudget(), GraceMargin, need)
	}
	return nil
}

// checkStartup: the startup probe waits as long as the start may take.
func checkStartup(w *worker) []Violation {
	start, err := w.duration("start-timeout", contract.EnvStartTimeout, contract.DefaultStartTimeout)
	if err != nil {
		return violation(RuleStartup, w, "%v", err)
	}
	p := w.c.StartupProbe
	if p == nil {
		return violation(RuleProbes, w, "has no startupProbe: the liveness probe would judge a worker that is still starting")
	}
	period, failures := p.PeriodSeconds, p.FailureThreshold
	if period == 0 {
		period = 10 // Kubernetes' default
	}
	if failures == 0 {
		failures = 3 // Kubernetes' default
	}
	budget := time.Duration(p.InitialDelaySeconds+period*failures) * time.Second
	if budget < start {
		return violation(RuleStartup, w, "the startupProbe waits %v (initialDelaySeconds + periodSeconds x failureThreshold), less than the start timeout %v (-start-timeout, %s)",
			budget, start, contract.EnvStartTimeout)
	}
	return nil
}

// checkProbes: readiness, liveness and startup probes ask the worker's own paths on its HTTP port.
func checkProbes(w *worker) []Violation {
	var out []Violation
	for _, p := range []struct {
		kind  string
		probe *corev1.Probe
		paths []string
	}{
		{"readinessProbe", w.c.ReadinessProbe, []string{contract.PathReady}},
		{"livenessProbe", w.c.LivenessProbe, []string{contract.PathLive}},
		{"startupProbe", w.c.StartupProbe, []string{contract.PathLive, contract.PathReady}},
	} {
		switch {
		case p.probe == nil:
			out = append(out, violation(RuleProbes, w, "has no %s", p.kind)...)
		case p.probe.HTTPGet == nil:
			out = append(out, violation(RuleProbes, w, "%s is not an httpGet of the worker's HTTP server", p.kind)...)
		case !slices.Contains(p.paths, p.probe.HTTPGet.Path):
			out = append(out, violation(RuleProbes, w, "%s asks %q; the worker serves it at %s (cmd/demo-worker/contract)", p.kind, p.probe.HTTPGet.Path, strings.Join(p.paths, " or "))...)
		case p.probe.HTTPGet.Port.String() != contract.HTTPPortName:
			out = append(out, violation(RuleProbes, w, "%s asks port %s; want the port named %q", p.kind, p.probe.HTTPGet.Port.String(), contract.HTTPPortName)...)
		}
	}
	return out
}

// checkPorts: the port named contract.HTTPPortName is the one the worker listens on.
func checkPorts(w *worker) []Violation {
	listen, err := w.httpPort()
	if err != nil {
		return violation(RulePorts, w, "%v", err)
	}
	for _, p := range w.c.Ports {
		if p.Name == contract.HTTPPortName {
			if p.ContainerPort != listen {
				return violation(RulePorts, w, "port %q is %d, but the worker listens on %d (-http, %s)", p.Name, p.ContainerPort, listen, contract.EnvHTTPAddr)
			}
			return nil
		}
	}
	return violation(RulePorts, w, "has no port named %q (the worker's HTTP server, %d)", contract.HTTPPortName, listen)
}

// checkPod: no service links, and the rollout surges.
func checkPod(w *worker) []Violation {
	var out []Violation
	spec := w.dep.Spec.Template.Spec
	if spec.EnableServiceLinks == nil || *spec.EnableServiceLinks {
		out = append(out, violation(RuleServiceLinks, w, "enableServiceLinks must be false: every Service of the namespace adds <SERVICE>_* variables to the worker's environment")...)
	}
	s := w.dep.Spec.Strategy
	ru := s.RollingUpdate
	if s.Type != "RollingUpdate" || ru == nil || ru.MaxSurge == nil || ru.MaxUnavailable == nil ||
		ru.MaxSurge.String() != "1" || ru.MaxUnavailable.String() != "0" {
		out = append(out, violation(RuleStrategy, w, "the rollout must be RollingUpdate with maxSurge 1 and maxUnavailable 0 "+
			"(the rollout bench, docs/benchmarks.md: surge moves each queue 1.00 times, stop-then-start 1.22), got %+v", s)...)
	}
	return out
}

// selects reports whether sel selects pods labelled podLabels.
func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && sel != nil && !s.Empty() && s.Matches(labels.Set(podLabels))
}
