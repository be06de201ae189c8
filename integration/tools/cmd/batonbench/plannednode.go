package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/ledger"
)

// The planned moves of Nodes section: two real baton.Nodes serve one queue, the first leads, and the
// queue moves to the second the four planned ways (a registry drain, an operator's transfer, a
// rollout's stop of the older version, a plain stop) while requests arrive and each takes its handler
// 50 ms, 3 s or 8 s, whatever its context says. Baton's defaults hold for everything a move waits
// on (QuiesceTimeout 5 s): a handler shorter than that runs once, a longer one may run again after
// the quiesce gave up, but never beside its first call (issue #38). Per move and handler: requests
// lost (from the ledger and the handler's log), keys handled twice, overlapping calls of a key, and
// the move's duration beside the floor its handlers in flight set; per move, whether the successor
// counted the owner change for the move's reason (what dashboards show).
const (
	nodeMoveRequests = 16                     // per case, signals and Dispatch calls alternately
	nodeMoveGap      = 500 * time.Millisecond // between two requests: the sending spans every move
	nodeMoveOnCall   = 3                      // the move begins as the leader's handler begins this call
	nodeMoveBeat     = 500 * time.Millisecond // registry heartbeat: a drain is heard within it
	nodeMoveQueue    = "q"
	nodeMoveLedger   = "/bench/planned-nodes"
	// nodeMoveLimit bounds each wait of a case beyond its handler's time: a leader or a move slower than
	// this fails the section; requests not done by then are counted lost.
	nodeMoveLimit = time.Minute
)

// nodeMoveHandlers are the handler durations of the section: below, near and above QuiesceTimeout.
var nodeMoveHandlers = []time.Duration{50 * time.Millisecond, 3 * time.Second, 8 * time.Second}

// A nodeMove is one way of moving a queue from its leader (a) to the other Node (b).
type nodeMove struct {
	name     string
	trigger  string    // the instant the move's duration is counted from
	reason   string    // the reason b counts the queue won for (balance.MetricOwnerChanges)
	versions [2]string // a's and b's Config.Version
	move     func(ctx context.Context, c *moveCase) error
}

func nodeMoves() []nodeMove {
	stop := func(ctx context.Context, c *moveCase) error { return c.stop(ctx, c.a) }
	return []nodeMove{
		{name: "drain", trigger: "registry Drain of the leader", reason: balance.ReasonDrain,
			move: func(ctx context.Context, c *moveCase) error {
				return c.a.Registry().Drain(ctx, nodeMoveQueue, c.a.Config().ServerID)
			}},
		{name: "transfer", trigger: "transfer request", reason: balance.ReasonTransfer, move: func(ctx context.Context, c *moveCase) error { return c.transfer(ctx) }},
		{name: "rollout", trigger: "Stop of the v1 leader, a v2 worker live", reason: balance.ReasonRollout,
			versions: [2]string{"v1", "v2"}, move: stop},
		{name: "stop", trigger: "Stop of the leader", reason: balance.ReasonResign, move: stop},
	}
}

// benchPlannedNodes runs, for each handler duration, the four moves and a same-run baseline (the
// same requests on a queue of its own, with no move) at once, each case on a project of its own.
func benchPlannedNodes(ctx context.Context, s *servers, _ options) (_ []benchreport.Figure, err error) {
	dl, err := ledger.New(s.etcd, ledger.Config{Prefix: nodeMoveLedger, Retention: time.Hour})
	if err != nil {
		return nil, err
	}
	producer, err := dispatcher.NewProducer(s.tc, dispatcher.ProducerConfig{})
	if err != nil {
		return nil, err
	}
	logs, err := harness.NewLogFile("planned-nodes")
	if err != nil {
		return nil, err
	}
	var figs []benchreport.Figure
	defer func() {
		failed := err != nil || slices.ContainsFunc(figs, func(f benchreport.Figure) bool { return !f.Met })
		err = errors.Join(err, logs.Done(failed, func(format string, args ...any) {
			fmt.Printf("batonbench: planned moves of Nodes: "+format+"\n", args...)
		}))
	}()
	moves := nodeMoves()
	byMove := make([][]*moveCase, len(moves))
	fmt.Printf("batonbench: planned moves of Nodes: %d requests %v apart per case (signals and Dispatch alternately), "+
		"the move as the leader's handler begins call %d; handlers of %v; beside the same requests with no move\n",
		nodeMoveRequests, nodeMoveGap, nodeMoveOnCall, nodeMoveHandlers)
	for _, d := range nodeMoveHandlers {
		cases := make([]*moveCase, len(moves)+1) // the last: the baseline, no move
		for i := range cases {
			c := &moveCase{s: s, ledger: dl, producer: producer, handler: d, calls: newCallLog(d), stalls: map[string]time.Duration{}}
			if i < len(moves) {
				c.move = moves[i]
			} else {
				c.move = nodeMove{name: "none"}
			}
			c.project = fmt.Sprintf("planned-%s-%v", c.move.name, d)
			c.nodeLog, c.log = logs.Logger, logs.Logger.With(zap.String("project", c.project))
			cases[i] = c
		}
		began := time.Now()
		if err := harness.Parallel(ctx, len(cases), len(cases), func(ctx context.Context, i int) error {
			return cases[i].run(ctx)
		}); err != nil {
			return nil, fmt.Errorf("handlers of %v: %w", d, err)
		}
		base := cases[len(moves)].result()
		fmt.Printf("batonbench: planned moves of Nodes: handlers of %v, no move: %s\n", d, base)
		for i, c := range cases[:len(moves)] {
			byMove[i] = append(byMove[i], c)
			r := c.result()
			fmt.Printf("batonbench: planned moves of Nodes: handlers of %v, %s: %s\n", d, c.move.name, r)
			figs = append(figs, c.figures(r, base)...)
		}
		fmt.Printf("batonbench: planned moves of Nodes: handlers of %v took %v\n", d, time.Since(began).Round(time.Second))
	}
	for i, m := range moves {
		figs = append(figs, reasonFigure(m, byMove[i]))
	}
	// By move, then by handler, as the issue lists them.
	slices.SortStableFunc(figs, func(a, b benchreport.Figure) int {
		return moveIndex(moves, a.Name) - moveIndex(moves, b.Name)
	})
	return figs, nil
}

// moveIndex is the index in moves of the move a figure's name is about.
func moveIndex(moves []nodeMove, name string) int {
	return slices.IndexFunc(moves, func(m nodeMove) bool { return strings.HasPrefix(name, nodeMovePrefix(m.name)) })
}

func nodeMovePrefix(move string) string { return "planned move of a Node, " + move + ", " }

// moveResult is what became of one case's requests, and how long its move took.
type moveResult struct {
	sent, accepted, signals, dispatches int
	lost, twice, overlap                int
	lostOnes                            []string       // the lost requests: index and how each was sent
	byServer                            map[string]int // handler calls by server ID
	duration, floor                     time.Duration
	reason                              string // the reasons b counts the queue won for
	stalls                              string // how long a Node's status showed its run stalled, by cause
}

func (r moveResult) String() string {
	return fmt.Sprintf("%d sent, %d accepted (%d signals, %d Dispatch), %d lost, %d handled twice, %d overlapping; calls by server %v; "+
		"move %v (floor %v), won for %s; stalled: %s; lost: %s", r.sent, r.accepted, r.signals, r.dispatches, r.lost, r.twice, r.overlap, r.byServer,
		r.duration.Round(time.Millisecond), r.floor.Round(time.Millisecond), cmp.Or(r.reason, "-"), cmp.Or(r.stalls, "never"),
		cmp.Or(strings.Join(r.lostOnes, ", "), "none"))
}

// result tallies the case from the ledger (read by settle) and the handler log.
func (c *moveCase) result() moveResult {
	r := moveResult{sent: len(c.sent), byServer: map[string]int{}}
	for i, s := range c.sent {
		calls, peak := c.calls.of(s.key)
		for _, call := range calls {
			r.byServer[strings.TrimPrefix(call.server, c.project+"-")]++
		}
		if len(calls) > 1 {
			r.twice++
		}
		r.overlap += max(peak-1, 0)
		if !s.accepted {
			continue
		}
		r.accepted++
		if sentAs(i) == "signal" {
			r.signals++
		} else {
			r.dispatches++
		}
		if !c.done[s.key] || len(calls) == 0 {
			r.lost++
			r.lostOnes = append(r.lostOnes, fmt.Sprintf("#%d %s (done in the ledger %v, handler calls %d)", i, sentAs(i), c.done[s.key], len(calls)))
		}
	}
	var stalls []string
	c.stallsMu.Lock()
	for k, d := range c.stalls {
		stalls = append(stalls, fmt.Sprintf("%s ~%v", k, d))
	}
	c.stallsMu.Unlock()
	slices.Sort(stalls)
	r.stalls = strings.Join(stalls, ", ")
	if c.move.move != nil {
		r.duration = c.opened.Sub(c.began)
		r.floor = min(c.calls.remainderAt(c.began), c.quiesceTimeout)
		var rs []string
		for k, n := range c.reasons {
			rs = append(rs, fmt.Sprintf("%s x%d", k, n))
		}
		slices.Sort(rs)
		r.reason = strings.Join(rs, ", ")
	}
	return r
}

// figures are the case's rows beside the baseline's (the same requests with no move).
func (c *moveCase) figures(r, base moveResult) []benchreport.Figure {
	name := nodeMovePrefix(c.move.name) + fmt.Sprintf("handlers of %v", c.handler)
	noMove := fmt.Sprintf("same requests, no move (of %d accepted)", base.accepted)
	twiceTarget, twiceMet := "0", r.twice == 0
	if c.handler > c.quiesceTimeout {
		twiceTarget, twiceMet = fmt.Sprintf("informational: the handler outlasts QuiesceTimeout (%v), a call after the first is allowed", c.quiesceTimeout), true
	}
	return []benchreport.Figure{
		benchreport.Single(fmt.Sprintf("%s: accepted but never handled (ledger and handler log; of %d accepted, %d sent)", name, r.accepted, r.sent),
			"requests", float64(r.lost), noMove, float64(base.lost), "0", r.lost == 0),
		benchreport.Single(name+": handler ran twice", "keys", float64(r.twice), noMove, float64(base.twice), twiceTarget, twiceMet),
		benchreport.Single(name+": overlapping attempts (sum over keys of the most handler calls of one key at once, less 1)",
			"calls", float64(r.overlap), noMove, float64(base.overlap), "0", r.overlap == 0),
		benchreport.Single(fmt.Sprintf("%s: move duration (%s -> the successor's run open)", name, c.move.trigger),
			"ms", benchreport.Ms(r.duration),
			fmt.Sprintf("floor: the leader's handler calls in flight at the move, to their end, at most QuiesceTimeout (%v)", c.quiesceTimeout),
			benchreport.Ms(r.floor), ">= floor (the move waits for its handlers)", r.duration >= r.floor),
	}
}

// reasonFigure is, for one move, how many of its cases the successor counted for the move's reason
// (balance.MetricOwnerChanges, what the dashboards show), beside how many it counted as a crash.
func reasonFigure(m nodeMove, cases []*moveCase) benchreport.Figure {
	var right, crash float64
	var ds []string
	for _, c := range cases {
		right += float64(c.reasons[m.reason])
		crash += float64(c.reasons[balance.ReasonCrash])
		ds = append(ds, c.handler.String())
	}
	return benchreport.Single(fmt.Sprintf("%shandlers of %s: owner changes the successor counts for reason=%s (%s)",
		nodeMovePrefix(m.name), strings.Join(ds, ", "), m.reason, balance.MetricOwnerChanges), "changes", right,
		"counted as reason=crash", crash, fmt.Sprintf("%d (one per move)", len(cases)), right == float64(len(cases)))
}
