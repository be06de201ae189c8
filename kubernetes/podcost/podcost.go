package podcost

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
)

// Annotation is the annotation the ReplicaSet controller reads when it chooses which pods a scale-in
// removes: the lowest cost first.
const Annotation = "controller.kubernetes.io/pod-deletion-cost"

// DefaultServiceAccountDir is where Kubernetes mounts a pod's service-account token, the cluster's
// CA (ca.crt) and the pod's namespace.
const DefaultServiceAccountDir = "/var/run/secrets/kubernetes.io/serviceaccount"

// The files of a service-account directory.
const (
	tokenFile     = "token"
	caFile        = "ca.crt"
	namespaceFile = "namespace"
)

// Config's defaults.
const (
	// DefaultMinInterval spaces the writes: leadership moves in bursts (a rollout, a scale-in), and
	// the annotation only matters when a scale-in comes, so one write per burst is enough.
	DefaultMinInterval = 10 * time.Second
	// DefaultMaxBackoff caps the wait between two failing writes (a missing Role, an API server
	// outage): a few requests an hour per pod.
	DefaultMaxBackoff = 5 * time.Minute
	// requestTimeout bounds one request to the API server.
	requestTimeout = 10 * time.Second
)

// ErrInvalidConfig wraps every configuration error of New; the message names the field and the rule.
var ErrInvalidConfig = errors.New("podcost: invalid config")

// Config says which pod to annotate and how to reach the API server. Zero values take the defaults.
type Config struct {
	// Pod is the name of this process's pod (the downward API's metadata.name). Required.
	Pod string
	// Namespace is the pod's namespace. Default: the namespace file of ServiceAccountDir.
	Namespace string
	// ServiceAccountDir holds the token (read again for every request: the kubelet rotates it),
	// ca.crt and namespace. Default DefaultServiceAccountDir.
	ServiceAccountDir string
	// APIServer is the API server's base URL, https only. Default
	// https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT.
	APIServer string
	// MinInterval is the least time between two writes. Default DefaultMinInterval.
	MinInterval time.Duration
	// MaxBackoff caps the wait after failed writes, which doubles from MinInterval. Default
	// DefaultMaxBackoff; at least MinInterval.
	MaxBackoff time.Duration
	// Logger receives the failures (each once) and, at debug level, the writes. Default: no-op.
	Logger *zap.Logger
	// Clock spaces the writes. Default: the real clock.
	Clock clock.Clock
}

// withDefaults fills the zero fields that need no file or environment.
func (c Config) withDefaults() Config {
	if c.ServiceAccountDir == "" {
		c.ServiceAccountDir = DefaultServiceAccountDir
	}
	if c.MinInterval == 0 {
		c.MinInterval = DefaultMinInterval
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = max(DefaultMaxBackoff, c.MinInterval)
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// Updater keeps its pod's deletion cost equal to the count it is given. New builds it, Start runs it,
// Stop ends it; Changed says the count may have changed.
type Updater struct {
	cfg     Config
	leading func() int
	api     string // base URL, without a trailing slash
	hc      *http.Client
	changed chan struct{}

	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop has returned; nil before Start
}

// New checks cfg, reads the service account's CA and namespace, and returns an Updater that writes
// leading() as its pod's deletion cost. leading must be cheap and safe to call from another
// goroutine (it is called after every Changed).
func New(cfg Config, leading func() int) (*Updater, error) {
	c := cfg.withDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	switch {
	case leading == nil:
		return nil, bad("", "needs the function that counts the queues this process leads")
	case c.Pod == "" || strings.ContainsAny(c.Pod, "/?#%"):
		return nil, bad("Pod", "must be this pod's name (the downward API's metadata.name), got %q", c.Pod)
	case c.MinInterval < 0:
		return nil, bad("MinInterval", "must be positive, got %v", c.MinInterval)
	case c.MaxBackoff < c.MinInterval:
		return nil, bad("MaxBackoff", "must be at least MinInterval (%v), got %v", c.MinInterval, c.MaxBackoff)
	}
	if c.APIServer == "" {
		host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
		if host == "" || port == "" {
			return nil, bad("APIServer", "is not set, and KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not both set: this process is not in a pod")
		}
		c.APIServer = "https://" + net.JoinHostPort(host, port)
	}
	if !strings.HasPrefix(c.APIServer, "https://") {
		// The service-account token is a credential: never sent in the clear.
		return nil, bad("APIServer", "must be an https:// URL, got %q", c.APIServer)
	}
	if c.Namespace == "" {
		ns, err := os.ReadFile(filepath.Join(c.ServiceAccountDir, namespaceFile))
		if err != nil {
			return nil, bad("Namespace", "is not set and the service account's namespace file cannot be read: %v", err)
		}
		c.Namespace = strings.TrimSpace(string(ns))
	}
	if c.Namespace == "" || strings.ContainsAny(c.Namespace, "/?#%") {
		return nil, bad("Namespace", "must be the pod's namespace, got %q", c.Namespace)
	}
	if _, err := os.Stat(filepath.Join(c.ServiceAccountDir, tokenFile)); err != nil {
		return nil, bad("ServiceAccountDir", "holds no readable token (is automountServiceAccountToken false?): %v", err)
	}
	pem, err := os.ReadFile(filepath.Join(c.ServiceAccountDir, caFile))
	if err != nil {
		return nil, bad("ServiceAccountDir", "holds no readable %s: %v", caFile, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, bad("ServiceAccountDir", "%s holds no PEM certificate", caFile)
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots}
	return &Updater{
		cfg:     c,
		leading: leading,
		api:     strings.TrimSuffix(c.APIServer, "/"),
		hc:      &http.Client{Transport: transport, Timeout: requestTimeout},
		changed: make(chan struct{}, 1),
	}, nil
}

// Changed says that the count may have changed (a term began or ended). It never blocks.
func (u *Updater) Changed() {
	select {
	case u.changed <- struct{}{}:
	default:
	}
}

// Start launches the loop that writes the cost and returns at once. The loop keeps ctx's values,
// not its cancellation: Stop ends it.
func (u *Updater) Start(ctx context.Context) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.done != nil {
		return errors.New("podcost: Start called twice")
	}
	ctx, u.cancel = context.WithCancel(context.WithoutCancel(ctx))
	u.done = make(chan struct{})
	go func() {
		defer close(u.done)
		u.run(ctx)
	}()
	return nil
}

// Stop ends the loop (a write in flight is abandoned) and waits for it until ctx ends.
func (u *Updater) Stop(ctx context.Context) error {
	u.mu.Lock()
	cancel, done := u.cancel, u.done
	u.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("podcost: stop: %w", ctx.Err())
	}
}

// run writes leading() whenever it differs from what the pod carries, at most once per MinInterval,
// and backs off after failures.
func (u *Updater) run(ctx context.Context) {
	clk := u.cfg.Clock
	timer := clk.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var (
		known   = -1 // the cost the pod carries, as last read or written; -1: not known
		next    time.Time
		backoff time.Duration
		failing failure // the failure last logged
	)
	for {
		want := u.leading()
		if want != known && !clk.Now().Before(next) {
			err := u.write(ctx, want, &known)
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				backoff = min(max(2*backoff, u.cfg.MinInterval), u.cfg.MaxBackoff)
				failing = u.report(err, failing)
			} else {
				backoff = u.cfg.MinInterval
				failing = u.recovered(want, failing)
			}
			next = clk.Now().Add(backoff)
			continue
		}
		if want != known {
			timer.Reset(next.Sub(clk.Now()))
		}
		select {
		case <-ctx.Done():
			return
		case <-u.changed:
			timer.Stop()
		case <-timer.C():
		}
	}
}
