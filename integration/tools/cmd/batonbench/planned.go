package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// The planned-moves section: graceful step-downs (the path of a stop, a drain, a rollout, a shed)
// while requests arrive and each takes its handler a while.
const (
	plannedMoves   = 8
	plannedGap     = 1500 * time.Millisecond
	plannedHandler = 50 * time.Millisecond // each dispatch's handler
	plannedLedger  = "/bench/planned"
)

// benchPlanned counts the handler runs of a request beyond its first across planned step-downs, with
// the run quiesced before it ends (takeover.UpdateQuiesce, the default) and, in the same run on a
// queue of its own, with the quiesce turned off (QuiesceTimeout < 0: the run is terminated at once,
// as before), which leaves the dispatches in the handlers to the successor.
func benchPlanned(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	tc := s.tc
	dl, err := ledger.New(s.etcd, ledger.Config{Prefix: plannedLedger, Retention: time.Hour})
	if err != nil {
		return nil, err
	}
	logs := map[string]*handledLog{"p-quiesce": newHandledLog(), "p-off": newHandledLog()}
	type queue struct {
		name    string
		nodes   []*node
		term    *election.Term
		run     takeover.Run
		quiesce time.Duration
	}
	qs := []*queue{{name: "p-quiesce"}, {name: "p-off", quiesce: -1}}
	var workers []worker.Worker
	defer func() {
		for _, w := range workers {
			w.Stop()
		}
	}()
	for _, q := range qs {
		log := logs[q.name]
		acts := &dispatcher.Activities{Ledger: dl, History: tc,
			Handler: func(ctx context.Context, key string, _ dispatcher.Request, _ takeover.Owner) error {
				if !sleepCtx(ctx, plannedHandler) {
					return ctx.Err()
				}
				log.handle(key)
				return nil
			}}
		w := worker.New(tc, takeover.DefaultTaskQueue(benchProject, q.name), worker.Options{})
		dispatcher.Register(w, acts)
		workers = append(workers, w)
		if err := w.Start(); err != nil {
			return nil, err
		}
		if q.nodes, err = s.nodesWith(takeover.Config{StepDown: takeover.TerminateOwnRun, QuiesceTimeout: q.quiesce},
			q.name+"-a", q.name+"-b"); err != nil {
			return nil, err
		}
		if q.term, q.run, err = q.nodes[0].take(ctx, q.name); err != nil {
			return nil, err
		}
	}
	producer, err := dispatcher.NewProducer(tc, dispatcher.ProducerConfig{})
	if err != nil {
		return nil, err
	}
	fmt.Printf("batonbench: planned moves: %d graceful step-downs per queue at %v/s, handlers of %v, quiesced and not\n",
		plannedMoves, dispatchRate, plannedHandler)
	sent := map[string][]*sentReq{}
	var mu sync.Mutex
	var moveErr error
	var fs []func(context.Context)
	for _, q := range qs {
		fs = append(fs, func(c context.Context) {
			rs := stream(c, dispatchRate, q.name, func(ctx context.Context, req dispatcher.Request) error {
				_, err := producer.Dispatch(ctx, benchProject, q.name, req)
				return err
			})
			mu.Lock()
			sent[q.name] = rs
			mu.Unlock()
		})
	}
	fs = append(fs, func(c context.Context) {
		for k := 0; k < plannedMoves && moveErr == nil && sleepCtx(c, plannedGap); k++ {
			for _, q := range qs {
				sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := q.nodes[k%2].mgr.StepDown(sctx, q.term, q.run)
				cancel()
				if err == nil {
					err = q.term.Resign(ctx)
				}
				if err == nil {
					q.term, q.run, err = q.nodes[(k+1)%2].take(ctx, q.name)
				}
				if err != nil {
					moveErr = fmt.Errorf("%s: move %d: %w", q.name, k+1, err)
					return
				}
			}
		}
	})
	parallel(ctx, time.Duration(plannedMoves+1)*plannedGap, fs...)
	if moveErr != nil {
		return nil, moveErr
	}
	// Every request handled (or given up on), then the count of second runs.
	again := map[string]float64{}
	accepted := map[string]int{}
	for _, q := range qs {
		log := logs[q.name]
		for deadline := time.Now().Add(dispatchSettle); time.Now().Before(deadline); sleepCtx(ctx, 100*time.Millisecond) {
			missing := 0
			for _, r := range sent[q.name] {
				if _, n := log.get(r.key); r.accepted && n == 0 {
					missing++
				}
			}
			if missing == 0 {
				break
			}
		}
		for _, r := range sent[q.name] {
			if !r.accepted {
				continue
			}
			accepted[q.name]++
			if _, n := log.get(r.key); n > 1 {
				again[q.name] += float64(n - 1)
			}
		}
	}
	fmt.Printf("batonbench: planned moves: quiesced: %d handled, %v handler re-runs; not quiesced: %d handled, %v handler re-runs\n",
		accepted["p-quiesce"], again["p-quiesce"], accepted["p-off"], again["p-off"])
	return []benchreport.Figure{
		benchreport.Single(fmt.Sprintf("handler re-runs after %d planned moves (graceful step-downs), run quiesced first (of %d requests, handlers of %v)",
			plannedMoves, accepted["p-quiesce"], plannedHandler), "requests", again["p-quiesce"],
			fmt.Sprintf("run terminated at once, QuiesceTimeout < 0 (of %d)", accepted["p-off"]), again["p-off"], "0", again["p-quiesce"] == 0),
	}, nil
}
