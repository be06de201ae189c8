// Command demo-worker is a real worker application built with fxmodule, for staging drills and
// `make demo`: it campaigns for the dispatcher of every configured queue, runs the reference
// dispatcher workflow on a Temporal worker per queue, and serves Baton's metrics and state over HTTP.
//
// # demo-worker run (the default)
//
// Configuration comes from the environment first (the BATON_* variables of baton.EnvVars and
// clients.EnvVars, plus this command's own, listed by package contract: BATON_HTTP_ADDR,
// BATON_LOG_LEVEL, BATON_EVENTS, BATON_SHUTDOWN_TIMEOUT, BATON_START_TIMEOUT and the BATON_POD_*
// settings), then flags override it (see -h). Passwords and API keys are
// read only from BATON_ETCD_PASSWORD, BATON_REDIS_PASSWORD, BATON_TEMPORAL_API_KEY or the
// -etcd-password-file, -redis-password-file and -temporal-api-key-file flags: a secret in a flag
// would show in ps. Everything is validated before any connection is made.
//
// HTTP (default :8080): /metrics (Prometheus), /healthz (liveness), /readyz (readiness), /status
// (the Node's status as JSON). SIGTERM or SIGINT stops the worker within -shutdown-timeout: the
// Temporal workers stop polling and finish the tasks they hold first, then the Node resigns every
// term, so another worker takes over in milliseconds, then the HTTP server stops. The Node's share of
// the timeout is its stop budget (baton.CheckedConfig.StopBudget); the workers' drain, which begins
// with the quiesce of the runs this process leads, gets the rest but one second. The default (19s with
// Baton's defaults) gives the quiesce its whole bound (takeover.Config.QuiesceTimeout).
//
// In a Kubernetes pod (deploy/kubernetes, docs/kubernetes.md): the variables the kubelet injects
// for the namespace's Services (BATON_WORKER_SERVICE_HOST, ...) are ignored and named in one warning;
// -pod-deletion-cost (BATON_POD_DELETION_COST) keeps the pod's controller.kubernetes.io/pod-deletion-cost
// equal to the number of queues the worker leads (package kubernetes/podcost), so that a scale-in
// removes followers first.
//
// -events stdout (BATON_EVENTS) writes Baton's typed events (package event: terms, takeovers,
// step-downs, heartbeat trouble, handler runs, ...) as JSON lines on standard output, for tools: the
// drill and the e2e tests read them; logs go to standard error and are for people.
//
// # demo-worker status
//
// Prints who leads each queue, its dispatcher run, the age of its heartbeat and its workers, read
// straight from etcd, Temporal and Redis, so it works with every worker down. -queues is optional:
// without it (and without BATON_QUEUES) the queues are discovered from etcd and the worker registry.
// A source that cannot be read shows "?" in its columns and a warning after the table. The workers
// are shown live (ONLINE/DRAINING) and evicted (their heartbeat stopped); those that left cleanly
// (deregistered, as on every restart) are summed up under the table, and -offline lists every OFFLINE
// worker the registry still keeps. -json prints the same as JSON.
//
// # demo-worker load
//
// Produces dispatch requests for a drill: to the dispatcher of every queue (-queues), -rate per
// second per queue on average, at random (Poisson) times, each with its own dispatch key. -mode
// signal sends each with SignalWorkflow and retries a failed send until Temporal accepts it, as
// fire-and-forget producers do; -mode dispatch uses dispatcher.Producer, whose Dispatch returns once
// the request is recorded handled (each bounded by -settle). A summary line every -interval (sent, accepted, retried sends, and
// arrivals that waited for one of the -in-flight slots; in dispatch mode handled, rejected and
// errors instead of retries) and a final line. With -etcd-endpoints it
// reads the dispatch ledger back at the end, waiting up to -settle, and adds how many accepted
// requests were handled, never handled (not_handled) and handled more than once (handled_twice).
// -json prints every summary as one JSON object per line instead (package loadreport), for tools.
// It sends for -duration, or until SIGTERM or SIGINT.
//
// -metrics-addr HOST:PORT serves GET /metrics (Prometheus, the exporter and registry of `run`) while
// the load runs, until it exits. In dispatch mode it carries the Producer's metrics, which only the
// process that calls Dispatch exports, not the workers: baton_dispatch_producer_calls_total by
// outcome (handled, duplicate, rejected, timed_out, failed) and baton_dispatch_producer_latency_seconds,
// the series of the dashboard's Producer panels and of the BatonDispatchProducerFailing alert.
//
// # Exit codes
//
//	0  run: stopped cleanly after a signal; status: etcd answered (other sources may show "?");
//	   load: done (the final line says what was lost)
//	1  run: the stop failed or timed out; status: etcd could not be read; load: the ledger could
//	   not be read
//	2  invalid configuration or usage (the message names the field, flag or variable)
//	3  run, load: the start failed (a busy HTTP or -metrics-addr port, Temporal unreachable, etcd or
//	   Redis refusing the credentials or the TLS connection, -pod-deletion-cost outside a pod or
//	   without its service-account files, an Fx error)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/baton-run/baton/internal/opscli"
)

// Exit codes.
const (
	exitOK         = 0
	exitUnclean    = 1
	exitConfig     = 2
	exitStartError = 3
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run is the whole command: it reads the environment of the process, parses args and returns the
// exit code. ctx ends when the process is asked to stop.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return runWorker(ctx, args, stdout, stderr)
	case "status":
		return opscli.Status(ctx, "demo-worker", args, stdout, stderr, ownEnv()...)
	case "load":
		return runLoad(ctx, args, stdout, stderr)
	case "redis-acl":
		return opscli.RedisACL("demo-worker redis-acl", args, stdout, stderr, ownEnv()...)
	case "help":
		fmt.Fprintln(stdout, "usage: demo-worker [run] [flags] | demo-worker status [flags] | demo-worker load [flags] | demo-worker redis-acl [flags]   (-h for the flags of each)")
		return exitOK
	default:
		fmt.Fprintf(stderr, "demo-worker: unknown command %q (want run, status, load or redis-acl)\n", cmd)
		return exitConfig
	}
}
