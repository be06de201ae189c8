package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// A moveCase is one queue of its own project, served by Nodes a and b and a dispatcher worker, moved
// once (or, for the baseline, not) while requests arrive.
type moveCase struct {
	s        *servers
	ledger   *ledger.Etcd
	producer *dispatcher.Producer
	move     nodeMove // move.move nil: the baseline
	handler  time.Duration
	project  string
	log      *zap.Logger // the bench's lines about the case
	nodeLog  *zap.Logger // the Nodes' (each adds its project)
	calls    *callLog

	a, b    *baton.Node
	nodes   []*baton.Node           // every Node started, stopped when the case ends
	reader  *sdkmetric.ManualReader // b's metrics: the reason it won the queue for
	cleanup []func(context.Context) error

	sent           []*sentReq
	began, opened  time.Time // the move's trigger; b's run first seen open
	quiesceTimeout time.Duration
	reasons        map[string]int64
	stallsMu       sync.Mutex
	stalls         map[string]time.Duration // "<node> <cause>" -> how long its status showed it
	done           map[string]bool          // the sent keys the ledger shows done once the load is over
}

// run starts the case's worker and Nodes, sends its requests while it moves the queue, and waits
// until every request is done (or the bound ends) and no handler runs.
func (c *moveCase) run(ctx context.Context) (err error) {
	defer func() {
		// Handlers ignore their context: they are waited for before their worker stops.
		err = errors.Join(err, c.calls.idle(ctx, c.handler+nodeMoveLimit))
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		err = errors.Join(err, c.stopNodes(sctx))
		for i := len(c.cleanup) - 1; i >= 0; i-- {
			err = errors.Join(err, c.cleanup[i](sctx))
		}
		if err != nil {
			err = fmt.Errorf("%s: %w", c.project, err)
		}
	}()
	w := worker.New(c.s.tc, takeover.DefaultTaskQueue(c.project, nodeMoveQueue), worker.Options{})
	dispatcher.Register(w, &dispatcher.Activities{Ledger: c.ledger, History: c.s.tc, Handler: c.calls.handle})
	if err := w.Start(); err != nil {
		return err
	}
	c.cleanup = append(c.cleanup, func(context.Context) error { w.Stop(); return nil })
	if c.a, err = c.startNode(ctx, "a", c.move.versions[0], nil); err != nil {
		return err
	}
	if err := c.leads(ctx, c.a); err != nil {
		return err
	}
	c.quiesceTimeout = c.a.Config().Takeover.QuiesceTimeout
	c.reader = sdkmetric.NewManualReader()
	if c.b, err = c.startNode(ctx, "b", c.move.versions[1], c.reader); err != nil {
		return err
	}
	if err := c.inLine(ctx); err != nil {
		return err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	watching.Go(func() { c.watchStalls(wctx) })
	defer watching.Wait()
	defer stopWatch()
	var moveErr error
	parallel(ctx, nodeMoveLimit+nodeMoveRequests*nodeMoveGap,
		func(ctx context.Context) { c.send(ctx) },
		func(ctx context.Context) {
			if c.move.move != nil {
				moveErr = c.moveDuringLoad(ctx)
			}
		})
	if moveErr != nil {
		return moveErr
	}
	if err := c.settle(ctx); err != nil {
		return err
	}
	stopWatch()
	watching.Wait()
	c.reasons, err = reasons(ctx, c.reader)
	return err
}

// watchStalls records, until ctx ends, how long each Node's status showed its run stalled, by cause:
// a planned move is no reason for readiness to fail.
func (c *moveCase) watchStalls(ctx context.Context) {
	const every = 50 * time.Millisecond
	for sleepCtx(ctx, every) {
		for _, n := range []*baton.Node{c.a, c.b} {
			if qs, _ := queueStatus(n, nodeMoveQueue); qs.Progress != nil && qs.Progress.Cause != "" {
				c.stallsMu.Lock()
				c.stalls[fmt.Sprintf("%s %s", strings.TrimPrefix(n.Config().ServerID, c.project+"-"), qs.Progress.Cause)] += every
				c.stallsMu.Unlock()
			}
		}
	}
}

// startNode starts the Node <project>-id with Baton's defaults, but for its registry heartbeat (a drain
// is heard at the next one); reader, when set, receives its metrics.
func (c *moveCase) startNode(ctx context.Context, id, version string, reader *sdkmetric.ManualReader) (*baton.Node, error) {
	cli, err := c.s.cluster.NewClient()
	if err != nil {
		return nil, err
	}
	c.cleanup = append(c.cleanup, func(context.Context) error { return cli.Close() })
	id = c.project + "-" + id
	cfg := baton.Config{Project: c.project, Queues: []string{nodeMoveQueue}, ServerID: id, Version: version,
		Registry: registry.Config{HeartbeatInterval: nodeMoveBeat}, Logger: c.nodeLog.Named(id)}
	if reader != nil {
		meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		c.cleanup = append(c.cleanup, meters.Shutdown)
		cfg.MeterProvider = meters
	}
	n, err := baton.New(cfg, cli, c.s.tc, c.s.rdb)
	if err != nil {
		return nil, err
	}
	if err := n.Start(ctx); err != nil {
		return nil, err
	}
	c.nodes = append(c.nodes, n)
	return n, nil
}

// stopNodes stops the Nodes that do not lead the queue, then the others: no move at the end.
func (c *moveCase) stopNodes(ctx context.Context) error {
	var errs []error
	for _, leading := range []bool{false, true} {
		for _, n := range c.nodes {
			if qs, _ := queueStatus(n, nodeMoveQueue); qs.Leading == leading {
				errs = append(errs, c.stop(ctx, n))
			}
		}
	}
	return errors.Join(errs...)
}

// stop stops n within a minute, whatever ctx says: a stop is a move, or the case's end.
func (c *moveCase) stop(ctx context.Context, n *baton.Node) error {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	return n.Stop(sctx)
}

// leads waits until n leads the queue with its dispatcher run open.
func (c *moveCase) leads(ctx context.Context, n *baton.Node) error {
	return harness.Poll(ctx, nodeMoveLimit, 10*time.Millisecond, func() error {
		if qs, ok := queueStatus(n, nodeMoveQueue); !ok || !qs.Leading || !qs.DispatcherOpen || qs.RunID == "" {
			return fmt.Errorf("%s does not lead with an open run: %+v", n.Config().ServerID, qs)
		}
		return nil
	})
}

// inLine waits until b is a worker that a's move can name: registered ONLINE for the queue, its member
// record published (a's balancer reads it by a watch), and seeing a lead.
func (c *moveCase) inLine(ctx context.Context) error {
	a, b := c.a.Config().ServerID, c.b.Config().ServerID
	member := balance.Keys{ElectionPrefix: election.DefaultConfig().Prefix}.Member(c.project, b)
	return harness.Poll(ctx, nodeMoveLimit, 20*time.Millisecond, func() error {
		st := c.b.Status()
		qs, _ := queueStatus(c.b, nodeMoveQueue)
		if status := st.Worker.Status[nodeMoveQueue]; status != registry.StatusOnline || qs.Leader != a {
			return fmt.Errorf("%s is %q in the registry and sees %q lead", b, status, qs.Leader)
		}
		resp, err := c.s.etcd.Get(ctx, member, clientv3.WithCountOnly())
		if err == nil && resp.Count == 0 {
			err = fmt.Errorf("%s has no member record yet", b)
		}
		return err
	})
}

// transfer asks, as `baton transfer` does, for the queue to move to b; the request's lease is revoked
// when the case ends.
func (c *moveCase) transfer(ctx context.Context) error {
	keys := balance.Keys{ElectionPrefix: election.DefaultConfig().Prefix}
	lease, err := balance.RequestTransfer(ctx, c.s.etcd, keys, c.project, nodeMoveQueue,
		balance.TransferRequest{To: c.b.Config().ServerID}, time.Minute)
	if err != nil {
		return err
	}
	c.cleanup = append(c.cleanup, func(ctx context.Context) error {
		// The leader may have revoked it already, once it handed the queue over.
		if _, err := c.s.etcd.Revoke(ctx, lease); err != nil && !errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound) {
			return err
		}
		return nil
	})
	return nil
}

// send sends the case's requests nodeMoveGap apart, even ones as signals to the queue's workflow ID
// (accepted once Temporal stored them), odd ones through the Producer (accepted once it returned them
// handled), and returns once every send returned.
func (c *moveCase) send(ctx context.Context) {
	id, _ := takeover.WorkflowID(c.project, nodeMoveQueue)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range nodeMoveRequests {
		if i > 0 && !sleepCtx(ctx, nodeMoveGap) {
			return
		}
		req := benchRequest(c.project, i)
		r := &sentReq{key: req.Key(), sent: time.Now()}
		c.sent = append(c.sent, r)
		wg.Go(func() {
			// A send outlives the sending: Dispatch keeps trying across the move for its bound.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dispatchSendBound)
			defer cancel()
			var err error
			if sentAs(i) == "signal" {
				err = c.s.tc.SignalWorkflow(sctx, id, "", dispatcher.SignalDispatch, req)
			} else {
				_, err = c.producer.Dispatch(sctx, c.project, nodeMoveQueue, req)
			}
			if err == nil {
				r.accepted, r.returned = true, time.Now()
			} else {
				c.log.Info("bench request not accepted", zap.String("queue", nodeMoveQueue), zap.String("key", r.key), zap.Error(err))
			}
		})
	}
}

// sentAs says how request i of a case is sent: even ones as signals, odd ones through the Producer.
func sentAs(i int) string {
	if i%2 == 0 {
		return "signal"
	}
	return "Dispatch"
}

// moveDuringLoad moves the queue as the leader's handler begins call nodeMoveOnCall, and returns once
// b leads it with its run open and the move's call returned.
func (c *moveCase) moveDuringLoad(ctx context.Context) error {
	select {
	case <-c.calls.reached:
	case <-ctx.Done():
		return fmt.Errorf("the leader's handler did not begin call %d: %w", nodeMoveOnCall, ctx.Err())
	}
	c.began = time.Now()
	c.log.Info("planned move", zap.String("queue", nodeMoveQueue), zap.String("move", c.move.name))
	var moveErr error
	var wg sync.WaitGroup
	wg.Go(func() { moveErr = c.move.move(ctx, c) })
	err := c.leads(ctx, c.b)
	c.opened = time.Now()
	wg.Wait()
	return errors.Join(moveErr, err)
}

// settle waits until no sent key is pending in the ledger, every accepted one is done, and no handler
// runs: no further call can begin then (the ledger refuses to begin a done key). A request lost keeps
// it waiting for the bound, and is counted then.
func (c *moveCase) settle(ctx context.Context) error {
	var readErr error
	err := harness.Poll(ctx, c.handler+nodeMoveLimit, 100*time.Millisecond, func() error {
		if n := c.calls.running(); n > 0 {
			return fmt.Errorf("%d handler calls running", n)
		}
		var pending int
		if c.done, pending, readErr = c.ledgerDone(ctx); readErr != nil {
			return harness.Final(readErr)
		}
		if pending > 0 {
			return fmt.Errorf("%d keys pending in the ledger", pending)
		}
		for _, r := range c.sent {
			if r.accepted && !c.done[r.key] {
				return fmt.Errorf("%s accepted, not done", r.key)
			}
		}
		return nil
	})
	if readErr != nil || ctx.Err() != nil {
		return err
	}
	if err != nil {
		c.log.Warn("requests not settled", zap.String("queue", nodeMoveQueue), zap.Error(err))
	}
	return nil
}

// ledgerDone reads the ledger record of every sent key: which are done, and how many are pending.
func (c *moveCase) ledgerDone(ctx context.Context) (done map[string]bool, pending int, err error) {
	done = map[string]bool{}
	for _, r := range c.sent {
		rec, found, err := ledger.ReadRecord(ctx, c.s.etcd, nodeMoveLedger, c.project, r.key)
		if err != nil {
			return nil, 0, err
		}
		done[r.key] = found && rec.State == ledger.Done
		if found && !done[r.key] {
			pending++
		}
	}
	return done, pending, nil
}
