// Package validate checks Baton's Kubernetes manifests without a cluster: it renders a Kustomize
// overlay with sigs.k8s.io/kustomize/api (as `kubectl apply -k` would), decodes every object strictly
// into the Kubernetes API's Go types (k8s.io/api, and prometheus-operator's for the PodMonitor), so
// that an unknown or misspelt field fails, then holds the Baton workers it finds to Baton's own
// rules, computed from Baton's code rather than restated:
//
//   - grace: terminationGracePeriodSeconds covers the worker's graceful stop
//     (contract.DefaultShutdownTimeout of the configuration the manifest gives, from
//     baton.CheckedConfig.StopBudget) plus GraceMargin;
//   - startup: the startup probe waits at least the worker's start timeout;
//   - probes and ports: readiness on contract.PathReady, liveness on contract.PathLive, a startup
//     probe, all on the port named contract.HTTPPortName, which is the port the worker listens on;
//     the PodMonitor scrapes that port at contract.PathMetrics;
//   - service-links: enableServiceLinks is false;
//   - pdb: a PodDisruptionBudget selects the workers' pods;
//   - env: every BATON_* variable is one the worker knows (baton.EnvVars, clients.EnvVars,
//     contract.Env) and the configuration loads and checks as the worker would;
//   - images: every image is pinned (a digest, or a tag other than latest);
//   - version: the pods' app.kubernetes.io/version label, which BATON_VERSION reads, is the
//     worker image's tag;
//   - strategy, security, memory, egress, rbac: the rollout surges (maxSurge 1, maxUnavailable 0),
//     the worker runs as non-root on a read-only root filesystem, GOMEMLIMIT follows the memory limit,
//     a NetworkPolicy restricts the workers' egress, and Roles grant get and patch on pods only.
//
// A container is a Baton worker when its environment sets any BATON_* variable. The tests render
// every overlay under deploy/kubernetes/overlays and each bad fixture under testdata/bad/<rule>,
// which must fail with that rule. This is a separate Go module, so that Kubernetes' types never enter
// the library's go.mod; `make test` runs it. To check an overlay of your own:
//
//	cd deploy/kubernetes/validate && go run ./cmd/validate ../overlays/production path/to/yours
package validate
