package validate

import (
	"fmt"
	"slices"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/baton-run/baton/cmd/demo-worker/contract"
)

// checkSelectedBy: the Deployment selects its pods, a PodDisruptionBudget and a NetworkPolicy select them.
func checkSelectedBy(o *Objects, w *worker) []Violation {
	var out []Violation
	podLabels := w.dep.Spec.Template.Labels
	if !selects(w.dep.Spec.Selector, podLabels) {
		out = append(out, violation(RulePDB, w, "the Deployment's selector does not select its own pods")...)
	}
	pdb := false
	for _, p := range o.PDBs {
		if p.Namespace != w.dep.Namespace || !selects(p.Spec.Selector, podLabels) {
			continue
		}
		pdb = true
		if p.Spec.UnhealthyPodEvictionPolicy == nil || *p.Spec.UnhealthyPodEvictionPolicy != "AlwaysAllow" {
			out = append(out, Violation{RulePDB, "PodDisruptionBudget/" + p.Name, "unhealthyPodEvictionPolicy must be AlwaysAllow: " +
				"in an etcd outage every worker is unready, and the budget would block every node drain"})
		}
	}
	if !pdb {
		out = append(out, violation(RulePDB, w, "no PodDisruptionBudget selects the workers' pods (labels %v): a drain could evict them all at once", podLabels)...)
	}
	for _, np := range o.NetworkPolicies {
		// An empty podSelector selects every pod of the namespace.
		sel := np.Spec.PodSelector
		all := len(sel.MatchLabels) == 0 && len(sel.MatchExpressions) == 0
		if np.Namespace == w.dep.Namespace && (all || selects(&sel, podLabels)) && slices.Contains(np.Spec.PolicyTypes, "Egress") {
			return out
		}
	}
	return append(out, violation(RuleEgress, w, "no NetworkPolicy with policyTypes Egress selects the workers' pods: their egress is not limited to etcd, Temporal and Redis")...)
}

// checkVersion: BATON_VERSION is the image's tag, so a rollout moves queues forward to the new version.
func checkVersion(w *worker) []Violation {
	_, tag, _ := splitImage(w.c.Image)
	v, ok := w.env["BATON_VERSION"]
	switch {
	case !ok:
		return violation(RuleVersion, w, "BATON_VERSION is not set: every worker would publish the same version, and a rollout would move queues back and forth")
	case !v.known:
		return violation(RuleVersion, w, "BATON_VERSION comes from %s, which the pod does not have", v.fromRef)
	case tag != "" && v.value != tag:
		return violation(RuleVersion, w, "BATON_VERSION is %q (%s), but the image %s is tagged %q: set them together", v.value, orLiteral(v.fromRef), w.c.Image, tag)
	}
	return nil
}

func orLiteral(ref string) string {
	if ref == "" {
		return "a literal value"
	}
	return ref
}

// checkSecurity: the worker runs as non-root, on a read-only root filesystem, without privileges.
func checkSecurity(w *worker) []Violation {
	pod, c := w.dep.Spec.Template.Spec.SecurityContext, w.c.SecurityContext
	nonRoot := c != nil && c.RunAsNonRoot != nil && *c.RunAsNonRoot || (c == nil || c.RunAsNonRoot == nil) && pod != nil && pod.RunAsNonRoot != nil && *pod.RunAsNonRoot
	var missing []string
	if !nonRoot {
		missing = append(missing, "runAsNonRoot: true")
	}
	if c == nil || c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		missing = append(missing, "readOnlyRootFilesystem: true")
	}
	if c == nil || c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		missing = append(missing, "allowPrivilegeEscalation: false")
	}
	if c == nil || c.Capabilities == nil || !slices.Contains(c.Capabilities.Drop, "ALL") {
		missing = append(missing, "capabilities: {drop: [ALL]}")
	}
	if len(missing) > 0 {
		return violation(RuleSecurity, w, "the worker needs no privileges and writes no files; its securityContext lacks %s", strings.Join(missing, ", "))
	}
	return nil
}

// checkMemory: GOMEMLIMIT follows the container's memory limit.
func checkMemory(w *worker) []Violation {
	if _, ok := w.c.Resources.Limits["memory"]; !ok {
		return violation(RuleMemory, w, "has no memory limit")
	}
	for _, e := range w.c.Env {
		if e.Name != "GOMEMLIMIT" {
			continue
		}
		if f := e.ValueFrom; f != nil && f.ResourceFieldRef != nil && f.ResourceFieldRef.Resource == "limits.memory" &&
			(f.ResourceFieldRef.ContainerName == "" || f.ResourceFieldRef.ContainerName == w.c.Name) {
			return nil
		}
		return violation(RuleMemory, w, "GOMEMLIMIT must come from this container's limits.memory (resourceFieldRef), so the two cannot drift apart")
	}
	return violation(RuleMemory, w, "GOMEMLIMIT is not set from limits.memory: the Go runtime would not collect harder before the OOM killer strikes")
}

// checkImages: every container's image is pinned.
func checkImages(o *Objects) []Violation {
	var out []Violation
	for _, d := range o.Deployments {
		spec := d.Spec.Template.Spec
		for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
			if _, tag, digest := splitImage(c.Image); digest == "" && (tag == "" || tag == "latest") {
				out = append(out, Violation{RuleImages, "Deployment/" + d.Name + " container " + c.Name,
					fmt.Sprintf("image %q is not pinned: give it a version tag (not latest) or a digest", c.Image)})
			}
		}
	}
	return out
}

// splitImage splits an image reference into repository, tag and digest (each may be empty).
func splitImage(ref string) (repo, tag, digest string) {
	repo, digest, _ = strings.Cut(ref, "@")
	if colon := strings.LastIndex(repo, ":"); colon > strings.LastIndex(repo, "/") {
		repo, tag = repo[:colon], repo[colon+1:]
	}
	return repo, tag, digest
}

// checkRBAC: a worker may get and patch pods (its own pod's deletion cost) and nothing else.
func checkRBAC(o *Objects) []Violation {
	var out []Violation
	for _, c := range o.ClusterRoles {
		out = append(out, Violation{RuleRBAC, "ClusterRole/" + c.Name, "a worker needs no cluster-wide permission"})
	}
	for _, c := range o.ClusterBindings {
		out = append(out, Violation{RuleRBAC, "ClusterRoleBinding/" + c.Name, "a worker needs no cluster-wide permission"})
	}
	for _, r := range o.Roles {
		for _, rule := range r.Rules {
			if !onlyPodsGetPatch(rule) {
				out = append(out, Violation{RuleRBAC, "Role/" + r.Name, fmt.Sprintf("grants %v on %v %v: a worker needs get and patch on pods only", rule.Verbs, rule.APIGroups, rule.Resources)})
			}
		}
	}
	return out
}

func onlyPodsGetPatch(r rbacv1.PolicyRule) bool {
	sub := func(have, allowed []string) bool {
		return len(have) > 0 && !slices.ContainsFunc(have, func(s string) bool { return !slices.Contains(allowed, s) })
	}
	return sub(r.APIGroups, []string{""}) && sub(r.Resources, []string{"pods"}) && sub(r.Verbs, []string{"get", "patch"}) && len(r.NonResourceURLs) == 0
}

// checkPodMonitors: a PodMonitor of the workers scrapes the worker's metrics path on its HTTP port.
func checkPodMonitors(o *Objects, ws []*worker) []Violation {
	var out []Violation
	for _, pm := range o.PodMonitors {
		sel := pm.Spec.Selector
		if !slices.ContainsFunc(ws, func(w *worker) bool { return selects(&sel, w.dep.Spec.Template.Labels) }) {
			out = append(out, Violation{RulePorts, "PodMonitor/" + pm.Name, "selects no worker's pods"})
			continue
		}
		for _, ep := range pm.Spec.PodMetricsEndpoints {
			if ep.Port == nil || *ep.Port != contract.HTTPPortName || ep.Path != contract.PathMetrics {
				out = append(out, Violation{RulePorts, "PodMonitor/" + pm.Name, fmt.Sprintf("scrapes port %v path %q; the worker serves its metrics at %s on the port named %q",
					deref(ep.Port), ep.Path, contract.PathMetrics, contract.HTTPPortName)})
			}
		}
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}
