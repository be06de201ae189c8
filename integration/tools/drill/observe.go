package drill

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/takeover"
)

// poll reads p's /status every PollInterval while p runs (not while it is SIGSTOPped: the read
// would only hang) and checks every sample against the other workers' latest ones.
func (d *Drill) poll(p *proc) {
	t := time.NewTicker(d.cfg.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-p.done:
			return
		case <-d.bg.Done():
			return
		case <-t.C:
		}
		if p.isStopped() {
			continue
		}
		s, ok := p.read()
		if !ok {
			continue
		}
		p.mu.Lock()
		p.last = s
		p.mu.Unlock()
		d.checkSample(p, s)
	}
}

// checkSample is the live form of the one-owner check. Two samples of different processes cannot be
// taken at the same instant, so a naive "both said leading" would flag every handover. What is
// certain: a process that reports Leading for a term that started at Since (its own wall clock, the
// same clock on this host) was leading through all of [Since, Sent]. If another process reported
// Leading for another term of the queue in a sample taken wholly inside that span
// ([Sent', Recv'] ⊆ [Since, Sent]), both led at the same instant: a definite violation.
func (d *Drill) checkSample(p *proc, s sample) {
	d.mu.Lock()
	d.checks.StatusSamples++
	others := append([]*proc(nil), d.procs...)
	d.mu.Unlock()
	for _, q := range s.St.Queues {
		if !q.Leading {
			continue
		}
		for _, o := range others {
			if o == p {
				continue
			}
			osm, ok := o.lastSample()
			if !ok {
				continue
			}
			for _, oq := range osm.St.Queues {
				if oq.Queue != q.Queue || !oq.Leading || oq.Token == q.Token {
					continue
				}
				inside := func(a sample, since time.Time, b sample) bool {
					return !since.After(a.Sent) && !a.Recv.After(b.Sent)
				}
				if inside(osm, q.Since, s) || inside(s, oq.Since, osm) {
					d.violate(Violation{Check: CheckOneOwner, Queue: q.Queue, At: s.Recv, Detail: fmt.Sprintf(
						"/status: %s led %s (token %d, since %s) while %s reported leading it (token %d, since %s) in a sample taken %s..%s",
						p.id, q.Queue, q.Token, q.Since.Format(tsFormat), o.id, oq.Token, oq.Since.Format(tsFormat),
						osm.Sent.Format(tsFormat), osm.Recv.Format(tsFormat))})
				}
			}
		}
	}
}

const tsFormat = "15:04:05.000000"

// owner is who holds a queue in a settled fleet.
type owner struct {
	Proc  string
	Token int64
	RunID string
}

func (d *Drill) workflowID(queue string) string {
	id, _ := takeover.WorkflowID(d.cfg.Project, queue)
	return id
}

// liveProcs returns the processes that run and are not SIGSTOPped, but for except (nil: none).
func (d *Drill) liveProcs(except *proc) []*proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*proc
	for _, p := range d.procs {
		if p.alive() && p != except && !p.isStopped() && p.slot >= 0 {
			out = append(out, p)
		}
	}
	return out
}

// addLeaders adds the queues that s, p's sample, reports leading to leaders.
func addLeaders(leaders map[string][]owner, p *proc, s sample) {
	for _, q := range s.St.Queues {
		if q.Leading {
			leaders[q.Queue] = append(leaders[q.Queue], owner{Proc: p.id, Token: q.Token, RunID: q.RunID})
		}
	}
}

// settled checks the fleet once. Every queue must have exactly one worker that leads it with a
// dispatcher run (fresh /status reads); that run must be the workflow's current run and Running
// (DescribeWorkflowExecution, Temporal's mutable state, not visibility); the heartbeat key must name
// that run and token; and Temporal visibility must list exactly that one Running run for the
// workflow ID. Visibility is eventually consistent, which is why a settle is a wait: see waitSteady.
//
// A queue already reported as not settling (stuck) is left out, so that one queue that stays without
// an owner is reported once and does not make every later step wait out the bound; it rejoins the
// checks once a worker leads it with a run again.
func (d *Drill) settled(ctx context.Context, except *proc) []Violation {
	d.mu.Lock()
	stuck := maps.Clone(d.stuck)
	d.mu.Unlock()
	procs := d.liveProcs(except)
	stats := make([]sample, len(procs))
	oks := make([]bool, len(procs))
	var wg sync.WaitGroup
	for i, p := range procs {
		wg.Go(func() { stats[i], oks[i] = p.read() })
	}
	wg.Wait()
	var probs []Violation
	leaders := map[string][]owner{}
	for i, p := range procs {
		if !oks[i] {
			probs = append(probs, Violation{Check: CheckOwnerWithinSLA, Detail: p.id + ": /status does not answer"})
			continue
		}
		addLeaders(leaders, p, stats[i])
	}
	owners := map[string]owner{}
	for _, q := range d.queues {
		ls := leaders[q]
		if since, ok := stuck[q]; ok {
			if len(ls) == 1 && ls[0].RunID != "" {
				d.mu.Lock()
				delete(d.stuck, q)
				d.mu.Unlock()
				d.logf("%s is owned again (%s), %v after it was reported without an owner", q, ls[0].Proc, time.Since(since).Round(100*time.Millisecond))
			}
			continue
		}
		switch {
		case len(ls) == 0:
			probs = append(probs, Violation{Check: CheckOwnerWithinSLA, Queue: q, Detail: "no worker leads it"})
		case len(ls) > 1:
			probs = append(probs, Violation{Check: CheckOwnerWithinSLA, Queue: q, Detail: fmt.Sprintf("%d workers report leading it: %v", len(ls), ls)})
		case ls[0].RunID == "":
			probs = append(probs, Violation{Check: CheckOwnerWithinSLA, Queue: q, Detail: ls[0].Proc + " leads it without a dispatcher run yet"})
		default:
			owners[q] = ls[0]
		}
	}
	if len(probs) > 0 {
		return probs
	}
	for _, q := range d.queues {
		o, ok := owners[q]
		if !ok {
			continue
		}
		cur, h, err := d.records(ctx, q)
		switch {
		case err != nil:
			probs = append(probs, Violation{Check: CheckOwnerWithinSLA, Queue: q, Detail: err.Error()})
		case cur.RunID != o.RunID || !cur.open():
			probs = append(probs, Violation{Check: CheckOwnerWithinSLA, Queue: q, Detail: fmt.Sprintf(
				"Temporal's current run is %q (running %v), the leader %s reports run %s", cur.RunID, cur.open(), o.Proc, o.RunID)})
		case h[heartbeat.FieldRunID] != o.RunID || h[heartbeat.FieldToken] != strconv.FormatInt(o.Token, 10):
			probs = append(probs, Violation{Check: CheckOrphanCleanup, Queue: q, Detail: fmt.Sprintf(
				"heartbeat key names run %q token %q, the leader %s has run %s token %d", h[heartbeat.FieldRunID],
				h[heartbeat.FieldToken], o.Proc, o.RunID, o.Token)})
		}
	}
	if len(probs) > 0 {
		return probs
	}
	open := map[string][]string{}
	if err := d.listRuns(ctx, true, func(wid, runID string) { open[wid] = append(open[wid], runID) }); err != nil {
		return []Violation{{Check: CheckOwnerWithinSLA, Detail: "visibility: " + err.Error()}}
	}
	for _, q := range d.queues {
		o, ok := owners[q]
		if runs := open[d.workflowID(q)]; ok && (len(runs) != 1 || runs[0] != o.RunID) {
			probs = append(probs, Violation{Check: CheckOneOpenRun, Queue: q, Detail: fmt.Sprintf(
				"visibility lists %d Running runs %v, the leader's is %s", len(runs), runs, o.RunID)})
		}
	}
	return probs
}

// records reads what Temporal and Redis hold for queue's dispatcher: the workflow's current run
// (Temporal's mutable state) and its heartbeat key (empty when there is none).
func (d *Drill) records(ctx context.Context, queue string) (*run, map[string]string, error) {
	id := d.workflowID(queue)
	cur, err := d.describe(ctx, id, "")
	if err != nil {
		return nil, nil, err
	}
	h, err := d.heartbeat(ctx, id)
	if err != nil {
		return nil, nil, fmt.Errorf("heartbeat key: %w", err)
	}
	return cur, h, nil
}

// describe reads a run (runID "": the workflow's current run) from Temporal's mutable state: its
// times, status, chain and owner. A workflow Temporal has no record of has a run without an ID.
func (d *Drill) describe(ctx context.Context, wid, runID string) (*run, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := d.tc.DescribeWorkflowExecution(ctx, wid, runID)
	if nf := (*serviceerror.NotFound)(nil); errors.As(err, &nf) {
		return &run{}, nil
	} else if err != nil {
		return nil, fmt.Errorf("describe %s/%s: %w", wid, runID, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	r := &run{RunID: info.GetExecution().GetRunId(), Start: info.GetStartTime().AsTime(), Status: info.GetStatus(), FirstRunID: info.GetFirstRunId()}
	if info.GetCloseTime() != nil && !r.open() {
		r.Close = info.GetCloseTime().AsTime()
	}
	r.Owner, _, _ = takeover.DecodeOwner(nil, info.GetMemo())
	return r, nil
}

// heartbeat reads the workflow's heartbeat key (empty when there is none).
func (d *Drill) heartbeat(ctx context.Context, wid string) (map[string]string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return d.rdb.HGetAll(ctx, heartbeat.Key("", d.cfg.Project, wid)).Result()
}

// listRuns lists the dispatcher runs (only the Running ones with running) that visibility knows.
func (d *Drill) listRuns(ctx context.Context, running bool, f func(wid, runID string)) error {
	query := fmt.Sprintf("WorkflowType = '%s'", takeover.DefaultWorkflowType)
	if running {
		query += " AND ExecutionStatus = 'Running'"
	}
	var token []byte
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := d.tc.ListWorkflow(cctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token, PageSize: 1000})
		cancel()
		if err != nil {
			return err
		}
		for _, e := range resp.GetExecutions() {
			f(e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId())
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// waitSteady waits, bounded by timeout, until the fleet (but for except) is settled, and records in
// step how long that took. Visibility lags behind Temporal's mutable state (and /status is read
// process by process), so momentary disagreement is expected right after a takeover; only what is
// still wrong when the bound runs out is a violation.
func (d *Drill) waitSteady(ctx context.Context, step *Step, except *proc, timeout time.Duration) bool {
	var probs []Violation
	err := harness.Poll(ctx, timeout, 200*time.Millisecond, func() error {
		if probs = d.settled(ctx, except); len(probs) > 0 {
			return errors.New("not settled")
		}
		return nil
	})
	switch {
	case err == nil:
		if step != nil && step.Settled == 0 {
			step.Settled = time.Since(step.At)
		}
		return true
	case ctx.Err() != nil:
		return false
	}
	for _, v := range probs {
		v.At, v.Step, v.Detail = time.Now(), stepName(step), fmt.Sprintf("not settled %v after the step: %s", timeout, v.Detail)
		if v.Queue != "" {
			v.Detail += "; etcd candidates: " + d.candidates(ctx, v.Queue)
			d.mu.Lock()
			d.stuck[v.Queue] = time.Now()
			d.mu.Unlock()
		}
		d.violate(v)
	}
	return false
}

// candidates describes the queue's election keys as etcd holds them (evidence for a queue that stays
// without an owner): server ID, create revision, lease and its remaining TTL, oldest first.
func (d *Drill) candidates(ctx context.Context, queue string) string {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	prefix := election.Keys{Prefix: election.DefaultConfig().Prefix}.Candidates(d.cfg.Project, queue)
	resp, err := d.ec.Get(cctx, prefix, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(resp.Kvs) == 0 {
		return "none (nobody stands)"
	}
	var out []string
	for _, kv := range resp.Kvs {
		ttl := "?"
		if kv.Lease != 0 {
			if lr, err := d.ec.TimeToLive(cctx, clientv3.LeaseID(kv.Lease)); err == nil {
				ttl = fmt.Sprintf("%ds", lr.TTL)
			}
		}
		out = append(out, fmt.Sprintf("%s rev %d lease %x ttl %s", kv.Value, kv.CreateRevision, kv.Lease, ttl))
	}
	return fmt.Sprintf("%v (etcd revision %d)", out, resp.Header.Revision)
}

func stepName(s *Step) string {
	if s == nil {
		return ""
	}
	if s.Fault != nil {
		return fmt.Sprintf("#%d %s", s.Fault.N, s.Name)
	}
	return s.Name
}

// monitorOrphans watches, every second, every queue for an orphan: an open dispatcher run (the
// workflow's current run in Temporal's mutable state) or a heartbeat key that is not the run of the
// queue's one live leader (from the latest /status samples). A takeover fixes both within about the
// TTL; the reconciler fixes what no successor takes over. Either way each episode must end within
// CleanupSLA. Rounds in which Temporal or Redis cannot be read (a restart fault) leave the state as
// it was.
func (d *Drill) monitorOrphans() {
	since := map[string]time.Time{}
	flagged := map[string]bool{}
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-d.bg.Done():
			return
		case <-t.C:
		}
		if !d.monitoring.Load() {
			clear(since)
			continue
		}
		leaders := map[string][]owner{}
		for _, p := range d.liveProcs(nil) {
			if s, ok := p.lastSample(); ok {
				addLeaders(leaders, p, s)
			}
		}
		now := time.Now()
		for _, q := range d.queues {
			// Two leaders with a run: which run is the orphan is for the one-owner check to say.
			ls := slices.DeleteFunc(leaders[q], func(o owner) bool { return o.RunID == "" })
			if len(ls) > 1 {
				continue
			}
			leaderRun := ""
			if len(ls) == 1 {
				leaderRun = ls[0].RunID
			}
			cur, h, err := d.records(d.bg, q)
			if err != nil {
				continue
			}
			bad := ""
			if cur.open() && cur.RunID != leaderRun {
				bad = "open run " + cur.RunID
			}
			if r := h[heartbeat.FieldRunID]; r != "" && r != leaderRun {
				bad = strings.TrimSpace(bad + " heartbeat key of run " + r)
			}
			d.mu.Lock()
			d.checks.OrphanChecks++
			if bad == "" {
				if s, ok := since[q]; ok {
					d.checks.MaxOrphanAge = max(d.checks.MaxOrphanAge, now.Sub(s))
					delete(since, q)
					delete(flagged, q)
				}
				d.mu.Unlock()
				continue
			}
			if _, ok := since[q]; !ok {
				since[q] = now
				d.checks.OrphanEpisodes++
			}
			age := now.Sub(since[q])
			d.mu.Unlock()
			if age > d.cfg.CleanupSLA && !flagged[q] {
				flagged[q] = true
				d.violate(Violation{Check: CheckOrphanCleanup, Queue: q, At: now, Detail: fmt.Sprintf(
					"%s not cleaned %v after it was first seen (leader's run: %q)", bad, age.Round(time.Second), leaderRun)})
			}
		}
	}
}

// leading is how many queues st reports leading.
func leading(st baton.Status) int {
	n := 0
	for _, q := range st.Queues {
		if q.Leading {
			n++
		}
	}
	return n
}
