package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/dispatcher"
)

// ledgerReader reads the dispatch ledger back for `demo-worker load`: which accepted requests were
// handled, and which were handled more than once. The record layout is the one dispatcher/doc.go
// documents: <prefix>/<dispatch key> -> "<state> <server_id> <token>".
type ledgerReader struct {
	etcd   *clientv3.Client
	prefix string
	from   int64 // the etcd revision when the load began; the ledger's history is replayed from it
}

// ledgerReport is what the ledger says about a load run's accepted requests.
type ledgerReport struct {
	Accepted, Handled int
	// NotHandled are accepted requests without a done record: lost, unless still on their way.
	NotHandled int
	// HandledTwice are requests whose record became done more than once since the load began.
	HandledTwice int
}

func (r ledgerReport) String() string {
	return fmt.Sprintf("ledger_accepted=%d ledger_handled=%d not_handled=%d handled_twice=%d", r.Accepted, r.Handled, r.NotHandled, r.HandledTwice)
}

const ledgerPoll = 500 * time.Millisecond

func startLedgerReader(ctx context.Context, etcd *clientv3.Client, prefix string) (*ledgerReader, error) {
	resp, err := etcd.Get(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, err
	}
	return &ledgerReader{etcd: etcd, prefix: prefix, from: resp.Header.Revision + 1}, nil
}

// settle reads the ledger until every key is done or settle has passed, calling progress after each
// read that is not yet final, and returns the final report.
func (l *ledgerReader) settle(ctx context.Context, keys []string, settle time.Duration, progress func(ledgerReport)) (ledgerReport, error) {
	deadline := time.Now().Add(settle)
	for {
		records, rev, err := dispatcher.ReadLedger(ctx, l.etcd, l.prefix)
		if err != nil {
			return ledgerReport{}, err
		}
		r := ledgerReport{Accepted: len(keys)}
		for _, k := range keys {
			if dispatcher.LedgerState(records[k]) == dispatcher.LedgerDone {
				r.Handled++
			}
		}
		r.NotHandled = r.Accepted - r.Handled
		if r.NotHandled == 0 || !time.Now().Before(deadline) {
			r.HandledTwice, err = l.doneTwice(ctx, keys, rev)
			return r, err
		}
		progress(r)
		if !sleepUntil(ctx, time.Now().Add(ledgerPoll)) {
			return r, ctx.Err()
		}
	}
}

// doneTwice replays the ledger's history from the start of the load to rev and counts the keys that
// became done more than once (a done record is never rewritten, so each put of one is a completion).
func (l *ledgerReader) doneTwice(ctx context.Context, keys []string, rev int64) (int, error) {
	if rev < l.from {
		return 0, nil
	}
	ours := make(map[string]bool, len(keys))
	for _, k := range keys {
		ours[k] = true
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	done := map[string]int{}
	watch := l.etcd.Watch(wctx, l.prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(l.from))
	// A progress notification says every event up to its revision was sent; etcd sends one only
	// once the watch has caught up, so it is asked for until it comes.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if err := l.etcd.RequestProgress(wctx); err != nil {
				return 0, err
			}
		case wr, ok := <-watch:
			if !ok {
				if err := ctx.Err(); err != nil {
					return 0, err
				}
				return 0, errors.New("the ledger's watch ended before the replay did")
			}
			if err := wr.Err(); err != nil {
				return 0, fmt.Errorf("replaying the ledger from revision %d: %w", l.from, err)
			}
			for _, ev := range wr.Events {
				if ev.Kv.ModRevision > rev {
					return countTwice(done), nil
				}
				k := strings.TrimPrefix(string(ev.Kv.Key), l.prefix+"/")
				if ev.Type == mvccpb.PUT && ours[k] && dispatcher.LedgerState(string(ev.Kv.Value)) == dispatcher.LedgerDone {
					done[k]++
				}
			}
			if wr.Header.Revision >= rev && (wr.IsProgressNotify() || len(wr.Events) > 0 && wr.Events[len(wr.Events)-1].Kv.ModRevision >= rev) {
				return countTwice(done), nil
			}
		}
	}
}

func countTwice(done map[string]int) int {
	n := 0
	for _, c := range done {
		if c > 1 {
			n++
		}
	}
	return n
}
