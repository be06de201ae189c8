// Package ownership runs this process's ownership of one queue's dispatcher, term by term, and keeps
// the one record of it.
//
// For every term the election grants (Queue.Lead, the election's OnElected), a Queue takes the
// dispatcher over (takeover: terminate any prior run, start its own), then supervises it until the
// term ends: it heartbeats the chain's current run in Redis (heartbeat), follows continue-as-new,
// checks every progress interval that the run makes progress (package progress), replaces a run that
// closed behind its back (bounded per term, backed off) and evicts the queue's dead workers
// (registry). A graceful resign (Queue.HandOver, OnResign) steps down as the takeover policy says; a
// step-down of any kind (Queue.SteppedDown) clears the term.
//
// What it learns is kept in one place, read with Queue.Snapshot: the root package's Status, its
// readiness and liveness checks, its metrics, IsLeading and Term all read it, and keep no copy.
//
// The lifecycle's collaborators are interfaces (Taker, Beater, Evictor, Balancer, the progress
// Probe) and its time comes from an injected clock, so that it is tested with fakes and a fake clock
// beside the real-server tests of the integration module. Balance, which decides who stands for a
// queue, and this package meet in one narrow interface: Balancer.
package ownership
