package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// ActivityBacklog is the registered name of Activities.Backlog.
const ActivityBacklog = "baton.Backlog"

// HistoryReader reads a workflow's runs; client.Client satisfies it. The Backlog activity describes
// the runs the run log and the takeover name (DescribeWorkflowExecution, by run ID), lists the
// dispatcher workflow's runs with ListWorkflow (visibility, a hint), and reads each one's history with
// GetWorkflowHistory, page by page (the iterator pages the server's responses).
type HistoryReader interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	GetWorkflowHistory(ctx context.Context, workflowID, runID string, isLongPoll bool,
		filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

// RunLogReader reads and prunes the run log the takeovers write (takeover.RunLog);
// *takeover.EtcdRunLog satisfies it.
type RunLogReader interface {
	Runs(ctx context.Context, rng string) ([]takeover.LoggedRun, error)
	Forget(ctx context.Context, rng string, runIDs []string) error
}

var _ RunLogReader = (*takeover.EtcdRunLog)(nil)

var _ HistoryReader = client.Client(nil)

// Source is an earlier run of a dispatcher chain whose accepted requests are still to be handed to
// the current run: RunID's backlog from position Offset on.
type Source struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	// Offset counts the requests of the run's backlog (see Activities.Backlog) already handed over.
	Offset int `json:"offset"`
	// Scan makes the source stand for every earlier run a chain's carry-over must read, not for one
	// run: Chain is the chain's first run (started by a takeover) and RunID the prior run its takeover
	// named (empty when it found none). Backlog replaces it with the workflow ID's closed runs that
	// started before Chain, newest first back to the last one that finished its own carry-over: a
	// pointer alone would miss a run started between the takeover's look and its start, and a late
	// start of a superseded term would hide every run before it.
	Scan  bool   `json:"scan,omitempty"`
	Chain string `json:"chain,omitempty"`
	// RunLog is the range of the run log (takeover.RunLog) that the chain's takeover wrote, from the
	// chain's Owner.RunLog: a scan reads every run logged there, whatever visibility lists.
	RunLog string `json:"run_log,omitempty"`
	// Listed marks a run a scan found: the runs before it are covered by the same scan, so what it
	// had not read itself is not followed.
	Listed bool `json:"listed,omitempty"`
}

// MaxScanRuns bounds the runs one scan hands over. A scan stops at the first run that finished its
// carry-over, normally the run right before the takeover; only a history of many runs that never
// got to read their predecessors (a queue whose owners fail at once, again and again) reaches it,
// and the runs past it are logged as not carried over.
const MaxScanRuns = 100

// scanPage is how many runs one visibility call of a scan lists.
const scanPage = 20

// BacklogInput is the Backlog activity's input: where to read, and the page size.
type BacklogInput struct {
	Sources []Source `json:"sources"`
	Max     int      `json:"max"`
}

// BacklogPage is the Backlog activity's output: at most Max requests, and where the next page
// starts (empty when the backlog is read to the end).
type BacklogPage struct {
	Requests []Request `json:"requests,omitempty"`
	Next     []Source  `json:"next,omitempty"`
	// Skipped counts what could not be handed over: payloads that do not decode as a Request, or
	// requests that break its rules (the run that accepted them rejected them too).
	Skipped int `json:"skipped,omitempty"`
}

// maxPageBytes bounds a page's estimated size, whatever Max says: an activity result must stay well
// under Temporal's 2 MB payload limit.
const maxPageBytes = 512 << 10

// requestSize estimates a request's JSON size.
func requestSize(r Request) int {
	return len(r.Type) + len(r.TaskID) + len(r.PayloadSHA256) + len(r.Parent) + 64
}

// runBacklog is what a closed run leaves to its successor: the requests it accepted whose dispatch
// did not complete in it, and the earlier runs it had not finished reading itself.
type runBacklog struct {
	requests []Request
	sources  []Source
	skipped  int
}

// Backlog returns the next page of the requests that earlier runs accepted and did not see
// through. A run's backlog, in history order and each dispatch key once, is what it was handed (its
// continue-as-new input's pending requests, the pages its own Backlog activities returned) and what
// it accepted (SignalDispatch signals, accepted UpdateDispatch updates), minus the requests whose
// Dispatch activity completed in that run (the ledger has them done) and minus invalid ones. The
// earlier runs that run had not finished reading follow its own backlog in Next. Nothing else is
// subtracted: a request handled in an even earlier run is dispatched again, and the ledger makes it a
// duplicate, or finishes it when its record stayed pending.
//
// The history of a run is immutable once it closed, so the page is the same whenever it is read; a
// run that is still open is an error (retried), and a run whose history is gone (past the
// namespace's retention) is logged and skipped, as there is nothing left to read.
func (a *Activities) Backlog(ctx context.Context, in BacklogInput) (_ BacklogPage, err error) {
	ctx, stop := untilWorkerStops(ctx)
	defer func() { err = givenUp(ctx, err); stop() }()
	if a.History == nil {
		// Retried: a worker built with a history reader can pick the activity up.
		return BacklogPage{}, errors.New("dispatcher: Activities.History must be set to carry over a prior run's requests")
	}
	max := in.Max
	if max <= 0 {
		max = DefaultBacklogPage
	}
	log := activity.GetLogger(ctx)
	page := BacklogPage{Next: append([]Source(nil), in.Sources...)}
	size := 0
	expanded := map[string]bool{}
	for len(page.Next) > 0 && len(page.Requests) < max && size < maxPageBytes {
		src := page.Next[0]
		if src.Scan {
			runs, err := a.scan(ctx, src)
			if err != nil {
				return BacklogPage{}, err
			}
			page.Next = append(runs, page.Next[1:]...)
			continue
		}
		b, err := a.readRun(ctx, src)
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			log.Error("dispatcher run's history is gone; its unhandled requests cannot be carried over",
				"workflow_id", src.WorkflowID, "run_id", src.RunID, "error", err)
			page.Next = page.Next[1:]
			continue
		case err != nil:
			return BacklogPage{}, err
		}
		reqs := b.requests[min(src.Offset, len(b.requests)):]
		n := 0
		for n < len(reqs) && len(page.Requests) < max && size < maxPageBytes {
			page.Requests = append(page.Requests, reqs[n])
			size += requestSize(reqs[n])
			n++
		}
		if src.Offset == 0 {
			page.Skipped += b.skipped
		}
		if n < len(reqs) {
			page.Next[0].Offset = src.Offset + n
			break
		}
		// This run is handed over: what it had not read itself comes next. Histories only point at
		// earlier runs; the guard keeps a malformed input from making a loop.
		expanded[src.RunID] = true
		rest := page.Next[1:]
		page.Next = nil
		for _, s := range b.sources {
			if !src.Listed && (s.Scan || !expanded[s.RunID]) {
				page.Next = append(page.Next, s)
			}
		}
		page.Next = append(page.Next, rest...)
	}
	if len(page.Next) == 0 {
		page.Next = nil
	}
	if n := len(page.Requests); n > 0 {
		a.metrics.get(a.MeterProvider).carried.Add(context.WithoutCancel(ctx), int64(n),
			metric.WithAttributes(attribute.String("workflow_id", activity.GetInfo(ctx).WorkflowExecution.ID)))
	}
	return page, nil
}

// scan returns the closed runs whose backlog the chain src.Chain must read, oldest first, each
// Listed: newest first (a dispatcher's runs never overlap, so starting order is closing order), every
// run that started before the chain's first run, back to and including the first one that finished
// its own carry-over once the takeover's prior run src.RunID was read.
//
// Which runs exist is not taken from visibility alone: it is eventually consistent, and not ordered
// across runs (a closed run may be listed as RUNNING, or not at all, while later runs are listed).
// The runs the run log holds (src.RunLog: every run a takeover started or ended, logged before it was
// reported or ended) and the prior run are described by run ID, and each chain of them is followed
// through its continue-as-new links: Temporal answers those from the runs' own state, strongly
// consistent. Visibility adds the runs Baton did not log (runs from before the log, an application's
// own starts), and its status is never believed: every run is read from its history, and one whose
// history is not closed yet fails the page, which is retried.
func (a *Activities) scan(ctx context.Context, src Source) ([]Source, error) {
	log := activity.GetLogger(ctx)
	k, err := a.knownRuns(ctx, src)
	if err != nil {
		return nil, err
	}
	list := a.listing(src, k)
	var (
		runs      []Source // newest first
		seen      = map[string]bool{}
		priorSeen = src.RunID == "" || k.priorGone
		stopAt    time.Time
		cut       bool
	)
	for !cut {
		r, ok, err := list.next(ctx)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		if seen[r.runID] {
			continue
		}
		seen[r.runID] = true
		run := Source{WorkflowID: src.WorkflowID, RunID: r.runID, Listed: true}
		b, err := a.readRun(ctx, run)
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound) && r.listed:
			// Past the namespace's retention: nothing older is left to read either, but for runs
			// the log or the takeover named (each described, so still there).
			list.stopListing()
			continue
		case err != nil:
			return nil, err
		}
		runs = append(runs, run)
		priorSeen = priorSeen || r.runID == src.RunID
		if len(b.sources) == 0 && priorSeen {
			stopAt = r.start
			break
		}
		if cut = len(runs) == MaxScanRuns; cut {
			log.Error("dispatcher carry-over stops after MaxScanRuns runs; older runs' requests are not carried over",
				"workflow_id", src.WorkflowID, "runs", len(runs), "oldest_run_id", r.runID)
		}
	}
	if !priorSeen && !cut {
		return nil, fmt.Errorf("dispatcher: the scan of %s did not reach %s (the takeover's prior run)", src.WorkflowID, src.RunID)
	}
	a.prune(ctx, src, k, stopAt)
	slices.Reverse(runs)
	return runs, nil
}

// errWorkerStopping is the cause of a Backlog page's context once its worker began to stop.
var errWorkerStopping = errors.New("dispatcher: the worker is stopping; the backlog page is left to the next attempt")

// untilWorkerStops returns ctx, cancelled as well once the activity's worker begins to stop. A
// Backlog page only reads (its run-log pruning is best effort), so a stopping worker abandons it at
// once: the run tries again, on this task queue's other workers or in its successor, which reads the
// same immutable histories. Otherwise the worker's Stop waits for the page, and a scan that is
// still listing runs, retried against visibility's rate limit, holds a whole worker's graceful stop
// for seconds (issue #40: 4.7 s of an 8 s stop of a worker leading 100 queues).
func untilWorkerStops(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stopping := activity.GetWorkerStopChannel(ctx)
	done := make(chan struct{})
	go func() { // ends with the page: the returned stop cancels ctx and waits for it
		defer close(done)
		select {
		case <-stopping:
			cancel(errWorkerStopping)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(nil); <-done }
}

// errTypeWorkerStopping is the type of the failure of a Backlog page that gave up because its worker
// stops (temporal.ApplicationError.Type()).
const errTypeWorkerStopping = "baton.WorkerStopping"

// givenUp returns err as a benign, retryable failure when the page gave up because its worker stops:
// a planned stop is no failure for an error line or an alert. Other errors are returned as they are.
func givenUp(ctx context.Context, err error) error {
	if err == nil || !errors.Is(context.Cause(ctx), errWorkerStopping) {
		return err
	}
	return temporal.NewApplicationErrorWithOptions(errWorkerStopping.Error(), errTypeWorkerStopping,
		temporal.ApplicationErrorOptions{Category: temporal.ApplicationErrorCategoryBenign, Cause: err})
}

// scanned is a run a scan considers, with its start time, which orders it.
type scanned struct {
	runID  string
	start  time.Time
	listed bool // found by visibility, not by the log or the takeover
}

// known is what a scan knows from strongly consistent reads: the chain's own start, and the runs the
// run log and the takeover name.
type known struct {
	chainKnown bool
	chainStart time.Time
	runs       []scanned            // newest first, the chain's own excluded
	records    map[string]time.Time // run log record -> start of the newest run of its chain
	gone       []string             // run log records whose chain's history is gone
	priorGone  bool
}

// knownRuns describes the chain's first run, and every run of the chains in the run log and of the
// prior run's, following continue-as-new links from each chain's last logged run.
func (a *Activities) knownRuns(ctx context.Context, src Source) (known, error) {
	k := known{records: map[string]time.Time{}}
	if src.Chain != "" {
		info, err := a.describeRun(ctx, src.WorkflowID, src.Chain)
		if err != nil {
			return known{}, err
		}
		k.chainKnown, k.chainStart = true, info.GetStartTime().AsTime()
	}
	seeds, err := a.seeds(ctx, src)
	if err != nil {
		return known{}, err
	}
	w := walk{seen: map[string]bool{}, latest: map[string]time.Time{}}
	for _, s := range seeds {
		if t, ok := w.latest[s.record]; ok && s.record != "" {
			// The prior run is of this chain, and the chain's newest: nothing to follow.
			k.records[s.record] = t
			continue
		}
		if err := a.follow(ctx, src, s, &k, &w); err != nil {
			return known{}, err
		}
	}
	slices.SortFunc(k.runs, func(x, y scanned) int { return y.start.Compare(x.start) })
	return k, nil
}

// seed is where knownRuns starts to follow a chain: the prior run, or a run log record's last run.
type seed struct{ runID, record string }

// seeds returns the prior run first, then the run log's chains but this one's.
func (a *Activities) seeds(ctx context.Context, src Source) ([]seed, error) {
	var seeds []seed
	if src.RunID != "" {
		seeds = append(seeds, seed{runID: src.RunID})
	}
	if src.RunLog == "" {
		return seeds, nil
	}
	rl := a.runLog()
	if rl == nil {
		// Retried: a worker with an etcd ledger (or Activities.RunLog) can pick the activity up.
		return nil, errors.New("dispatcher: Activities.RunLog (or a ledger.Etcd) must be set to read the run log of a takeover that kept one")
	}
	logged, err := rl.Runs(ctx, src.RunLog)
	switch {
	case errors.Is(err, takeover.ErrRunLogDenied):
		// A role that predates the log: find the runs as before it, and say so once.
		if a.runLogDenied.CompareAndSwap(false, true) {
			activity.GetLogger(ctx).Error("dispatcher carry-over cannot read the run log; it relies on Temporal's visibility alone until the etcd role grants it",
				"range", src.RunLog, "error", err)
		}
	case err != nil:
		return nil, err
	}
	for _, r := range logged {
		if r.RunID != src.Chain {
			seeds = append(seeds, seed{runID: cmp.Or(r.Last, r.RunID), record: r.RunID})
		}
	}
	return seeds, nil
}

// walk is what knownRuns has followed so far.
type walk struct {
	seen   map[string]bool
	latest map[string]time.Time // chain's first run -> the start of its newest run described
	steps  int                  // continue-as-new links followed
}

// follow describes the run s names and the runs it continued as new into, adding them to k.
func (a *Activities) follow(ctx context.Context, src Source, s seed, k *known, w *walk) error {
	for id := s.runID; id != "" && !w.seen[id]; {
		w.seen[id] = true
		info, err := a.describeRun(ctx, src.WorkflowID, id)
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			// Past the namespace's retention: there is nothing left to read.
			if s.record != "" {
				k.gone = append(k.gone, s.record)
			}
			k.priorGone = k.priorGone || id == src.RunID
			return nil
		}
		if err != nil {
			return err
		}
		start := info.GetStartTime().AsTime()
		if k.chainKnown && !start.Before(k.chainStart) {
			return nil // this chain's own
		}
		k.runs = append(k.runs, scanned{runID: id, start: start})
		if s.record != "" && start.After(k.records[s.record]) {
			k.records[s.record] = start
		}
		if first := cmp.Or(info.GetFirstRunId(), id); start.After(w.latest[first]) {
			w.latest[first] = start
		}
		if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
			return nil
		}
		if w.steps++; w.steps > MaxScanRuns {
			// A chain that continued as new this often since it was logged last: the later runs
			// are left to visibility, and the record stays for the next scan.
			activity.GetLogger(ctx).Warn("dispatcher carry-over stops following a logged chain after MaxScanRuns runs",
				"workflow_id", src.WorkflowID, "run_id", id)
			delete(k.records, s.record)
			return nil
		}
		if id, err = a.continuedAs(ctx, src.WorkflowID, id); err != nil {
			return err
		}
	}
	return nil
}

// runLog is where the scan reads the run log: Activities.RunLog, or the etcd ledger's client.
func (a *Activities) runLog() RunLogReader {
	if a.RunLog != nil {
		return a.RunLog
	}
	if l, ok := a.Ledger.(*ledger.Etcd); ok {
		if rl := l.RunLog(); rl != nil { // never a typed nil in the interface
			return rl
		}
	}
	return nil
}

// describeRun describes one run by its ID.
func (a *Activities) describeRun(ctx context.Context, workflowID, runID string) (*workflowpb.WorkflowExecutionInfo, error) {
	resp, err := a.History.DescribeWorkflowExecution(ctx, workflowID, runID)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: describe %s run %s: %w", workflowID, runID, err)
	}
	return resp.GetWorkflowExecutionInfo(), nil
}

// continuedAs returns the run that runID continued as new into, from its close event.
func (a *Activities) continuedAs(ctx context.Context, workflowID, runID string) (string, error) {
	iter := a.History.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return "", fmt.Errorf("dispatcher: close event of %s run %s: %w", workflowID, runID, err)
		}
		if attrs := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); attrs != nil {
			return attrs.GetNewExecutionRunId(), nil
		}
	}
	return "", nil
}

// prune forgets the run log's records that no later scan needs: the chains whose newest run started
// before stopAt, the run that finished its own carry-over where this scan stopped (every run before
// it is covered by it), and those whose history is gone. A failure is logged: the records stay, and
// the next scan reads them again.
func (a *Activities) prune(ctx context.Context, src Source, k known, stopAt time.Time) {
	forget := k.gone
	if !stopAt.IsZero() {
		for rec, start := range k.records {
			if start.Before(stopAt) {
				forget = append(forget, rec)
			}
		}
	}
	if len(forget) == 0 || src.RunLog == "" {
		return
	}
	slices.Sort(forget)
	if err := a.runLog().Forget(ctx, src.RunLog, forget); err != nil {
		activity.GetLogger(ctx).Warn("dispatcher carry-over could not prune the run log; the next scan reads those runs again",
			"workflow_id", src.WorkflowID, "records", len(forget), "error", err)
	}
}

// listedTimeSlack bounds how much coarser than the run's own a visibility store may keep a start time.
const listedTimeSlack = time.Second

// has reports whether the scan knows runID from the run log or the takeover.
func (k known) has(runID string) bool {
	return slices.ContainsFunc(k.runs, func(r scanned) bool { return r.runID == runID })
}

// listing merges the visibility listing of a scan's workflow ID (newest first, page by page) with the
// runs the scan knows, newest first.
type listing struct {
	a     *Activities
	src   Source
	k     known
	ki    int       // the next of k.runs
	page  []scanned // the rows of the last page not returned yet
	token []byte
	done  bool // visibility has no more pages (or is not read any further)
}

func (a *Activities) listing(src Source, k known) *listing {
	return &listing{a: a, src: src, k: k}
}

// stopListing stops reading visibility; the known runs still follow.
func (l *listing) stopListing() { l.page, l.done = nil, true }

// next returns the newest run not returned yet; ok is false when there is none.
func (l *listing) next(ctx context.Context) (r scanned, ok bool, err error) {
	for len(l.page) == 0 && !l.done {
		resp, err := l.a.History.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = %s", strconv.Quote(l.src.WorkflowID)), PageSize: scanPage, NextPageToken: l.token})
		if err != nil {
			return scanned{}, false, fmt.Errorf("dispatcher: list the runs of %s: %w", l.src.WorkflowID, err)
		}
		for _, info := range resp.GetExecutions() {
			s := scanned{runID: info.GetExecution().GetRunId(), start: info.GetStartTime().AsTime(), listed: true}
			switch {
			case l.k.has(s.runID):
				continue // known, with its start time from the run itself
			case !l.k.chainKnown && info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
				continue // a chain that does not know its first run cannot tell its own runs otherwise
			case l.k.chainKnown && s.start.After(l.k.chainStart.Add(-listedTimeSlack)):
				// Close to the chain's start, or after it: a store may keep start times coarser than
				// the run's own, so the run tells whether it is one of the chain's.
				d, err := l.a.describeRun(ctx, l.src.WorkflowID, s.runID)
				if err != nil {
					return scanned{}, false, err
				}
				s.start = d.GetStartTime().AsTime()
				if s.runID == l.src.Chain || d.GetFirstRunId() == l.src.Chain || !s.start.Before(l.k.chainStart) {
					continue // this chain's own runs
				}
			}
			l.page = append(l.page, s)
		}
		l.token = resp.GetNextPageToken()
		l.done = len(l.token) == 0
	}
	if l.ki < len(l.k.runs) && (len(l.page) == 0 || l.k.runs[l.ki].start.After(l.page[0].start)) {
		l.ki++
		return l.k.runs[l.ki-1], true, nil
	}
	if len(l.page) > 0 {
		r, l.page = l.page[0], l.page[1:]
		return r, true, nil
	}
	return scanned{}, false, nil
}

// readRun reads one closed run's backlog, from a small cache: its pages are read one after another.
func (a *Activities) readRun(ctx context.Context, src Source) (runBacklog, error) {
	id := src.WorkflowID + "\x00" + src.RunID
	a.mu.Lock()
	for _, c := range a.cache {
		if c.id == id {
			a.mu.Unlock()
			return c.backlog, nil
		}
	}
	a.mu.Unlock()
	b, err := a.read(ctx, src)
	if err != nil {
		return runBacklog{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cache = append(a.cache, cachedRun{id: id, backlog: b})
	if len(a.cache) > backlogCacheRuns {
		a.cache = a.cache[1:]
	}
	return b, nil
}

// backlogCacheRuns is how many runs' backlogs a worker keeps between pages.
const backlogCacheRuns = 4

type cachedRun struct {
	id      string
	backlog runBacklog
}

// read reads one closed run's backlog from its history.
func (a *Activities) read(ctx context.Context, src Source) (runBacklog, error) {
	dc := a.DataConverter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	h := &historyScan{ctx: ctx, src: src, dc: dc, kinds: map[int64]string{}, keys: map[int64][]string{}, completed: map[string]bool{}}
	iter := a.History.GetWorkflowHistory(ctx, src.WorkflowID, src.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	events, closed := 0, false
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return runBacklog{}, fmt.Errorf("dispatcher: history of %s run %s: %w", src.WorkflowID, src.RunID, err)
		}
		if events++; events%1000 == 0 {
			activity.RecordHeartbeat(ctx, events)
		}
		closed = closes(ev.GetEventType())
		h.event(ev)
	}
	if !closed {
		// Its history could still grow: reading it now could miss a request. Retried until it closed.
		return runBacklog{}, fmt.Errorf("dispatcher: %s run %s is still open; its backlog is read once it closed", src.WorkflowID, src.RunID)
	}
	return h.backlog(), nil
}

// historyScan is one run's history read event by event: what the run accepted, and which dispatch
// keys its own activities saw through.
type historyScan struct {
	ctx       context.Context
	src       Source
	dc        converter.DataConverter
	b         runBacklog
	accepted  []Request
	kinds     map[int64]string   // scheduled event ID -> activity type, for our activities
	keys      map[int64][]string // scheduled event ID -> dispatch keys
	completed map[string]bool    // dispatch keys whose activity completed
}

// closes reports whether an event of type t ends a run.
func closes(t enumspb.EventType) bool {
	switch t {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
		return true
	}
	return false
}

// decode decodes p into v; a payload it cannot read is skipped, counted and logged.
func (h *historyScan) decode(what string, p *commonpb.Payloads, v any) bool {
	if err := h.dc.FromPayloads(p, v); err != nil {
		activity.GetLogger(h.ctx).Warn("dispatcher history payload unreadable; skipped", "workflow_id", h.src.WorkflowID,
			"run_id", h.src.RunID, "what", what, "error", err)
		h.b.skipped++
		return false
	}
	return true
}

func (h *historyScan) event(ev *historypb.HistoryEvent) {
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
		attrs := ev.GetWorkflowExecutionStartedEventAttributes()
		var in Input
		if !h.decode("input", attrs.GetInput(), &in) {
			return
		}
		h.b.sources = startSources(h.src.WorkflowID, attrs.GetFirstExecutionRunId(), in, true)
		if in.Carry != nil {
			h.accepted = append(h.accepted, in.Carry.Pending...)
		}
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
		attrs := ev.GetWorkflowExecutionSignaledEventAttributes()
		var r Request
		if attrs.GetSignalName() == SignalDispatch && h.decode("signal", attrs.GetInput(), &r) {
			h.accepted = append(h.accepted, r)
		}
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
		in := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput()
		var r Request
		if in.GetName() == UpdateDispatch && h.decode("update", in.GetArgs(), &r) {
			h.accepted = append(h.accepted, r)
		}
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
		h.scheduled(ev.GetEventId(), ev.GetActivityTaskScheduledEventAttributes())
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
		h.activityCompleted(ev.GetActivityTaskCompletedEventAttributes())
	}
}

// scheduled remembers what an activity of ours was scheduled for.
func (h *historyScan) scheduled(id int64, attrs *historypb.ActivityTaskScheduledEventAttributes) {
	switch attrs.GetActivityType().GetName() {
	case ActivityBacklog:
		h.kinds[id] = ActivityBacklog
	case ActivityDispatch:
		var t Task
		if h.dc.FromPayloads(attrs.GetInput(), &t) == nil {
			h.keys[id] = []string{t.Key}
		}
	case ActivityDispatchBatch:
		var b Batch
		if h.dc.FromPayloads(attrs.GetInput(), &b) == nil {
			h.kinds[id] = ActivityDispatchBatch
			for _, it := range b.Items {
				h.keys[id] = append(h.keys[id], it.Key)
			}
		}
	}
}

// activityCompleted records what a completed activity of ours saw through, or handed the run.
func (h *historyScan) activityCompleted(attrs *historypb.ActivityTaskCompletedEventAttributes) {
	id := attrs.GetScheduledEventId()
	switch h.kinds[id] {
	case ActivityDispatchBatch:
		// Items that failed on their own (a bad ledger record) did not complete.
		var r BatchResult
		if h.dc.FromPayloads(attrs.GetResult(), &r) == nil && len(r.Results) == len(h.keys[id]) {
			for i, k := range h.keys[id] {
				if r.Results[i].ErrorType == "" {
					h.completed[k] = true
				}
			}
		}
	case ActivityBacklog:
		var p BacklogPage
		if h.decode("backlog page", attrs.GetResult(), &p) {
			h.accepted = append(h.accepted, p.Requests...)
			h.b.sources = p.Next
		}
	default:
		for _, k := range h.keys[id] {
			h.completed[k] = true
		}
	}
}

// backlog is what the run accepted and did not see through, in history order, each dispatch key once.
func (h *historyScan) backlog() runBacklog {
	b := h.b
	seen := map[string]bool{}
	for _, r := range h.accepted {
		if r.Validate() != nil {
			b.skipped++
			continue
		}
		k := r.Key()
		if h.completed[k] || seen[k] {
			continue
		}
		seen[k] = true
		b.requests = append(b.requests, r)
	}
	return b
}

// startSources returns the earlier runs a run started with in must read back: those its
// continue-as-new input says are still unread, or, for a run a takeover started (the first of its
// chain, firstRunID), a scan of the runs before it. Runs started before scans were introduced
// (scan false, for their replay) read the prior run alone.
func startSources(workflowID, firstRunID string, in Input, scan bool) []Source {
	switch {
	case in.Carry != nil:
		return append([]Source(nil), in.Carry.Backlog...)
	case scan:
		return []Source{{WorkflowID: workflowID, RunID: in.PriorRunID, Scan: true, Chain: firstRunID, RunLog: in.RunLog}}
	case in.PriorRunID != "":
		return []Source{{WorkflowID: workflowID, RunID: in.PriorRunID}}
	}
	return nil
}
