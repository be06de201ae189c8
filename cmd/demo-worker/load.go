package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"
	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton/cmd/demo-worker/loadreport"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/internal/opscli"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// Load modes.
const (
	// modeSignal sends each request with SignalWorkflow and retries a failed send until Temporal
	// accepts it, as fire-and-forget producers do; whether it was handled only the ledger knows.
	modeSignal = "signal"
	// modeDispatch sends each request with dispatcher.Producer.Dispatch, which returns once the
	// request is recorded handled, retrying across a handover by itself.
	modeDispatch = "dispatch"
)

// Defaults and bounds of `demo-worker load`.
const (
	defaultLoadRate     = 10.0
	defaultLoadInterval = time.Second
	defaultLoadSettle   = 30 * time.Second
	defaultInFlight     = 256
	maxLoadRate         = 10000.0
	sendRetryMin        = 10 * time.Millisecond
	sendRetryMax        = time.Second
)

// loadOptions is the configuration of `demo-worker load`.
type loadOptions struct {
	opscli.Common
	mode     string
	rate     float64       // requests per second per queue
	duration time.Duration // 0: until the process is asked to stop
	interval time.Duration // between summary lines
	settle   time.Duration // how long the ledger may take to show every accepted request handled
	inFlight int           // sends in flight per queue at most
	run      string        // distinguishes this run's requests from every other run's
	ledger   string        // ledger prefix; read back when etcd endpoints are set
	// acceptedOut, when set, receives one line per accepted request: "<key> <queue> <sent_unix_ns>
	// <accepted_unix_ns>", so that a drill can judge every request from the ledger itself.
	acceptedOut string
	// json prints each summary as a loadreport.Summary, one JSON object per line, for tools.
	json bool
	// metricsAddr, when set, is where /metrics is served while the load runs: in dispatch mode the
	// Producer's baton_dispatch_producer_* series, which only the process that calls Dispatch has.
	metricsAddr string
}

// parseLoad reads the environment and the flags of `demo-worker load` and validates them.
func parseLoad(args []string, stdout io.Writer) (loadOptions, error) {
	var o loadOptions
	var err error
	if o.Common, err = opscli.LoadCommon(ownEnv()...); err != nil {
		return o, err
	}
	o.mode, o.rate, o.interval, o.settle, o.inFlight, o.ledger = modeSignal, defaultLoadRate, defaultLoadInterval, defaultLoadSettle, defaultInFlight, ledger.DefaultPrefix
	fs := flag.NewFlagSet("demo-worker load", flag.ContinueOnError)
	o.AddFlags(fs)
	fs.StringVar(&o.mode, "mode", o.mode, "how requests are sent: signal (SignalWorkflow, each failed send retried until accepted) or dispatch (dispatcher.Producer, returns once handled)")
	fs.Float64Var(&o.rate, "rate", o.rate, "dispatch requests per second per queue, at random (Poisson) times")
	fs.DurationVar(&o.duration, "duration", 0, "how long to send (0: until SIGTERM or SIGINT)")
	fs.Var(opscli.Duration(&o.interval), "interval", "time between summary lines")
	fs.BoolVar(&o.json, "json", false, "print each summary as one JSON object per line (package loadreport), for tools")
	fs.Var(opscli.Duration(&o.settle), "settle", "how long the ledger may take, after the sending, to show every accepted request handled; in dispatch mode also the bound of each Dispatch")
	fs.IntVar(&o.inFlight, "in-flight", o.inFlight, "sends in flight per queue at most; arrivals wait beyond it")
	fs.StringVar(&o.run, "run-id", "", "prefix of this run's task IDs, so that runs never share a dispatch key (default: random)")
	fs.StringVar(&o.ledger, "ledger-prefix", o.ledger, "etcd prefix of the dispatch ledger, read back at the end when -etcd-endpoints is set")
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve GET /metrics (Prometheus) on this HOST:PORT (or fd:N, an inherited listening socket) while the load runs: in dispatch mode the Producer's calls by outcome and their latency (default: not served)")
	fs.StringVar(&o.acceptedOut, "accepted-out", "", "write every accepted request to this file at the end, one line each: <dispatch key> <queue> <sent unix ns> <accepted unix ns>")
	if err := opscli.Parse(fs, args, stdout); err != nil {
		return o, err
	}
	if err := o.ReadSecrets(); err != nil {
		return o, err
	}
	if err := o.validate(); err != nil {
		return o, err
	}
	if o.run == "" {
		o.run = "load-" + rand.Text()[:10]
	}
	return o, nil
}

func (o loadOptions) validate() error {
	switch {
	case o.mode != modeSignal && o.mode != modeDispatch:
		return fmt.Errorf("flag -mode must be %s or %s, got %q", modeSignal, modeDispatch, o.mode)
	case math.IsNaN(o.rate) || o.rate <= 0 || o.rate > maxLoadRate:
		return fmt.Errorf("flag -rate must be above 0 and at most %v requests per second per queue, got %v", maxLoadRate, o.rate)
	case o.duration < 0:
		return fmt.Errorf("flag -duration must not be negative, got %v", o.duration)
	case o.inFlight < 1:
		return fmt.Errorf("flag -in-flight must be at least 1, got %d", o.inFlight)
	case strings.ContainsRune(o.run, 0):
		return fmt.Errorf("flag -run-id must not contain NUL")
	case !strings.HasPrefix(o.ledger, "/") || strings.HasSuffix(o.ledger, "/"):
		return fmt.Errorf("flag -ledger-prefix must start with / and not end with /, got %q", o.ledger)
	}
	if o.metricsAddr != "" {
		if err := checkListenAddr(o.metricsAddr); err != nil {
			return fmt.Errorf("flag -metrics-addr: %w", err)
		}
	}
	check := o.Cfg
	if err := check.Validate(); err != nil {
		return err
	}
	clients := o.Clients
	if len(clients.EtcdEndpoints) == 0 {
		clients.EtcdEndpoints = []string{"placeholder:2379"} // etcd is optional: without it the ledger is not read
	}
	return clients.Validate()
}

// loadCounts are the totals of a load run, updated by its senders.
type loadCounts struct {
	sent, accepted, retries, waited atomic.Int64
	// dispatch mode only: handled as Dispatch reported; unsettled when Dispatch had not seen the
	// request handled by the end of its bound (-settle): not a failure, the run may have accepted
	// it and still handle it, which the ledger read-back tells; rejected (ErrInvalidRequest); and
	// failed (any other error: one retrying cannot fix).
	handled, unsettled, rejected, failed atomic.Int64

	mu            sync.Mutex
	unsettledKeys []string // dispatch mode: read back from the ledger with the accepted ones
	firstErr      error    // the first failure, printed once at the end
}

// unsettledReq records a request Dispatch had not seen handled when its bound ended.
func (c *loadCounts) unsettledReq(key string) {
	c.unsettled.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.unsettledKeys = append(c.unsettledKeys, key)
}

// failedReq records a request Dispatch failed for good.
func (c *loadCounts) failedReq(err error) {
	c.failed.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.firstErr == nil {
		c.firstErr = err
	}
}

// summary is what the counts say now.
func (c *loadCounts) summary(mode string, elapsed time.Duration) loadreport.Summary {
	s := loadreport.Summary{Elapsed: elapsed, Mode: mode, Sent: c.sent.Load(), Accepted: c.accepted.Load(), Waited: c.waited.Load()}
	if mode == modeDispatch {
		s.Handled, s.Unsettled, s.Rejected, s.Errors = c.handled.Load(), c.unsettled.Load(), c.rejected.Load(), c.failed.Load()
	} else {
		s.Retries = c.retries.Load()
	}
	return s
}

// printSummary prints s as a JSON line (-json), or as the line people read.
func printSummary(w io.Writer, s loadreport.Summary, asJSON bool) {
	if asJSON {
		b, _ := json.Marshal(s)
		fmt.Fprintf(w, "%s\n", b)
		return
	}
	prefix := fmt.Sprintf("load: %6.1fs", s.Elapsed.Seconds())
	if s.Final {
		prefix = "load total:"
	}
	l := fmt.Sprintf("%s sent=%d accepted=%d", prefix, s.Sent, s.Accepted)
	if s.Mode == modeDispatch {
		l += fmt.Sprintf(" handled=%d unsettled=%d rejected=%d errors=%d waited=%d", s.Handled, s.Unsettled, s.Rejected, s.Errors, s.Waited)
	} else {
		l += fmt.Sprintf(" retries=%d waited=%d", s.Retries, s.Waited)
	}
	switch {
	case s.LedgerError != "":
		l += " ledger=error"
	case s.Ledger == nil:
		l += " ledger=unread"
	default:
		l += " " + ledgerString(*s.Ledger)
	}
	if u := s.UnsettledLedger; u != nil {
		l += fmt.Sprintf(" unsettled_handled_later=%d unsettled_not_handled=%d", u.Handled, u.NotHandled)
	}
	fmt.Fprintln(w, l)
}

// sender sends one request; accepted is true once Temporal took it (in dispatch mode: once it was
// recorded handled, so there accepted counts what Dispatch returned handled, and the ledger
// read-back checks exactly those).
type sender func(ctx context.Context, queue string, req dispatcher.Request, counts *loadCounts) (accepted bool)

// newSender returns the sender of o's mode; mp receives the Producer's metrics (dispatch mode).
func newSender(tc client.Client, o loadOptions, mp metric.MeterProvider) (sender, error) {
	if o.mode == modeSignal {
		return func(ctx context.Context, queue string, req dispatcher.Request, counts *loadCounts) bool {
			// A send keeps retrying after -duration ends (for at most the settle time): a request
			// sent is one its producer insists on.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.settle)
			defer cancel()
			wfID, err := takeover.WorkflowID(o.Cfg.Project, queue)
			return err == nil && sendSignal(sctx, tc, wfID, req, counts)
		}, nil
	}
	p, err := dispatcher.NewProducer(tc, dispatcher.ProducerConfig{MeterProvider: mp})
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, queue string, req dispatcher.Request, counts *loadCounts) bool {
		// Dispatch retries across a handover by itself; the bound is the settle time, not the sending.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.settle)
		defer cancel()
		_, err := p.Dispatch(dctx, o.Cfg.Project, queue, req)
		switch {
		case err == nil:
			counts.handled.Add(1)
			return true
		case errors.Is(err, dispatcher.ErrInvalidRequest):
			counts.rejected.Add(1)
		case errors.Is(err, context.DeadlineExceeded) && dctx.Err() != nil:
			// The bound ended while Dispatch still retried (a takeover, the server's limit of
			// updates in flight per run): the request is undecided, not refused.
			counts.unsettledReq(req.Key())
		default:
			counts.failedReq(err)
		}
		return false
	}, nil
}

// runLoad is `demo-worker load`.
func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseLoad(args, stdout)
	switch {
	case errors.Is(err, opscli.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "demo-worker load: %v\n", err)
		return exitConfig
	}
	var lc opscli.Hooks
	defer func() { lc.Stop(ctx, opscli.DefaultStatusTimeout) }()
	// First, so that a busy port fails before any connection, and the metrics stop last.
	mp, metricsAt, err := serveLoadMetrics(&lc, o, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "demo-worker load: -metrics-addr: %v\n", err)
		return exitStartError
	}
	tc, err := lc.Temporal(o.Clients)
	if err != nil {
		fmt.Fprintf(stderr, "demo-worker load: temporal: %v\n", err)
		return exitStartError
	}
	var ledger *ledgerReader
	if len(o.Clients.EtcdEndpoints) > 0 {
		etcd, err := lc.Etcd(ctx, o.Clients)
		if err != nil {
			fmt.Fprintf(stderr, "demo-worker load: etcd: %v\n", err)
			return exitStartError
		}
		if ledger, err = startLedgerReader(ctx, etcd, o.ledger, o.Cfg.Project); err != nil {
			fmt.Fprintf(stderr, "demo-worker load: etcd: %v\n", err)
			return exitStartError
		}
		defer ledger.close()
	}

	send, err := newSender(tc, o, mp)
	if err != nil {
		fmt.Fprintf(stderr, "demo-worker load: %v\n", err)
		return exitStartError
	}
	sendCtx := ctx
	if o.duration > 0 {
		var cancel context.CancelFunc
		sendCtx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	if !o.json {
		fmt.Fprintf(stdout, "load: mode=%s rate=%v/s per queue queues=%s project=%s run=%s\n", o.mode, o.rate, strings.Join(o.Cfg.Queues, ","), o.Cfg.Project, o.run)
		if metricsAt != "" {
			fmt.Fprintf(stdout, "load: serving /metrics on %s\n", metricsAt)
		}
	}
	var counts loadCounts
	var mu sync.Mutex
	var keys []string // accepted dispatch keys
	var out strings.Builder
	var wg sync.WaitGroup
	for _, q := range o.Cfg.Queues {
		wg.Go(func() {
			produce(sendCtx, send, o, q, &counts, func(key string, sent time.Time) {
				mu.Lock()
				keys = append(keys, key)
				if o.acceptedOut != "" {
					out.WriteString(loadreport.Accepted{Key: key, Queue: q, Sent: sent, AcceptedTime: time.Now()}.Line())
				}
				mu.Unlock()
			})
		})
	}
	began := time.Now()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	for sending := true; sending; {
		select {
		case <-tick.C:
			printSummary(stdout, counts.summary(o.mode, time.Since(began)), o.json)
		case <-done:
			sending = false
		}
	}
	total := counts.summary(o.mode, time.Since(began))
	total.Final = true
	if counts.firstErr != nil {
		fmt.Fprintf(stderr, "demo-worker load: %d request(s) failed; the first: %v\n", counts.failed.Load(), counts.firstErr)
	}
	if o.acceptedOut != "" {
		if err := os.WriteFile(o.acceptedOut, []byte(out.String()), 0o644); err != nil {
			fmt.Fprintf(stderr, "demo-worker load: -accepted-out: %v\n", err)
			return exitUnclean
		}
	}
	if ledger == nil {
		printSummary(stdout, total, o.json)
		return exitOK
	}
	// The ledger is read even after a stop signal: what happened to the accepted requests is the point.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*o.settle+opscli.DefaultStatusTimeout) // accepted, then unsettled
	defer cancel()
	settling := func(what string) func(loadreport.Ledger) {
		return func(r loadreport.Ledger) {
			if !o.json {
				fmt.Fprintf(stdout, "load: settling%s: %s\n", what, ledgerString(r))
			}
		}
	}
	rep, err := ledger.settle(rctx, keys, o.settle, settling(""))
	if err != nil {
		total.LedgerError = err.Error()
		printSummary(stdout, total, o.json)
		fmt.Fprintf(stderr, "demo-worker load: reading the ledger: %v\n", err)
		return exitUnclean
	}
	total.Ledger = &rep
	if len(counts.unsettledKeys) > 0 {
		// Undecided when their Dispatch gave up: the ledger says whether the run handled them after.
		late, err := ledger.settle(rctx, counts.unsettledKeys, o.settle, settling(" the unsettled"))
		if err != nil {
			total.LedgerError = err.Error()
			printSummary(stdout, total, o.json)
			fmt.Fprintf(stderr, "demo-worker load: reading the ledger: %v\n", err)
			return exitUnclean
		}
		total.UnsettledLedger = &late
	}
	printSummary(stdout, total, o.json)
	return exitOK
}

// serveLoadMetrics serves /metrics on -metrics-addr, with the meter provider and the server of
// `demo-worker run`, until lc stops; without the flag, no provider (the Producer records nothing)
// and no server. It returns the address it listens on. The server's own errors are logged to stderr.
func serveLoadMetrics(lc *opscli.Hooks, o loadOptions, stderr io.Writer) (metric.MeterProvider, string, error) {
	if o.metricsAddr == "" {
		return nil, "", nil
	}
	m, err := newMeters(lc, "baton-demo-load", o.run)
	if err != nil {
		return nil, "", err
	}
	h := newMetricsServer(o.metricsAddr, m.Registry, newLogger(stderr, zapcore.WarnLevel).Named("http"))
	if err := h.start(); err != nil {
		return nil, "", err
	}
	lc.Append(fx.StopHook(h.stop))
	return m.Provider, h.addr.String(), nil
}

// produce sends requests for queue at random times, rate per second on average, until ctx ends; each
// is sent (and retried) in its own goroutine, at most o.inFlight at once, all waited for.
func produce(ctx context.Context, send sender, o loadOptions, queue string, counts *loadCounts, accepted func(key string, sent time.Time)) {
	slots := make(chan struct{}, o.inFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	next := time.Now()
	for i := 0; ; i++ {
		next = next.Add(time.Duration(mrand.ExpFloat64() / o.rate * float64(time.Second)))
		if !sleepUntil(ctx, next) {
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			counts.waited.Add(1)
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		req := loadRequest(o.run, queue, i)
		counts.sent.Add(1)
		sent := time.Now()
		wg.Go(func() {
			defer func() { <-slots }()
			if send(ctx, queue, req, counts) {
				counts.accepted.Add(1)
				accepted(req.Key(), sent)
			}
		})
	}
}

// loadRequest is the i-th request of a run for queue: a distinct dispatch key for every (run, queue, i).
func loadRequest(run, queue string, i int) dispatcher.Request {
	id := fmt.Sprintf("%s/%s/%d", run, queue, i)
	sum := sha256.Sum256([]byte(id))
	return dispatcher.Request{Type: "demo.load", TaskID: id, PayloadSHA256: hex.EncodeToString(sum[:])}
}

// sendSignal signals req until Temporal accepts it, backing off between attempts (a takeover's gap
// between two runs answers NotFound); false once ctx ends first.
func sendSignal(ctx context.Context, tc client.Client, wfID string, req dispatcher.Request, counts *loadCounts) bool {
	wait := sendRetryMin
	for {
		if tc.SignalWorkflow(ctx, wfID, "", dispatcher.SignalDispatch, req) == nil {
			return true
		}
		counts.retries.Add(1)
		if !sleepUntil(ctx, time.Now().Add(wait)) {
			return false
		}
		wait = min(2*wait, sendRetryMax)
	}
}

// sleepUntil waits until t; false if ctx ends first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
