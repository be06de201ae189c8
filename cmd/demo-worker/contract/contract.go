// Package contract is what the demo worker promises whoever deploys it: its own environment
// variables, the paths and the port of its HTTP server, and how long its graceful stop takes. The
// demo worker reads them from here, and so do the checks of its deployments (the Kubernetes
// manifests' validation in deploy/kubernetes/validate, the compose file's in integration/tests/ops),
// so that a manifest that names a path, a port or a variable the worker does not have fails a test
// instead of a rollout.
package contract

import (
	"time"

	"github.com/baton-run/baton"
)

// The demo worker's own environment variables, beyond baton.EnvVars and clients.EnvVars.
// Each has a flag too (demo-worker run -h).
const (
	EnvHTTPAddr        = "BATON_HTTP_ADDR"
	EnvLogLevel        = "BATON_LOG_LEVEL"
	EnvShutdownTimeout = "BATON_SHUTDOWN_TIMEOUT"
	EnvStartTimeout    = "BATON_START_TIMEOUT"
	EnvEvents          = "BATON_EVENTS"
	// EnvPodDeletionCost turns on the pod-deletion-cost annotation (package kubernetes/podcost): a
	// pod that leads more queues is removed later by a scale-in.
	EnvPodDeletionCost = "BATON_POD_DELETION_COST"
	// EnvPodName is the name of the worker's own pod (the downward API's metadata.name); default the
	// host name, which Kubernetes sets to the pod's name.
	EnvPodName = "BATON_POD_NAME"
	// EnvPodServiceAccountDir is where the pod's service-account token, CA and namespace are mounted
	// (default podcost.DefaultServiceAccountDir).
	EnvPodServiceAccountDir = "BATON_POD_SERVICE_ACCOUNT_DIR"
	// EnvDevstackRedis is written by integration/tools/cmd/devstack into its env file; it is
	// ignored, so that sourcing that file is enough to run a worker.
	EnvDevstackRedis = "BATON_DEVSTACK_REDIS"
)

// Env lists the demo worker's own BATON_* variables, which baton.LoadEnv must not refuse as unknown.
func Env() []string {
	return []string{EnvHTTPAddr, EnvLogLevel, EnvShutdownTimeout, EnvStartTimeout, EnvEvents,
		EnvPodDeletionCost, EnvPodName, EnvPodServiceAccountDir, EnvDevstackRedis}
}

// The paths the demo worker serves (GET) on its HTTP address.
const (
	// PathMetrics is Prometheus' scrape path.
	PathMetrics = "/metrics"
	// PathLive is the liveness check (baton.Node.LivenessCheck): it fails only when the process
	// holds a term it can no longer act for; a restart is the cure.
	PathLive = "/healthz"
	// PathReady is the readiness check (baton.Node.ReadinessCheck): red while the worker cannot
	// serve its queues (no etcd session, a takeover failing, a queue without its dispatcher).
	PathReady = "/readyz"
	// PathStatus is the Node's status as JSON (baton.Status).
	PathStatus = "/status"
)

// Paths lists every path the demo worker serves.
func Paths() []string { return []string{PathMetrics, PathLive, PathReady, PathStatus} }

// DefaultStartTimeout bounds the start (-start-timeout, BATON_START_TIMEOUT) unless told otherwise:
// the clients' connections, the etcd session, the first campaigns. A liveness check must not kill a
// worker that is still within it (Kubernetes: the startup probe's periodSeconds x failureThreshold).
const DefaultStartTimeout = 30 * time.Second

// DefaultHTTPPort is the port of the default HTTP address, DefaultHTTPAddr (BATON_HTTP_ADDR).
const DefaultHTTPPort = 8080

// DefaultHTTPAddr is where the HTTP server listens unless BATON_HTTP_ADDR or -http says otherwise.
const DefaultHTTPAddr = ":8080"

// HTTPPortName is the name a deployment gives the HTTP port (a Kubernetes containerPort name), by
// which probes and the PodMonitor refer to it.
const HTTPPortName = "http"

// The graceful stop (-shutdown-timeout, BATON_SHUTDOWN_TIMEOUT) is split between its two waits: the
// Temporal workers' drain (which begins with the quiesce of the runs this process leads), then the
// Node's stop (baton.CheckedConfig.StopBudget).
const (
	// MinDrain is the least time the Temporal workers get to finish the tasks they hold.
	MinDrain = time.Second
	// StopSlack is kept for the rest of the stop: the HTTP server, the clients, Fx itself.
	StopSlack = time.Second
)

// DefaultShutdownTimeout is -shutdown-timeout's default under c: the drain gets the whole bound of a
// planned step-down (the quiesce's and the terminate's, takeover.Config.HandOverBudget), the Node its
// stop budget, and StopSlack the rest. 19s with Baton's defaults. An orchestrator's grace period
// (Kubernetes' terminationGracePeriodSeconds, compose's stop_grace_period) exceeds it, so that the
// worker is never killed in the middle of its hand-over.
func DefaultShutdownTimeout(c baton.CheckedConfig) time.Duration {
	return c.Config().Takeover.HandOverBudget() + c.StopBudget() + StopSlack
}

// MinShutdownTimeout is the shortest -shutdown-timeout accepted under c: the Node's stop budget,
// MinDrain and StopSlack.
func MinShutdownTimeout(c baton.CheckedConfig) time.Duration {
	return c.StopBudget() + MinDrain + StopSlack
}
