package ledger

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
)

// Watch follows the dispatch ledger's history in etcd from a revision on: every key put, and
// every completion. The ledger writes a done record only in a transaction fenced by its owner and
// never rewrites one, so each put of a done record in etcd's history is one completion of that
// dispatch: a key with two completions was handled to the end twice. This is the one replay of the
// ledger; tools that judge it (a load run, a drill, a benchmark) read etcd's records through it, not
// any process's word. etcd resumes the watch on another member when one fails.
type Watch struct {
	cli    *clientv3.Client
	prefix string // with the trailing slash
	from   int64
	oldest bool        // from was asked as "as far back as etcd keeps": a compaction moves it up
	clock  clock.Clock // nil: the real clock (SetClock)

	mu          sync.Mutex
	rev         int64 // every put up to this revision has been seen
	err         error // the watch failed: a completion may have gone unseen
	completions map[string][]Completion
	touched     map[string]bool
}

// Completion is one completion of a dispatch: a put of its done record.
type Completion struct {
	Seen   time.Time // when the watch saw it
	Record string    // the record, "done <server_id> <token>"
	Rev    int64     // its etcd revision
}

// NewWatch reads the current revision of project's ledger under prefix (default
// DefaultPrefix); Run then follows every change after it. It follows the project's range
// (Range) only: workers of this release write nothing else, so a completion under the layout
// before per-project keys is one by a worker of the previous release.
func NewWatch(ctx context.Context, c *clientv3.Client, prefix, project string) (*Watch, error) {
	prefix = Range(prefix, project)
	resp, err := c.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("ledger: reading the ledger's revision: %w", err)
	}
	return &Watch{cli: c, prefix: prefix, from: resp.Header.Revision + 1, rev: resp.Header.Revision,
		completions: map[string][]Completion{}, touched: map[string]bool{}}, nil
}

// NewWatchFrom is NewWatch replaying the ledger's history from revision from on, or,
// when etcd compacted it (or from is 0), from the oldest revision etcd keeps (From says which).
// Replaying is how a check judges completions made before it started: `baton verify` replays the
// history etcd keeps.
func NewWatchFrom(ctx context.Context, c *clientv3.Client, prefix, project string, from int64) (*Watch, error) {
	w, err := NewWatch(ctx, c, prefix, project)
	if err != nil {
		return nil, err
	}
	w.from, w.rev, w.oldest = max(from, 1), max(from, 1)-1, true
	return w, nil
}

// From returns the first revision the watch follows: every put from there on is seen.
func (w *Watch) From() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.from
}

// Run follows the ledger until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	for from := w.From(); ; {
		compacted := w.follow(ctx, from)
		if compacted == 0 || ctx.Err() != nil {
			return
		}
		w.mu.Lock() // etcd keeps nothing before compacted: start there
		w.from, w.rev, from = compacted, max(w.rev, compacted-1), compacted
		w.mu.Unlock()
	}
}

// follow watches from rev until ctx ends or the watch fails; it returns the compaction revision when
// the history asked for is gone and the watch may start at the oldest one, 0 otherwise.
func (w *Watch) follow(ctx context.Context, from int64) (compacted int64) {
	ctx, cancel := context.WithCancel(ctx) // a watch given up on is closed
	defer cancel()
	ch := w.cli.Watch(ctx, w.prefix, clientv3.WithPrefix(), clientv3.WithRev(from), clientv3.WithProgressNotify())
	for wr := range ch {
		now := w.clk().Now()
		w.mu.Lock()
		if wr.CompactRevision > 0 && w.oldest && len(w.touched) == 0 {
			w.mu.Unlock()
			return wr.CompactRevision
		}
		if err := wr.Err(); err != nil {
			if w.err == nil && ctx.Err() == nil {
				w.err = fmt.Errorf("ledger: following the ledger from revision %d: %w", w.from, err)
			}
			w.mu.Unlock()
			continue
		}
		for _, ev := range wr.Events {
			if ev.Type != mvccpb.PUT {
				continue
			}
			k := strings.TrimPrefix(string(ev.Kv.Key), w.prefix)
			if !isRecordKey(k) {
				continue // an attempt's claim
			}
			w.touched[k] = true
			if State(string(ev.Kv.Value)) == Done {
				w.completions[k] = append(w.completions[k], Completion{Seen: now, Record: string(ev.Kv.Value), Rev: ev.Kv.ModRevision})
			}
		}
		if n := len(wr.Events); n > 0 {
			w.rev = max(w.rev, wr.Events[n-1].Kv.ModRevision)
		}
		if wr.IsProgressNotify() {
			w.rev = max(w.rev, wr.Header.Revision)
		}
		w.mu.Unlock()
	}
	return 0
}

// WaitFor waits until the watch has seen every put up to rev, the watch failed (its error: a
// completion may have gone unseen), or ctx ends. etcd sends a progress notification only once a watch
// has caught up, so one is asked for every 100 ms until then.
func (w *Watch) WaitFor(ctx context.Context, rev int64) error {
	tick := w.clk().NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		w.mu.Lock()
		seen, err := w.rev, w.err
		w.mu.Unlock()
		switch {
		case err != nil:
			return err
		case seen >= rev:
			return nil
		}
		_ = w.cli.RequestProgress(ctx) // a failure is retried at the next tick
		select {
		case <-ctx.Done():
			return fmt.Errorf("ledger: the ledger watch saw revision %d, not %d: %w", seen, rev, ctx.Err())
		case <-tick.C():
		}
	}
}

// Seen returns copies of what the watch has seen: each key's completions, oldest first, and every key
// put.
func (w *Watch) Seen() (completions map[string][]Completion, touched map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.completions), maps.Clone(w.touched) // a later append does not reach a cloned slice's length
}
