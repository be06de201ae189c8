package podcost

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-run/baton/clock"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	testToken     = "s3cret-token"
	testNamespace = "baton"
)

// apiServer is a double of the Kubernetes API server's pod endpoint: it checks the token, keeps each
// pod's annotations, answers with status when one is set, and reports every request on requests.
type apiServer struct {
	t        *testing.T
	srv      *httptest.Server
	dir      string // a service-account directory for it: token, ca.crt, namespace
	requests chan string

	mu     sync.Mutex
	pods   map[string]map[string]string
	status int // answer every request with this status, when not 0
}

func newAPIServer(t *testing.T) *apiServer {
	a := &apiServer{t: t, pods: map[string]map[string]string{}, requests: make(chan string, 100)}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(a.serve))
	t.Cleanup(a.srv.Close)
	a.dir = t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	for name, content := range map[string][]byte{tokenFile: []byte(testToken + "\n"), caFile: ca, namespaceFile: []byte(testNamespace)} {
		if err := os.WriteFile(filepath.Join(a.dir, name), content, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

func (a *apiServer) serve(w http.ResponseWriter, r *http.Request) {
	defer func() { a.requests <- r.Method + " " + r.URL.Path }()
	pod, ok := strings.CutPrefix(r.URL.Path, "/api/v1/namespaces/"+testNamespace+"/pods/")
	switch {
	case r.Header.Get("Authorization") != "Bearer "+testToken:
		http.Error(w, "no token", http.StatusUnauthorized)
		return
	case !ok:
		http.NotFound(w, r)
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.status != 0 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "code": a.status,
			"reason": "Forbidden", "message": `pods "` + pod + `" is forbidden: User "system:serviceaccount:baton:baton-worker" cannot patch resource "pods"`})
		return
	}
	switch r.Method {
	case http.MethodGet:
	case http.MethodPatch:
		if ct := r.Header.Get("Content-Type"); ct != "application/merge-patch+json" {
			http.Error(w, "content type "+ct, http.StatusUnsupportedMediaType)
			return
		}
		var p podMeta
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if a.pods[pod] == nil {
			a.pods[pod] = map[string]string{}
		}
		for k, v := range p.Metadata.Annotations {
			a.pods[pod][k] = v
		}
	default:
		http.Error(w, r.Method, http.StatusMethodNotAllowed)
		return
	}
	_, _ = io.Copy(io.Discard, r.Body)
	var out podMeta
	out.Metadata.Annotations = a.pods[pod]
	_ = json.NewEncoder(w).Encode(out)
}

func (a *apiServer) cost(pod string) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pods[pod][Annotation]
}

func (a *apiServer) setStatus(code int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.status = code
}

// next waits for the next request and returns its method and path.
func (a *apiServer) next() string {
	a.t.Helper()
	select {
	case r := <-a.requests:
		return r
	case <-time.After(30 * time.Second):
		a.t.Fatal("no request to the API server within 30s")
		return ""
	}
}

// quiet fails if a request arrives while the Updater has nothing to do.
func (a *apiServer) quiet() {
	a.t.Helper()
	select {
	case r := <-a.requests:
		a.t.Fatalf("unexpected request %s", r)
	case <-time.After(50 * time.Millisecond):
	}
}

func (a *apiServer) config(pod string, clk clock.Clock, log *zap.Logger) Config {
	return Config{Pod: pod, ServiceAccountDir: a.dir, APIServer: a.srv.URL, Clock: clk, Logger: log,
		MinInterval: time.Minute, MaxBackoff: 4 * time.Minute}
}

// armed waits until the Updater has armed its timer (it waits for the rate limit or a backoff).
func armed(t *testing.T, clk *clock.Fake) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for {
		changed := clk.Changed()
		if clk.Timers() > 0 {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatal("the Updater armed no timer within 30s")
		}
	}
}

func start(t *testing.T, cfg Config, leading func() int) *Updater {
	t.Helper()
	u, err := New(cfg, leading)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := u.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return u
}

// The pod that leads more queues carries the higher cost, and the costs follow leadership as it moves.
func TestLeaderOfMoreQueuesGetsTheHigherCost(t *testing.T) {
	api := newAPIServer(t)
	clk := clock.NewFake(time.Unix(0, 0))
	var a, b atomic.Int64
	a.Store(3)
	b.Store(1)
	ua := start(t, api.config("worker-a", clk, nil), func() int { return int(a.Load()) })
	api.next() // GET
	api.next() // PATCH
	ub := start(t, api.config("worker-b", clk, nil), func() int { return int(b.Load()) })
	api.next()
	api.next()
	if ca, cb := api.cost("worker-a"), api.cost("worker-b"); ca != "3" || cb != "1" {
		t.Fatalf("costs a=%q b=%q; want 3 and 1 (the leader of more queues costs more to remove)", ca, cb)
	}

	// A rollout moves two queues from a to b: b now costs more.
	a.Store(1)
	b.Store(3)
	ua.Changed()
	ub.Changed()
	armed(t, clk)
	api.quiet() // within MinInterval of the last writes: none yet
	clk.Advance(time.Minute)
	for range 2 {
		if r := api.next(); !strings.HasPrefix(r, "PATCH ") {
			t.Fatalf("request %s; want a PATCH (the pods' costs are known, no GET needed)", r)
		}
	}
	if ca, cb := api.cost("worker-a"), api.cost("worker-b"); ca != "1" || cb != "3" {
		t.Fatalf("costs a=%q b=%q; want 1 and 3", ca, cb)
	}
}

// A burst of leadership changes is one write per MinInterval, with the count as it is then.
func TestWritesAreRateLimited(t *testing.T) {
	api := newAPIServer(t)
	clk := clock.NewFake(time.Unix(0, 0))
	var n atomic.Int64
	n.Store(1)
	u := start(t, api.config("worker-a", clk, nil), func() int { return int(n.Load()) })
	api.next()
	api.next()
	for i := 2; i <= 6; i++ {
		n.Store(int64(i))
		u.Changed()
	}
	armed(t, clk)
	api.quiet()
	clk.Advance(59 * time.Second)
	api.quiet()
	clk.Advance(time.Second)
	if r := api.next(); !strings.HasPrefix(r, "PATCH ") || api.cost("worker-a") != "6" {
		t.Fatalf("request %s, cost %q; want one PATCH to 6", r, api.cost("worker-a"))
	}
	api.quiet()
}

// A pod that already carries the cost (the same pod's previous container wrote it), or none while
// the process leads nothing, is only read.
func TestNoWriteWhenThePodCarriesTheCost(t *testing.T) {
	api := newAPIServer(t)
	api.pods["worker-a"] = map[string]string{Annotation: "2"}
	start(t, api.config("worker-a", clock.NewFake(time.Unix(0, 0)), nil), func() int { return 2 })
	if r := api.next(); !strings.HasPrefix(r, "GET ") {
		t.Fatalf("first request %s; want a GET", r)
	}
	api.quiet()
	start(t, api.config("worker-b", clock.NewFake(time.Unix(0, 0)), nil), func() int { return 0 })
	if r := api.next(); !strings.HasPrefix(r, "GET ") {
		t.Fatalf("first request %s; want a GET", r)
	}
	api.quiet()
}

// A 403 (no Role) is logged once however often it repeats, the writes back off, nothing else is
// touched (the count is only read), and the writes resume once the Role is there.
func TestForbiddenIsLoggedOnceAndLeadershipUnaffected(t *testing.T) {
	api := newAPIServer(t)
	api.setStatus(http.StatusForbidden)
	clk := clock.NewFake(time.Unix(0, 0))
	core, logs := observer.New(zapcore.DebugLevel)
	var calls atomic.Int64
	leading := func() int { calls.Add(1); return 2 }
	u := start(t, api.config("worker-a", clk, zap.New(core)), leading)

	var waits []time.Duration
	for range 4 {
		api.next()
		armed(t, clk)
		// The wait the Updater armed, advanced exactly (the next attempt may arm its own timer as soon
		// as Advance fired this one): the waits double up to MaxBackoff.
		due, _ := clk.NextDue()
		wait := due.Sub(clk.Now())
		clk.Advance(wait)
		waits = append(waits, wait)
	}
	api.next()
	if want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 4 * time.Minute}; !equal(waits, want) {
		t.Errorf("waits between failing attempts %v; want %v", waits, want)
	}
	warns := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(warns) != 1 {
		t.Fatalf("%d warnings for 5 refused attempts; want 1: %v", len(warns), warns)
	}
	if msg := warns[0].Message + " " + warns[0].ContextMap()["error"].(string); !strings.Contains(msg, "403") ||
		!strings.Contains(msg, "may not get and patch") || strings.Contains(msg, testToken) {
		t.Errorf("warning %q: want the 403 and what to grant, never the token", msg)
	}
	for _, e := range logs.All() {
		for _, v := range e.ContextMap() {
			if s, ok := v.(string); ok && strings.Contains(s, testToken) {
				t.Fatalf("the token was logged: %v", e)
			}
		}
	}
	if calls.Load() == 0 {
		t.Fatal("the count was never read")
	}

	// The Role is applied: the next attempt writes, and says so once.
	api.setStatus(0)
	u.Changed()
	armed(t, clk)
	clk.Advance(4 * time.Minute)
	api.next() // GET
	api.next() // PATCH
	if api.cost("worker-a") != "2" {
		t.Fatalf("cost %q after the Role was granted; want 2", api.cost("worker-a"))
	}
	waitFor(t, func() bool { return logs.FilterMessage("pod-deletion-cost written again").Len() == 1 })
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	api := newAPIServer(t)
	noToken := t.TempDir()
	for _, f := range []string{caFile, namespaceFile} {
		b, _ := os.ReadFile(filepath.Join(api.dir, f))
		_ = os.WriteFile(filepath.Join(noToken, f), b, 0o600)
	}
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	for name, c := range map[string]struct {
		cfg   Config
		field string
	}{
		"no pod":           {Config{ServiceAccountDir: api.dir, APIServer: api.srv.URL}, "Pod"},
		"plain http":       {Config{Pod: "p", ServiceAccountDir: api.dir, APIServer: "http://127.0.0.1:1"}, "APIServer"},
		"not in a pod":     {Config{Pod: "p", ServiceAccountDir: api.dir}, "KUBERNETES_SERVICE_HOST"},
		"no token":         {Config{Pod: "p", ServiceAccountDir: noToken, APIServer: api.srv.URL}, "token"},
		"no namespace":     {Config{Pod: "p", ServiceAccountDir: t.TempDir(), APIServer: api.srv.URL}, "Namespace"},
		"backoff too low":  {Config{Pod: "p", ServiceAccountDir: api.dir, APIServer: api.srv.URL, MinInterval: time.Minute, MaxBackoff: time.Second}, "MaxBackoff"},
		"pod name in path": {Config{Pod: "a/b", ServiceAccountDir: api.dir, APIServer: api.srv.URL}, "Pod"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := New(c.cfg, func() int { return 0 })
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.field) {
				t.Fatalf("New = %v; want ErrInvalidConfig naming %s", err, c.field)
			}
		})
	}
	// In a pod: the API server from the environment, the namespace from the service account.
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	u, err := New(Config{Pod: "p", ServiceAccountDir: api.dir}, func() int { return 0 })
	if err != nil {
		t.Fatal(err)
	}
	if u.api != "https://10.0.0.1:443" || u.cfg.Namespace != testNamespace {
		t.Fatalf("api %s, namespace %s", u.api, u.cfg.Namespace)
	}
}
