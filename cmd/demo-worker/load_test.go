package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/cmd/demo-worker/loadreport"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/internal/opscli"
	"github.com/baton-run/baton/ledger"
)

func TestLoadRejectsBadFlagsNamingTheFlagAndRule(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string // in the one-line message
	}{
		{name: "unknown mode", args: []string{"-mode=carrier-pigeon"}, want: `flag -mode must be signal or dispatch, got "carrier-pigeon"`},
		{name: "zero rate", args: []string{"-rate=0"}, want: "flag -rate must be above 0"},
		{name: "negative rate", args: []string{"-rate=-3"}, want: "flag -rate must be above 0"},
		{name: "rate too high", args: []string{"-rate=1e6"}, want: "at most 10000 requests per second per queue"},
		{name: "NaN rate", args: []string{"-rate=NaN"}, want: "flag -rate"},
		{name: "negative duration", args: []string{"-duration=-1s"}, want: "flag -duration must not be negative"},
		{name: "zero interval", args: []string{"-interval=0s"}, want: "-interval"},
		{name: "zero in flight", args: []string{"-in-flight=0"}, want: "flag -in-flight must be at least 1"},
		{name: "relative ledger prefix", args: []string{"-ledger-prefix=baton"}, want: "flag -ledger-prefix must start with /"},
		{name: "ledger prefix ending in a slash", args: []string{"-ledger-prefix=/baton/"}, want: "not end with /"},
		{name: "no queues", env: map[string]string{"BATON_QUEUES": ""}, want: "Queues"},
		{name: "no project", args: []string{"-project="}, want: "Project"},
		{name: "metrics address without a port", args: []string{"-metrics-addr=localhost"}, want: "flag -metrics-addr: must be HOST:PORT"},
		{name: "stray argument", args: []string{"now"}, want: `unexpected argument "now"`},
		{name: "secret on the command line", args: []string{"-etcd-password=x"}, want: "flag -etcd-password is not accepted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			setEnv(t, tc.env)
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), append([]string{"load"}, tc.args...), &stdout, &stderr)
			if code != exitConfig {
				t.Fatalf("exit %d, want %d; stderr %q", code, exitConfig, stderr.String())
			}
			msg := strings.TrimSpace(stderr.String())
			if strings.Count(msg, "\n") != 0 || !strings.HasPrefix(msg, "demo-worker load: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("message %q, want one line naming %q", msg, tc.want)
			}
		})
	}
}

func TestLoadDefaultsAndEtcdIsOptional(t *testing.T) {
	setEnv(t, map[string]string{"BATON_ETCD_ENDPOINTS": "", "BATON_ETCD_USERNAME": "", "BATON_ETCD_PASSWORD": ""})
	o, err := parseLoad([]string{"-rate=2.5", "-duration=1m"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.mode != modeSignal || o.rate != 2.5 || o.interval != defaultLoadInterval || o.inFlight != defaultInFlight || o.ledger != ledger.DefaultPrefix {
		t.Errorf("options %+v", o)
	}
	if !strings.HasPrefix(o.run, "load-") || len(o.Clients.EtcdEndpoints) != 0 {
		t.Errorf("run %q, etcd endpoints %v", o.run, o.Clients.EtcdEndpoints)
	}
}

// Every request of a run has its own dispatch key, and runs never share one.
func TestLoadRequestsAreValidAndDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, run := range []string{"load-a", "load-b"} {
		for _, q := range []string{"q1", "q2"} {
			for i := range 100 {
				r := loadRequest(run, q, i)
				if err := r.Validate(); err != nil {
					t.Fatal(err)
				}
				if seen[r.Key()] {
					t.Fatalf("key of %s repeated", r.TaskID)
				}
				seen[r.Key()] = true
			}
		}
	}
}

// In dispatch mode the summary tells a request still undecided when its bound ended from one
// refused, as a line for people and as JSON for tools.
func TestDispatchSummaryTellsUnsettledFromRejected(t *testing.T) {
	var c loadCounts
	c.sent.Store(5)
	c.accepted.Store(2)
	c.handled.Store(2)
	c.unsettledReq("k1")
	c.rejected.Add(1)
	c.failedReq(ledger.ErrBadRecord)
	s := c.summary(modeDispatch, time.Second)
	s.Final, s.Ledger = true, &loadreport.Ledger{Accepted: 2, Handled: 2}
	var line, js strings.Builder
	printSummary(&line, s, false)
	want := "load total: sent=5 accepted=2 handled=2 unsettled=1 rejected=1 errors=1 waited=0 ledger_accepted=2 ledger_handled=2 not_handled=0 handled_twice=0\n"
	if line.String() != want || len(c.unsettledKeys) != 1 || c.firstErr != ledger.ErrBadRecord {
		t.Errorf("line %q, want %q; unsettled keys %v, first error %v", line.String(), want, c.unsettledKeys, c.firstErr)
	}
	printSummary(&js, s, true)
	back, ok := loadreport.Last("load: starting\n" + js.String())
	if !ok || back.Sent != 5 || back.Unsettled != 1 || back.Rejected != 1 || back.Errors != 1 || !back.Final || back.Ledger == nil || back.Ledger.Handled != 2 {
		t.Errorf("JSON summary %q read back as %+v (%v)", js.String(), back, ok)
	}
}

// -metrics-addr serves the Producer's metrics, with the exporter of `demo-worker run`, until the load
// stops; a busy port fails the start before any connection is made.
func TestLoadServesTheProducersMetrics(t *testing.T) {
	setEnv(t, nil)
	o, err := parseLoad([]string{"-mode=dispatch", "-metrics-addr=127.0.0.1:0"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var lc opscli.Hooks
	var stderr bytes.Buffer
	mp, addr, err := serveLoadMetrics(&lc, o, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			lc.Stop(context.Background(), time.Second)
		}
	}()
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"}) // never dialled: the request is refused first
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	p, err := dispatcher.NewProducer(tc, dispatcher.ProducerConfig{MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Dispatch(t.Context(), o.Cfg.Project, "q1", dispatcher.Request{}); !errors.Is(err, dispatcher.ErrInvalidRequest) {
		t.Fatalf("Dispatch of an empty request: %v, want ErrInvalidRequest", err)
	}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	for _, want := range []string{
		`baton_dispatch_producer_calls_total{`,
		`outcome="rejected"`,
		`baton_dispatch_producer_latency_seconds_bucket{`,
		`service_name="baton-demo-load"`,
		`go_goroutines `,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics has no %s:\n%s", want, body)
		}
	}

	// While it is served, the same port cannot serve another load: exit 3, naming the flag.
	var out, errOut bytes.Buffer
	if code := run(t.Context(), []string{"load", "-mode=dispatch", "-metrics-addr=" + addr}, &out, &errOut); code != exitStartError ||
		!strings.HasPrefix(errOut.String(), "demo-worker load: -metrics-addr: ") {
		t.Errorf("load on a busy -metrics-addr: exit %d, stderr %q; want %d naming the flag", code, errOut.String(), exitStartError)
	}

	lc.Stop(context.Background(), 5*time.Second)
	stopped = true
	if _, err := hc.Get("http://" + addr + "/metrics"); err == nil {
		t.Error("/metrics still served after the load stopped")
	}
	if stderr.Len() > 0 {
		t.Errorf("the metrics server logged: %s", stderr.String())
	}
}
