package e2e_test

import (
	"bufio"
	"encoding/json"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/cmd/demo-worker/contract"
	"github.com/baton-run/baton/integration/servers/workerproc"
)

// A worker in a Kubernetes namespace that has a Service named baton-worker, on a pod that forgot
// enableServiceLinks: false, gets BATON_WORKER_SERVICE_HOST and friends in its environment. It starts
// and leads all the same, and names the ignored variables in one warning. With -pod-deletion-cost and
// a service account the API server refuses (no Role), the refusal is logged once however often the
// worker retries, and leadership is unaffected. A misspelt setting beside the service links is still
// refused by name.
func TestWorkerInAKubernetesPod(t *testing.T) {
	c := newCluster(t, "k8s-a", "k8s-b")
	api := newForbiddingAPIServer(t)
	serviceLinks := []string{"BATON_WORKER_SERVICE_HOST=10.0.0.1", "BATON_WORKER_PORT=tcp://10.0.0.1:80"}
	env := slices.Concat(c.env, serviceLinks, api.podEnv())
	p := startProc(t, c.bin, "k8s-pod-1", env)
	c.procs[p.id] = p

	for _, q := range c.queues {
		if leader, _ := c.waitLeader(q, takeoverSLA, nil); leader != p {
			t.Fatalf("queue %s led by %s", q, leader.id)
		}
	}
	// The updater's first attempt comes at its start, the next after its backoff (podcost's
	// MinInterval): wait for a retry, which must not be logged again.
	deadline := time.Now().Add(90 * time.Second)
	for api.requests.Load() < 2 {
		if time.Now().After(deadline) || p.exited() {
			t.Fatalf("the API server got %d requests within 90s; want a first attempt and a retry (exited: %v)", api.requests.Load(), p.exited())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, q := range c.queues {
		if _, ok := p.leads(q); !ok {
			t.Errorf("after the API server refused the pod-deletion cost, the worker no longer leads %s", q)
		}
	}
	if !p.ready() {
		t.Error("after the API server refused the pod-deletion cost, the worker is not ready")
	}
	var podcostWarnings, linkWarnings int
	for _, l := range logLines(p.Output()) {
		switch {
		case l.Level == "warn" && l.Logger == "podcost":
			podcostWarnings++
		case l.Level == "warn" && l.Variables != nil:
			linkWarnings++
			if want := []string{"BATON_WORKER_PORT", "BATON_WORKER_SERVICE_HOST"}; !slices.Equal(l.Variables, want) {
				t.Errorf("the service-link warning names %v; want %v", l.Variables, want)
			}
		}
	}
	if podcostWarnings != 1 || linkWarnings != 1 {
		t.Errorf("%d pod-deletion-cost warnings for %d refused requests and %d service-link warnings; want one each\n%s",
			podcostWarnings, api.requests.Load(), linkWarnings, p.Tail(4000))
	}

	// A typo beside the service links: refused at once, by name, with the configuration exit code.
	typo := workerproc.StartT(t, workerproc.Options{}, c.bin, "k8s-pod-typo", slices.Concat(c.env, serviceLinks, []string{"BATON_QUEUSE=x"}))
	select {
	case <-typo.Done():
	case <-time.After(60 * time.Second):
		t.Fatal("a worker with BATON_QUEUSE=x did not exit within 60s")
	}
	if code, out := typo.Code(), typo.Output(); code != 2 || !strings.Contains(out, "BATON_QUEUSE") {
		t.Errorf("a worker with BATON_QUEUSE=x exited %d; want 2 with a message naming it:\n%s", code, out)
	}
}

// logLine is what the test reads of the worker's JSON log lines (zap's production encoding).
type logLine struct {
	Level     string   `json:"level"`
	Logger    string   `json:"logger"`
	Variables []string `json:"variables"`
}

func logLines(out string) []logLine {
	var lines []logLine
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.Level != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// forbiddingAPIServer is a Kubernetes API server double that refuses every request with 403, as the
// real one does for a service account without the pod-deletion-cost component's Role.
type forbiddingAPIServer struct {
	srv      *httptest.Server
	dir      string // the service-account directory the worker reads: token, ca.crt, namespace
	requests atomic.Int64
}

func newForbiddingAPIServer(t *testing.T) *forbiddingAPIServer {
	a := &forbiddingAPIServer{dir: t.TempDir()}
	a.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a.requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]any{"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
			"message": `pods is forbidden: User "system:serviceaccount:baton:baton-worker" cannot get resource "pods"`})
	}))
	t.Cleanup(a.srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.srv.Certificate().Raw})
	for name, b := range map[string][]byte{"token": []byte("e2e-token"), "ca.crt": ca, "namespace": []byte("baton")} {
		if err := os.WriteFile(filepath.Join(a.dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return a
}

// podEnv is what a pod with the pod-deletion-cost component gives its worker, pointed at the double.
func (a *forbiddingAPIServer) podEnv() []string {
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(a.srv.URL, "https://"))
	return []string{contract.EnvPodDeletionCost + "=true", contract.EnvPodName + "=baton-worker-7d9f-abcde",
		contract.EnvPodServiceAccountDir + "=" + a.dir, "KUBERNETES_SERVICE_HOST=" + host, "KUBERNETES_SERVICE_PORT=" + port}
}
