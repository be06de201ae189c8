// Package shipping is an example application built on Baton, to copy: a worker process that owns the
// dispatcher of each of its queues with a workflow type and input of its own.
//
//   - workflow.go: the app's own dispatcher workflow (Dispatcher): Baton's dispatcher.Serve with the
//     app's start (an announcement) and its Input, which carries Baton's dispatcher.Input, kept
//     across continue-as-new; producers send it requests with dispatcher.Producer;
//   - activities.go: an activity that checks the run's token (ledger.ConfirmOwner) and makes a
//     write fenced by it (ledger.OwnerCmps), the supported token checks of package takeover;
//   - app.go: the Fx wiring -- the start hook that gives each run its Input, a leadership listener,
//     Baton's metrics exported to Prometheus, health checks (the dispatch ledger's included), and the
//     Temporal workers with the dispatch activities (the etcd ledger and the app's Handler);
//   - cmd/shipping: main, reading the clients from BATON_* variables (clients.LoadEnv).
//
// It serves /metrics (Prometheus, baton_* series), /healthz and /readyz (the Node's liveness and
// readiness), and /leading (the queues this process leads, as its listener heard them).
package shipping
