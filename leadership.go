package baton

import (
	"context"
	"sync"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// Lead is one term of this process as a queue's owner, as OnStartedLeading reports it.
type Lead struct {
	Queue string
	// Token is the term's fencing token (the etcd create revision of its key).
	Token int64
	// Run is the dispatcher run the takeover started or reused for the term.
	Run takeover.Run
	// Term is the live election term. Its Guard commits the application's own etcd writes only while
	// the term holds, its Context ends with it, and its Confirm asks etcd. Resigning it ends Baton's
	// term too: the queue is campaigned for again.
	Term *election.Term
}

// Listener receives a Node's leadership events. Every field is optional.
//
// Calls never block the election: the Node queues each event and returns at once, and a goroutine
// of the Node delivers them, one at a time for a given listener and queue, in the order they
// happened. Different queues, and different listeners, are delivered independently, so a slow
// callback delays only later events of its own listener and queue, never a step-down. For one queue:
// OnStartedLeading of a term comes before its OnStoppedLeading, and OnStoppedLeading of a term before
// OnStartedLeading of the next. OnNewLeader is advisory (what etcd shows) and is not ordered against
// the other two; leader changes that a busy listener has not yet received are merged into the latest.
// Node.Stop waits for the queued events to be delivered, bounded by its context.
type Listener struct {
	// OnStartedLeading is called once per term, when this process leads queue and its dispatcher run
	// is open. ctx is the term's context: cancelled when the term ends (already cancelled when the
	// event is delivered after a short term ended). Work tied to the term runs under ctx; the callback
	// may block until ctx ends, which only delays this queue's OnStoppedLeading.
	OnStartedLeading func(ctx context.Context, lead Lead)
	// OnStoppedLeading is called after every term that OnStartedLeading reported, once Baton stopped
	// acting for it, with the reason the term ended (context.Cause of its context).
	OnStoppedLeading func(queue string, cause error)
	// OnNewLeader is called when the leader of queue changes as etcd shows it, this process included;
	// an empty ID means nobody leads.
	OnNewLeader func(queue string, leader election.Leader)
}

// Listen adds a listener of this Node's leadership events. It must be called before Start, so that a
// listener sees every term from the first; later it returns ErrStarted.
func (n *Node) Listen(l Listener) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.stopped:
		return ErrStopped
	case n.started:
		return ErrStarted
	}
	n.notify.listeners = append(n.notify.listeners, l)
	return nil
}

// IsLeading reports whether this process holds a live term for queue (the local check of
// election.Term.Check: no network call, no allocation).
func (n *Node) IsLeading(queue string) bool {
	_, ok := n.Term(queue)
	return ok
}

// Term returns this process's live term for queue, if it holds one: the term whose Guard fences the
// application's own etcd writes with Baton's token. A term that ends is not reused; ask again after a
// new OnStartedLeading.
func (n *Node) Term(queue string) (*election.Term, bool) {
	q, ok := n.owned[queue]
	if !ok {
		return nil, false
	}
	return q.Leading()
}

// leadershipEvent is one leadership event of one queue.
type leadershipEvent struct {
	kind   eventKind
	ctx    context.Context // the term's, for eventStarted
	lead   Lead
	cause  error
	leader election.Leader
}

type eventKind int

const (
	eventStarted eventKind = iota
	eventStopped
	eventNewLeader
)

type mailbox struct {
	listener int
	queue    string
}

// notifier delivers leadership events to listeners without ever blocking the emitter: each
// (listener, queue) has a queue of events and, while it holds any, one goroutine draining it.
type notifier struct {
	listeners []Listener // fixed once the Node starts

	mu      sync.Mutex
	pending map[mailbox][]leadershipEvent
	wg      sync.WaitGroup
}

func (nt *notifier) emit(queue string, ev leadershipEvent) {
	if len(nt.listeners) == 0 {
		return
	}
	nt.mu.Lock()
	defer nt.mu.Unlock()
	if nt.pending == nil {
		nt.pending = make(map[mailbox][]leadershipEvent)
	}
	for i, l := range nt.listeners {
		if !l.wants(ev.kind) {
			continue
		}
		mb := mailbox{i, queue}
		evs, busy := nt.pending[mb]
		if ev.kind == eventNewLeader && len(evs) > 0 && evs[len(evs)-1].kind == eventNewLeader {
			evs[len(evs)-1] = ev // only the latest leader matters to a listener that is behind
			continue
		}
		nt.pending[mb] = append(evs, ev)
		if !busy {
			nt.wg.Go(func() { nt.drain(mb) })
		}
	}
}

// drain delivers mb's events until none is left; the entry's presence in pending marks it busy.
func (nt *notifier) drain(mb mailbox) {
	l := nt.listeners[mb.listener]
	for {
		nt.mu.Lock()
		evs := nt.pending[mb]
		if len(evs) == 0 {
			delete(nt.pending, mb)
			nt.mu.Unlock()
			return
		}
		ev := evs[0]
		evs[0] = leadershipEvent{}
		nt.pending[mb] = evs[1:]
		nt.mu.Unlock()
		switch ev.kind {
		case eventStarted:
			l.OnStartedLeading(ev.ctx, ev.lead)
		case eventStopped:
			l.OnStoppedLeading(mb.queue, ev.cause)
		case eventNewLeader:
			l.OnNewLeader(mb.queue, ev.leader)
		}
	}
}

// wait waits until every queued event is delivered or ctx ends.
func (nt *notifier) wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { nt.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l Listener) wants(k eventKind) bool {
	switch k {
	case eventStarted:
		return l.OnStartedLeading != nil
	case eventStopped:
		return l.OnStoppedLeading != nil
	default:
		return l.OnNewLeader != nil
	}
}
