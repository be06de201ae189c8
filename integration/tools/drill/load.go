package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/cmd/demo-worker/loadreport"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/ledger"
)

// The load phase (Config.LoadRate > 0): while the faults run, `demo-worker load -mode=signal`
// sends distinct dispatch requests to the dispatcher of each loaded queue with SignalWorkflow, a
// fire-and-forget producer that retries a failed send until Temporal accepts it, and lists what
// Temporal accepted (-accepted-out). The drill watches the dispatch ledger from before the first
// send (ledger.Watch) and judges every accepted request from etcd's records, not from the
// producer's or the workers' word: handled (done once the ledger has settled, LoadSettle after the
// last send), lost (never done), double (done more than once), and any record of the load still
// pending at the end (a run terminated mid-dispatch left it, and no successor finished it).
//
// The handler's own runs (the demo's "dispatched" log lines) are counted as well: a handler that
// ran again for a key whose record a terminated run left pending is what the ledger allows
// (at-least-once between Begin and Complete) and is reported, not a violation.

// The load checks a violation can name.
const (
	// CheckLoadLost: a request Temporal accepted was never recorded handled in the ledger.
	CheckLoadLost = "load-lost"
	// CheckLoadDouble: a request's ledger record became done more than once.
	CheckLoadDouble = "load-double"
	// CheckLoadPending: a ledger record was still pending when the ledger had settled.
	CheckLoadPending = "load-pending"
	// CheckLoadFailed: the producer did not run, accepted nothing, or the ledger could not be read.
	CheckLoadFailed = "load-failed"
)

// LoadStats is what the load phase found.
type LoadStats struct {
	Rate   float64  `json:"rate_per_queue"`
	Queues []string `json:"queues"`
	// Sent and Accepted are the producer's counts (Accepted: Temporal took the signal).
	Sent     int `json:"sent"`
	Accepted int `json:"accepted"`
	// Retries counts failed sends that were sent again (a handover's gap answers NotFound).
	Retries int `json:"retries"`
	// From the ledger: accepted requests done, lost (never done), done twice; records left pending.
	Handled int `json:"handled"`
	Lost    int `json:"lost"`
	Double  int `json:"double"`
	Pending int `json:"pending"`
	// Redispatched counts keys whose handler ran more than once (at-least-once between Begin and
	// Complete; not a violation).
	Redispatched int `json:"redispatched"`
	// Send -> handled: from the producer's send to the drill's sight of the done record.
	P50 time.Duration `json:"p50_ns"`
	P99 time.Duration `json:"p99_ns"`
	Max time.Duration `json:"max_ns"`
	// SettledAfter is how long after the last send the ledger showed every accepted request done.
	SettledAfter time.Duration `json:"settled_after_ns"`
}

// loadPhase is the producer process and the drill's watch of the ledger.
type loadPhase struct {
	proc     *workerproc.Proc
	keysPath string
	queues   []string
	watch    *ledger.Watch
}

// startLoad starts the ledger watch and the producer, and waits for the producer's first summary
// line (requests are flowing).
func (d *Drill) startLoad(ctx context.Context) error {
	n := d.cfg.LoadQueues // the first n queues get the load
	if n <= 0 || n > len(d.queues) {
		n = len(d.queues)
	}
	l := &loadPhase{queues: d.queues[:n], keysPath: filepath.Join(d.dir, "load-accepted.txt")}
	var err error
	if l.watch, err = ledger.NewWatch(ctx, d.ec, ledger.DefaultPrefix, d.cfg.Project); err != nil {
		return fmt.Errorf("load: %w", err)
	}
	d.load = l
	d.bgWG.Go(func() { l.watch.Run(d.bg) })

	bin, err := binPath(cmp.Or(d.cfg.LoadBin, d.bin))
	if err != nil {
		return err
	}
	env := append(d.clientEnv(d.etcd.Endpoints()), "BATON_QUEUES="+strings.Join(l.queues, ","), "BATON_LOG_LEVEL=warn")
	l.proc, err = workerproc.Start(workerproc.Options{Load: true, LogFile: filepath.Join(d.dir, "load.log")}, bin, "load", env,
		"-mode=signal", "-rate="+strconv.FormatFloat(d.cfg.LoadRate, 'f', -1, 64),
		// -settle bounds both the retries of a send in flight at the stop and the producer's own
		// read-back of the ledger (a cross-check in load.log); the drill's wait comes after it.
		"-interval=5s", "-settle="+min(d.cfg.LoadSettle, 30*time.Second).String(), "-accepted-out="+l.keysPath,
		fmt.Sprintf("-run-id=drill-%d", d.cfg.Seed))
	if err != nil {
		return fmt.Errorf("start the load: %w", err)
	}
	d.logf("load: %v requests/s per queue on %s (demo-worker load -mode=signal)", d.cfg.LoadRate, strings.Join(l.queues, ","))
	err = harness.Poll(ctx, 60*time.Second, 100*time.Millisecond, func() error {
		switch {
		case l.proc.Exited():
			return harness.Final(fmt.Errorf("exited with code %d", l.proc.Code()))
		case !hasSummary(l.proc):
			return errors.New("no summary yet")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the load did not start sending: %w: %s", err, l.proc.Tail(1500))
	}
	return nil
}

// endLoad stops the producer (SIGTERM: it stops sending, insists on the sends in flight, lists what
// was accepted), waits for the ledger to settle, and judges every accepted request.
func (d *Drill) endLoad(ctx context.Context) {
	l := d.load
	stopped := time.Now()
	d.logf("load: stopping the producer (SIGTERM)")
	l.proc.Signal(syscall.SIGTERM)
	select {
	case <-l.proc.Done():
	case <-time.After(2 * time.Minute):
		l.proc.Kill()
	case <-ctx.Done():
		return
	}
	st := &LoadStats{Rate: d.cfg.LoadRate, Queues: l.queues}
	d.loadStats = st
	failed := func(format string, args ...any) {
		d.violate(Violation{Check: CheckLoadFailed, At: time.Now(), Detail: fmt.Sprintf(format, args...)})
	}
	total, _ := l.proc.Summary()
	st.Sent, st.Retries = int(total.Sent), int(total.Retries)
	reqs, err := loadreport.ReadAccepted(l.keysPath)
	switch {
	case l.proc.Code() != 0:
		failed("the producer exited with code %d: %s", l.proc.Code(), l.proc.Tail(1500))
		return
	case err != nil:
		failed("the producer's accepted requests: %v", err)
		return
	case !total.Final:
		failed("the producer printed no final summary: %s", l.proc.Tail(1500))
		return
	case len(reqs) != int(total.Accepted):
		failed("the producer counted %d accepted requests and listed %d", total.Accepted, len(reqs))
	}
	st.Accepted = len(reqs)
	if st.Accepted == 0 {
		failed("Temporal accepted no request: sent %d, retries %d", total.Sent, total.Retries)
		return
	}
	d.logf("load: sent %d, accepted %d, retried sends %d; waiting up to %v for the ledger to show every accepted request handled",
		total.Sent, total.Accepted, total.Retries, d.cfg.LoadSettle)

	// The ledger settles: every accepted request done and no record pending, or the bound passed.
	var states map[string]ledgerRecord
	var rev int64
	err = harness.Poll(ctx, d.cfg.LoadSettle, 500*time.Millisecond, func() (err error) {
		if states, rev, err = readLedger(ctx, d.ec, d.cfg.Project); err != nil {
			return err
		}
		for _, r := range reqs {
			if states[r.Key].State != ledger.Done {
				return errors.New("an accepted request is not done")
			}
		}
		// Every pending record, the watch's or not yet: a settled ledger has none of the load's.
		for _, rec := range states {
			if rec.State == ledger.Pending {
				return errors.New("a record is pending")
			}
		}
		return nil
	})
	switch {
	case ctx.Err() != nil:
		return
	case err == nil:
		st.SettledAfter = time.Since(stopped)
	case states == nil:
		failed("reading the ledger: %v", err)
		return
	}
	// The watch must have seen every put up to the revision the verdict is read at.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := l.watch.WaitFor(wctx, rev); err != nil {
		if ctx.Err() == nil {
			failed("%v", err)
		}
		return
	}

	dones, touched := l.watch.Seen()
	lost, double, pending := judge(st, reqs, states, dones, touched)
	now := time.Now()
	if len(lost) > 0 {
		d.violate(Violation{Check: CheckLoadLost, At: now, Detail: fmt.Sprintf("%d of %d accepted requests never recorded handled within %v of the last send: %s",
			len(lost), st.Accepted, d.cfg.LoadSettle, firstN(lost, 10))})
	}
	if len(double) > 0 {
		d.violate(Violation{Check: CheckLoadDouble, At: now, Detail: fmt.Sprintf("%d requests completed more than once: %s", len(double), firstN(double, 10))})
	}
	if len(pending) > 0 {
		d.violate(Violation{Check: CheckLoadPending, At: now, Detail: fmt.Sprintf("%d ledger records still pending: %s", len(pending), firstN(pending, 10))})
	}
	d.logf("load: accepted %d, handled %d, lost %d, double %d, pending %d; send -> handled p50 %s p99 %s max %s",
		st.Accepted, st.Handled, st.Lost, st.Double, st.Pending, fmtDur(st.P50), fmtDur(st.P99), fmtDur(st.Max))
}

// judge fills st from the ledger's records at the end (states) and the puts the watch saw, and
// returns the evidence of each lost request, request completed twice and record of the load left
// pending.
func judge(st *LoadStats, reqs []loadreport.Accepted, states map[string]ledgerRecord, dones map[string][]ledger.Completion,
	touched map[string]bool) (lost, double, pending []string) {
	short := func(k string) string { return k[:min(12, len(k))] }
	var lat []time.Duration
	for _, r := range reqs {
		rec := states[r.Key]
		if rec.State == ledger.Done {
			st.Handled++
		} else {
			lost = append(lost, fmt.Sprintf("%s (%s, sent %s): %s", short(r.Key), r.Queue, r.Sent.Format(tsFormat), cmp.Or(rec.Raw, "no record")))
		}
		if ds := dones[r.Key]; len(ds) > 0 {
			lat = append(lat, ds[0].Seen.Sub(r.Sent))
		}
	}
	for k, ds := range dones {
		if len(ds) > 1 {
			var vs []string
			for _, d := range ds {
				vs = append(vs, fmt.Sprintf("%s@rev%d", d.Record, d.Rev))
			}
			double = append(double, fmt.Sprintf("%s: %s", short(k), strings.Join(vs, ", ")))
		}
	}
	for k, rec := range states {
		if rec.State == ledger.Pending && touched[k] {
			pending = append(pending, fmt.Sprintf("%s: %s", short(k), rec.Raw))
		}
	}
	sort.Strings(double)
	sort.Strings(pending)
	st.Lost, st.Double, st.Pending = len(lost), len(double), len(pending)
	st.P50, st.P99, st.Max = benchreport.Percentile(lat, 50), benchreport.Percentile(lat, 99), benchreport.Percentile(lat, 100)
	return lost, double, pending
}

func firstN(s []string, n int) string {
	if len(s) <= n {
		return strings.Join(s, "; ")
	}
	return strings.Join(s[:n], "; ") + fmt.Sprintf("; … %d more", len(s)-n)
}

// ledgerRecord is one ledger record: State is the first word of Raw, "<state> <server_id> <token>".
type ledgerRecord struct{ State, Raw string }

// readLedger reads every record of project's ledger at one revision, keyed by dispatch key, and returns
// that revision; the read as a whole gets 10 s, so that a member killed under it costs a retry of the
// caller's, not the drill.
func readLedger(ctx context.Context, cli *clientv3.Client, project string) (map[string]ledgerRecord, int64, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	raw, rev, err := ledger.Read(rctx, cli, ledger.DefaultPrefix, project)
	if err != nil {
		return nil, 0, err
	}
	out := make(map[string]ledgerRecord, len(raw))
	for k, v := range raw {
		out[k] = ledgerRecord{State: ledger.State(v), Raw: v}
	}
	return out, rev, nil
}

// hasSummary reports whether the producer has printed a summary: it is sending.
func hasSummary(p *workerproc.Proc) bool {
	_, ok := p.Summary()
	return ok
}
