// Package ledgerwatch reads Baton's dispatch ledger (dispatcher.EtcdLedger) the way the load checks
// judge it, from etcd's records rather than any process's word: every record at one revision (Read),
// and every completion since a revision (Watch). The ledger writes a done record only in a
// transaction fenced by the owner and never rewrites one, so each done put in etcd's history is one
// completion of the dispatch: a key with two was executed to completion twice.
package ledgerwatch

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/testkit"
)

// Record is one ledger record: State is the first word of Raw, "<state> <server_id> <token>".
type Record struct{ State, Raw string }

// Read reads every record under prefix (the ledger's, without the trailing slash) at one revision,
// keyed by dispatch key, and returns that revision; the read as a whole gets 10 s, so that a member
// killed under it costs a retry of the caller's, not the drill.
func Read(ctx context.Context, cli *clientv3.Client, prefix string) (map[string]Record, int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, rev, err := dispatcher.ReadLedger(rctx, cli, prefix)
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]Record, len(raw))
	for k, v := range raw {
		out[k] = Record{State: dispatcher.LedgerState(v), Raw: v}
	}
	return out, rev, nil
}

// Done is one completion: a put of a done record, with its value and revision and when the watch
// saw it.
type Done struct {
	Seen  time.Time
	Value string
	Rev   int64
}

// Watch records every put under a ledger prefix from the revision after New. etcd's watch resumes on
// another member when one is killed.
type Watch struct {
	cli    *clientv3.Client
	prefix string
	from   int64

	mu      sync.Mutex
	rev     int64 // every event up to this revision has been seen
	err     error // the watch failed: a completion may have gone unseen
	dones   map[string][]Done
	touched map[string]bool // every key put
}

// New reads the ledger's current revision; Run then watches from the next one.
func New(ctx context.Context, cli *clientv3.Client, prefix string) (*Watch, error) {
	resp, err := cli.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("reading the ledger's revision: %w", err)
	}
	return &Watch{cli: cli, prefix: prefix, from: resp.Header.Revision + 1, rev: resp.Header.Revision,
		dones: map[string][]Done{}, touched: map[string]bool{}}, nil
}

// Run watches until ctx ends.
func (w *Watch) Run(ctx context.Context) {
	ch := w.cli.Watch(ctx, w.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(w.from), clientv3.WithProgressNotify())
	for wr := range ch {
		now := time.Now()
		w.mu.Lock()
		if err := wr.Err(); err != nil {
			if w.err == nil && ctx.Err() == nil {
				w.err = err
			}
			w.mu.Unlock()
			continue
		}
		for _, ev := range wr.Events {
			if ev.Type != mvccpb.PUT {
				continue
			}
			k := strings.TrimPrefix(string(ev.Kv.Key), w.prefix+"/")
			w.touched[k] = true
			if dispatcher.LedgerState(string(ev.Kv.Value)) == dispatcher.LedgerDone {
				w.dones[k] = append(w.dones[k], Done{Seen: now, Value: string(ev.Kv.Value), Rev: ev.Kv.ModRevision})
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
}

// WaitFor waits, bounded by timeout, until the watch has seen every put up to rev. etcd sends a
// progress notification only once a watch has caught up, so it is asked for until then.
func (w *Watch) WaitFor(ctx context.Context, rev int64, timeout time.Duration) error {
	return testkit.Poll(ctx, timeout, 100*time.Millisecond, func() error {
		w.mu.Lock()
		seen, err := w.rev, w.err
		w.mu.Unlock()
		switch {
		case err != nil:
			return testkit.Final(fmt.Errorf("the ledger watch failed, so a second completion could go unseen: %w", err))
		case seen < rev:
			pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_ = w.cli.RequestProgress(pctx)
			return fmt.Errorf("the ledger watch saw revision %d, not %d", seen, rev)
		}
		return nil
	})
}

// Seen returns copies of what the watch has seen: each key's completions, and every key put.
func (w *Watch) Seen() (dones map[string][]Done, touched map[string]bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.dones), maps.Clone(w.touched) // a later append does not reach a cloned slice's length
}
