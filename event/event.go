// Package event is Baton's stream of what happens to the ownership of queues: terms that start and
// end, takeovers, step-downs, heartbeat trouble, stale runs the reconciler ends, evicted workers and
// queues handed over. It is for tools and tests (a drill, an audit trail, an application's own
// telemetry) that must learn what happened without reading log text: log messages are for people
// and may change in any release; a Kind and the fields it documents are a contract.
//
// Each Kind is defined once, here, and used from here (a test holds every name to this one
// definition). A component emits an Event through the Sink in its Config; the root package's Config
// passes one Sink to every component. A Sink is called synchronously on Baton's own paths (a
// takeover, a term's end): it must return quickly and must not call back into Baton.
package event

import "time"

// Kind names what happened. Values are stable: baton.<component>.<what>.
type Kind string

// The kinds of events, by the component that emits them.
const (
	// TermStarted: this process won an election (Key, Token; Queue is the election's queue, or the
	// reconciler's election name). At is when the term started.
	TermStarted Kind = "baton.election.term_started"
	// TermEnded: a term of this process ended (Key, Token; Reason: one of the Ended* reasons; Err: the
	// cause's text). At is when it ended; Started, when it began. It is emitted just after the term's
	// context is cancelled: a Sink never delays a leader's stop.
	TermEnded Kind = "baton.election.term_ended"
	// ResignFailed: a resigning term could not delete its key; the lease expiry hands it over (Err).
	ResignFailed Kind = "baton.election.resign_failed"
	// SessionLost: an Elector's etcd session was lost (Err: why); every term on it ended (each with its
	// own TermEnded).
	SessionLost Kind = "baton.election.session_lost"

	// TakenOver: the term's dispatcher run is open (RunID, PriorRunID: the run it replaced, Reason:
	// the takeover path).
	TakenOver Kind = "baton.takeover.taken_over"
	// PriorTerminated: a takeover terminated the prior owner's open run (PriorRunID, Peer: its owner,
	// PeerToken: its token).
	PriorTerminated Kind = "baton.takeover.prior_terminated"
	// SteppedDown: a gracefully stepping-down owner terminated its own run (RunID: the chain's current
	// run as the owner knew it).
	SteppedDown Kind = "baton.takeover.stepped_down"

	// HeartbeatRefused: the owner's heartbeat found a newer owner's entry (Err).
	HeartbeatRefused Kind = "baton.heartbeat.refused"
	// HeartbeatFailed: a heartbeat write failed; the next interval retries (Err).
	HeartbeatFailed Kind = "baton.heartbeat.failed"
	// HeartbeatRecovered: a heartbeat write succeeded after failures.
	HeartbeatRecovered Kind = "baton.heartbeat.recovered"

	// StaleRunTerminated: the reconciler leader terminated a run whose heartbeat went stale (RunID,
	// Token: the entry's token).
	StaleRunTerminated Kind = "baton.reconciler.stale_run_terminated"
	// StaleRunClosed: a stale entry's run was already closed; the entry was removed (RunID, Token).
	StaleRunClosed Kind = "baton.reconciler.stale_run_closed"

	// WorkerEvicted: a queue's leader evicted a worker whose registry heartbeat stopped (Peer).
	WorkerEvicted Kind = "baton.registry.worker_evicted"

	// HandlerRan: the dispatch activity ran the application's handler for a request (DispatchKey;
	// Peer and Token: the owner whose run dispatched it; Err: the handler's error, if any). Emitted by
	// the worker that ran the activity, which need not lead the queue.
	HandlerRan Kind = "baton.dispatch.handler_ran"

	// HandingOver: package balance is about to resign a term to move the queue (Reason: "shed",
	// "drain", "rollout", ...; Peer: the successor it expects, if any).
	HandingOver Kind = "baton.balance.handing_over"
)

// The reasons of a TermEnded event.
const (
	EndedResigned    = "resigned"     // this process handed the term over (a stop, a balance move)
	EndedSessionLost = "session_lost" // its etcd session (lease) was lost or expired
	EndedKeyLost     = "key_lost"     // its key was deleted or replaced behind its back
	EndedClosed      = "closed"       // its Elector was closed
	EndedOther       = "other"        // anything else; Err says what
)

// Kinds lists every Kind, in the order above.
var Kinds = []Kind{TermStarted, TermEnded, ResignFailed, SessionLost, TakenOver, PriorTerminated, SteppedDown,
	HeartbeatRefused, HeartbeatFailed, HeartbeatRecovered, StaleRunTerminated, StaleRunClosed,
	WorkerEvicted, HandlerRan, HandingOver}

// Event is one thing that happened. Fields a Kind does not document are empty. JSON field names are
// part of the contract.
type Event struct {
	Kind Kind `json:"event"`
	// At is when it happened, by the emitting process's clock.
	At time.Time `json:"at"`
	// Project and Queue the event is about. For the reconciler's election, Queue is that election's
	// name (reconciler.ElectionName).
	Project string `json:"project,omitempty"`
	Queue   string `json:"queue,omitempty"`
	// ServerID is the emitting process's ID.
	ServerID string `json:"server_id,omitempty"`
	// Key is the term's election key in etcd.
	Key string `json:"key,omitempty"`
	// Token is the term's fencing token (its key's create revision); 0 when the event has no term.
	Token int64 `json:"token,omitempty"`
	// Started is when the ended term started (TermEnded).
	Started time.Time `json:"started,omitzero"`
	// WorkflowID, RunID and PriorRunID name the dispatcher runs involved.
	WorkflowID string `json:"workflow_id,omitempty"`
	RunID      string `json:"run_id,omitempty"`
	PriorRunID string `json:"prior_run_id,omitempty"`
	// DispatchKey is a dispatch request's key (dispatcher.Request.Key).
	DispatchKey string `json:"dispatch_key,omitempty"`
	// Peer is the other process involved (a prior owner, an evicted worker, an expected successor),
	// and PeerToken its token where it has one.
	Peer      string `json:"peer,omitempty"`
	PeerToken int64  `json:"peer_token,omitempty"`
	// Reason says why, in words a Kind documents (a term's end cause, a takeover path, a balance
	// reason).
	Reason string `json:"reason,omitempty"`
	// Err is the error's text, for events about a failure.
	Err string `json:"error,omitempty"`
}

// Sink receives events. A nil Sink drops them.
type Sink func(Event)

// Emit calls s with e, unless s is nil.
func (s Sink) Emit(e Event) {
	if s != nil {
		s(e)
	}
}

// ErrText is err's text, or "" for nil: for Event.Err.
func ErrText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
