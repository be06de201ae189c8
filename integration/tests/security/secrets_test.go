package security_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/workerproc"
)

// A demo-worker process that holds an etcd password, a Redis password and a Temporal API key never
// shows them: not in its logs (at debug level), not on /status, /metrics, /healthz or /readyz, not
// in `demo-worker status`, and not in the errors of runs with a wrong password or a secret passed
// as a flag. Everything the processes write and serve is searched for every secret, raw and in its
// hex, URL-escaped and base64 forms (at every alignment, so a secret inside an encoded
// "user:password" is found too).
//
// The in-process Temporal server has no authorizer: it accepts and ignores the API key, which the
// client still sends with every call (TemporalTLSDisabled keeps the connection plain, as with a
// TLS-terminating sidecar).
func TestSecretsNeverShow(t *testing.T) {
	secret := func(name string) string { return name + "-" + randomHex(t) }
	etcdPW, redisPW, apiKey := secret("etcdpw"), secret("redispw"), secret("apikey")
	wrongEtcdPW, wrongRedisPW, flagPW := secret("wrongetcd"), secret("wrongredis"), secret("flagpw")
	secrets := []string{etcdPW, redisPW, apiKey, wrongEtcdPW, wrongRedisPW, flagPW}

	etcd := startSecureEtcd(t, "baton", etcdPW)
	rs := redisx.Start(t, redisx.Options{Password: redisAdminPassword, Args: batonACL("baton", redisPW)})
	redisx.SkipExternal(t, rs)
	bin := workerproc.BuildT(t)
	dir := t.TempDir()
	redisPWFile := filepath.Join(dir, "redis-password")
	if err := os.WriteFile(redisPWFile, []byte(redisPW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := project()
	env := []string{
		"BATON_PROJECT=" + p, "BATON_QUEUES=orders,refunds", "BATON_LOG_LEVEL=debug",
		"BATON_ETCD_ENDPOINTS=" + strings.Join(etcd.cluster.Endpoints(), ","),
		"BATON_ETCD_USERNAME=baton", "BATON_ETCD_PASSWORD=" + etcdPW, "BATON_ETCD_CA_FILE=" + etcd.ca.CertFile,
		"BATON_ETCD_CERT_FILE=" + etcd.cert.CertFile, "BATON_ETCD_KEY_FILE=" + etcd.cert.KeyFile,
		"BATON_TEMPORAL_ADDRESS=" + temporalServer.HostPort(), "BATON_TEMPORAL_NAMESPACE=" + temporalServer.Namespace(),
		"BATON_TEMPORAL_API_KEY=" + apiKey, "BATON_TEMPORAL_TLS_DISABLED=true",
		"BATON_REDIS_ADDR=" + rs.Addr(), "BATON_REDIS_USERNAME=baton",
		"BATON_ELECTION_TTL=2s", "BATON_HEARTBEAT_INTERVAL=250ms", "BATON_REGISTRY_HEARTBEAT_INTERVAL=250ms",
		"BATON_RECONCILE_INTERVAL=1s", "BATON_RECONCILE_STALE_AFTER=1500ms",
	}
	var seen []captured

	// A healthy run: it leads both queues with everything the secrets protect.
	w := workerproc.StartT(t, workerproc.Options{}, bin, "secrets-a", env, "-redis-password-file", redisPWFile)
	eventually(t, 30*time.Second, "the worker leads both queues", func() error {
		st, ok := workerproc.Status(w.Addr)
		if !ok {
			return fmt.Errorf("no /status yet")
		}
		for _, q := range []string{"orders", "refunds"} {
			if _, ok := workerproc.Leading(st, q); !ok {
				return fmt.Errorf("not leading %s: %+v", q, st)
			}
		}
		if st.Worker.LastHeartbeat.IsZero() || st.Reconciler.Cycles == 0 {
			return fmt.Errorf("no registry heartbeat or reconcile cycle yet: %+v", st)
		}
		return nil
	})
	for _, path := range []string{"/status", "/metrics", "/healthz", "/readyz"} {
		seen = append(seen, captured{"GET " + path, httpGet(t, "http://"+w.Addr+path)})
	}
	for _, args := range [][]string{{"status"}, {"status", "-json"}} {
		out, code := runCmd(t, bin, env, append(args, "-redis-password-file", redisPWFile)...)
		if code != 0 || !strings.Contains(out, "orders") {
			t.Fatalf("demo-worker %v exited %d:\n%s", args, code, out)
		}
		seen = append(seen, captured{"demo-worker " + strings.Join(args, " "), out})
	}
	w.Signal(syscall.SIGTERM)
	select {
	case <-w.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop after SIGTERM")
	}
	if w.Code() != 0 {
		t.Fatalf("the worker exited %d after SIGTERM", w.Code())
	}
	seen = append(seen, captured{"the worker's output", w.Output()})
	if !strings.Contains(w.Output(), `"etcd_password_set":true`) || !strings.Contains(w.Output(), `"temporal_api_key_set":true`) {
		t.Fatalf("the startup line does not say the secrets are set:\n%s", w.Output())
	}

	// Runs that fail: their errors must say why, without the secrets.
	for _, run := range []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"run with a wrong etcd password", []string{"BATON_ETCD_PASSWORD=" + wrongEtcdPW},
			[]string{"run", "-http", "127.0.0.1:0", "-redis-password-file", redisPWFile}, 3, "authentication failed"},
		{"run with a wrong Redis password", []string{"BATON_REDIS_PASSWORD=" + wrongRedisPW},
			[]string{"run", "-http", "127.0.0.1:0"}, 3, `refused authentication as user \"baton\"`},
		{"status with a wrong etcd password", []string{"BATON_ETCD_PASSWORD=" + wrongEtcdPW},
			[]string{"status", "-redis-password-file", redisPWFile}, 1, "authentication failed"},
		{"a password as a flag", nil, []string{"run", "-etcd-password=" + flagPW}, 2, "not accepted"},
		{"a password as a flag, spaced", nil, []string{"run", "-redis-password", flagPW}, 2, "not accepted"},
	} {
		out, code := runCmd(t, bin, append(append([]string(nil), env...), run.env...), run.args...)
		if code != run.code || !strings.Contains(out, run.want) {
			t.Fatalf("%s: exit %d, want %d with %q:\n%s", run.name, code, run.code, run.want, out)
		}
		seen = append(seen, captured{run.name, out})
	}

	// The search itself must find what it looks for.
	probe := captured{"self-test", "Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("baton:"+etcdPW))}
	if !betrays(probe.text, etcdPW) {
		t.Fatal("forms() misses a base64-encoded user:password")
	}
	for _, c := range seen {
		t.Logf("%s: %d bytes", c.what, len(c.text))
	}
	var total int
	for _, c := range seen {
		total += len(c.text)
		for _, s := range secrets {
			for form, v := range forms(s) {
				if strings.Contains(c.text, v) {
					t.Errorf("%s shows a secret (%s form %q):\n%s", c.what, form, v, excerpt(c.text, v))
				}
			}
		}
	}
	t.Logf("searched %d outputs (%d bytes) for %d secrets in %d forms each", len(seen), total, len(secrets), len(forms(etcdPW)))
}

type captured struct{ what, text string }

func randomHex(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// forms returns the texts that would betray s: s itself, its hex and URL-escaped forms, and the
// part of its standard and URL-safe base64 encodings that does not depend on what surrounds it, for
// each of the three alignments it can have inside a longer encoded text.
func forms(s string) map[string]string {
	out := map[string]string{"raw": s, "hex": hex.EncodeToString([]byte(s)), "hex upper": strings.ToUpper(hex.EncodeToString([]byte(s))),
		"url-escaped": url.QueryEscape(s)}
	for i := range 3 {
		enc := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("\x00", i) + s))
		core := enc[4*((i+2)/3) : 4*((i+len(s))/3)]
		out[fmt.Sprintf("base64 at offset %d", i)] = core
		out[fmt.Sprintf("base64url at offset %d", i)] = strings.NewReplacer("+", "-", "/", "_").Replace(core)
	}
	return out
}

func betrays(text, secret string) bool {
	for _, v := range forms(secret) {
		if strings.Contains(text, v) {
			return true
		}
	}
	return false
}

func excerpt(text, v string) string {
	i := strings.Index(text, v)
	lo, hi := max(0, i-200), min(len(text), i+len(v)+200)
	return text[lo:hi]
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%d\n%s\n%s", resp.StatusCode, resp.Header, b)
}

// runCmd runs demo-worker with args and env (on top of this process's environment) and returns all
// it wrote and its exit code.
func runCmd(t *testing.T, bin string, env []string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil && cmd.ProcessState == nil {
		t.Fatalf("demo-worker %v: %v", args, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}
