package clients

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"
)

// secretEnv are the variables whose values LoadEnv must never echo.
var secretEnv = []string{"BATON_ETCD_PASSWORD", "BATON_REDIS_PASSWORD", "BATON_TEMPORAL_API_KEY"}

// FuzzLoadEnv sets two of LoadEnv's variables (picked by index) to arbitrary values, and
// every secret variable to an arbitrary secret: loading never panics; a refusal wraps
// ErrInvalidConfig, names the variable and stays on one line; an accepted configuration has
// trimmed, non-empty endpoints, a non-negative Redis DB and a positive dial timeout and keeps the
// secret exactly; and neither the refusal, Validate's error nor String() changes when only the
// secrets do (other than empty or not), so none of them shows a secret. The
// seed corpus is in testdata/fuzz/FuzzLoadEnv.
func FuzzLoadEnv(f *testing.F) {
	f.Add(uint8(0), "https://a:2379, https://b:2379", uint8(8), "5s", "s3cret-pw")
	f.Add(uint8(21), "-1", uint8(3), "yes", "hunter2")
	f.Add(uint8(3), "true", uint8(0), "http://a:2379", "pw")
	f.Add(uint8(13), "maybe", uint8(9), "temporal", "key with spaces\n")
	f.Fuzz(func(t *testing.T, pick1 uint8, value1 string, pick2 uint8, value2 string, secret string) {
		e1, e2 := envVars[int(pick1)%len(envVars)], envVars[int(pick2)%len(envVars)]
		set := map[string]string{}
		for _, name := range secretEnv {
			set[name] = secret
		}
		set[e1.name], set[e2.name] = value1, value2
		load := func(set map[string]string) (Config, error) {
			return loadEnv(Config{}, func(k string) (string, bool) { v, ok := set[k]; return v, ok })
		}
		c, err := load(set)
		// The same variables with other secrets (of the same emptiness). A secret's text may also come
		// from the other values ("0 00" from the endpoints "0,00", "0000" from a quoted "\x0000"), so
		// output is compared with theirs: any difference is a secret showing.
		otherSet := maps.Clone(set)
		for _, name := range secretEnv {
			if v := strings.TrimSpace(otherSet[name]); v != "" {
				otherSet[name] = "o" + strings.Repeat("x", len(v))
			}
		}
		oc, oerr := load(otherSet)
		if fmt.Sprint(err) != fmt.Sprint(oerr) {
			t.Fatalf("the error depends on the secret: %q, with other secrets %q", err, oerr)
		}
		if err != nil {
			switch {
			case !errors.Is(err, ErrInvalidConfig):
				t.Fatalf("error %v does not wrap ErrInvalidConfig", err)
			case !strings.Contains(err.Error(), e1.name) && !strings.Contains(err.Error(), e2.name):
				t.Fatalf("error %q names neither %s nor %s", err, e1.name, e2.name)
			case strings.ContainsAny(err.Error(), "\n\r"):
				t.Fatalf("error spans lines: %q", err)
			}
			return
		}
		for _, ep := range c.EtcdEndpoints {
			if ep == "" || ep != strings.TrimSpace(ep) || strings.Contains(ep, ",") {
				t.Fatalf("endpoints %q", c.EtcdEndpoints)
			}
		}
		if c.RedisDB < 0 || c.EtcdDialTimeout < 0 || (set["BATON_ETCD_DIAL_TIMEOUT"] != "" && c.EtcdDialTimeout <= 0) {
			t.Fatalf("accepted DB %d, dial timeout %v", c.RedisDB, c.EtcdDialTimeout)
		}
		if v, ok := set["BATON_REDIS_DB"]; ok {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n != c.RedisDB {
				t.Fatalf("BATON_REDIS_DB %q loaded as %d", v, c.RedisDB)
			}
		}
		if v, ok := set["BATON_ETCD_DIAL_TIMEOUT"]; ok {
			if d, err := time.ParseDuration(strings.TrimSpace(v)); err != nil || d != c.EtcdDialTimeout {
				t.Fatalf("BATON_ETCD_DIAL_TIMEOUT %q loaded as %v", v, c.EtcdDialTimeout)
			}
		}
		for name, got := range map[string]string{"BATON_ETCD_PASSWORD": c.EtcdPassword, "BATON_REDIS_PASSWORD": c.RedisPassword,
			"BATON_TEMPORAL_API_KEY": c.TemporalAPIKey} {
			if got != strings.TrimSpace(set[name]) {
				t.Fatalf("%s loaded as %q from %q", name, got, set[name])
			}
		}
		// Validate reads the TLS files; arbitrary paths (/dev/zero, a FIFO) are no input to fuzz it with.
		for _, tf := range []*TLSFiles{&c.EtcdTLS, &c.TemporalTLS, &c.RedisTLS, &oc.EtcdTLS, &oc.TemporalTLS, &oc.RedisTLS} {
			tf.CAFile, tf.CertFile, tf.KeyFile = "", "", ""
		}
		if verr, overr := c.Validate(), oc.Validate(); fmt.Sprint(verr) != fmt.Sprint(overr) {
			t.Fatalf("the Validate error depends on the secret: %q, with other secrets %q", verr, overr)
		}
		if c.String() != oc.String() {
			t.Fatalf("String() depends on the secret: %s", c)
		}
	})
}
