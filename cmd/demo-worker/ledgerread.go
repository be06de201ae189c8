package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/cmd/demo-worker/loadreport"
	"github.com/baton-run/baton/ledger"
)

// ledgerReader reads the dispatch ledger back for `demo-worker load`: which accepted requests were
// handled, and which were handled more than once, through package ledger's readers of the
// project's records (ledger.Watch, ledger.Read; the layout is ledger.Key's).
type ledgerReader struct {
	etcd    *clientv3.Client
	prefix  string
	project string
	watch   *ledger.Watch // from the start of the load: the completions since
	stop    context.CancelFunc
	done    chan struct{}
}

// ledgerString is r as the summary line shows it.
func ledgerString(r loadreport.Ledger) string {
	return fmt.Sprintf("ledger_accepted=%d ledger_handled=%d not_handled=%d handled_twice=%d", r.Accepted, r.Handled, r.NotHandled, r.HandledTwice)
}

const ledgerPoll = 500 * time.Millisecond

// startLedgerReader follows the ledger from now on, until close: even after ctx ends (a stop signal),
// since what happened to the accepted requests is the point of reading it.
func startLedgerReader(ctx context.Context, etcd *clientv3.Client, prefix, project string) (*ledgerReader, error) {
	w, err := ledger.NewWatch(ctx, etcd, prefix, project)
	if err != nil {
		return nil, err
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	l := &ledgerReader{etcd: etcd, prefix: prefix, project: project, watch: w, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(l.done)
		w.Run(wctx)
	}()
	return l, nil
}

// close stops following the ledger and waits for the watch to end.
func (l *ledgerReader) close() {
	l.stop()
	<-l.done
}

// settle reads the ledger until every key is done or settle has passed, calling progress after each
// read that is not yet final, and returns the final report.
func (l *ledgerReader) settle(ctx context.Context, keys []string, settle time.Duration, progress func(loadreport.Ledger)) (loadreport.Ledger, error) {
	deadline := time.Now().Add(settle)
	for {
		records, rev, err := ledger.Read(ctx, l.etcd, l.prefix, l.project)
		if err != nil {
			return loadreport.Ledger{}, err
		}
		r := loadreport.Ledger{Accepted: len(keys)}
		for _, k := range keys {
			if ledger.State(records[k]) == ledger.Done {
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

// doneTwice counts the keys that were completed more than once since the load began, once the
// ledger's watch has seen everything up to rev.
func (l *ledgerReader) doneTwice(ctx context.Context, keys []string, rev int64) (int, error) {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := l.watch.WaitFor(wctx, rev); err != nil {
		return 0, err
	}
	completions, _ := l.watch.Seen()
	n := 0
	for _, k := range keys {
		if len(completions[k]) > 1 {
			n++
		}
	}
	return n, nil
}
