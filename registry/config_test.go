package registry

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{Project: "billing"}.WithDefaults()
	if c.Prefix != DefaultPrefix || c.HeartbeatInterval != 10*time.Second || c.EvictAfter != 30*time.Second ||
		c.Retention != 24*time.Hour || c.EvictBatch != 500 || c.Logger == nil || c.MeterProvider == nil {
		t.Fatalf("defaults: %+v", c)
	}
	if c := (Config{Project: "billing", HeartbeatInterval: 200 * time.Millisecond}).WithDefaults(); c.EvictAfter != 600*time.Millisecond {
		t.Fatalf("EvictAfter follows HeartbeatInterval: got %v", c.EvictAfter)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string // "" = valid
	}{
		{"defaults", Config{Project: "billing"}, ""},
		{"compressed", Config{Project: "billing", HeartbeatInterval: 200 * time.Millisecond, Retention: time.Second}, ""},
		{"no project", Config{}, "Project"},
		{"project with slash", Config{Project: "a/b"}, "Project \"a/b\" must not contain '/'"},
		{"project with brace", Config{Project: "a{b}"}, "Project \"a{b}\" must not contain '{' or '}'"},
		{"prefix with space", Config{Project: "p", Prefix: "a b:"}, "Prefix must not contain white space"},
		{"prefix with brace", Config{Project: "p", Prefix: "{x}:"}, "Prefix must not contain '{' or '}'"},
		{"prefix too long", Config{Project: "p", Prefix: strings.Repeat("x", 201)}, "Prefix must be at most 200 bytes"},
		{"interval too short", Config{Project: "p", HeartbeatInterval: time.Millisecond}, "HeartbeatInterval must be at least 10ms"},
		{"evict after equals interval", Config{Project: "p", HeartbeatInterval: time.Second, EvictAfter: time.Second}, "EvictAfter must exceed HeartbeatInterval (1s), got 1s"},
		{"evict after below default interval", Config{Project: "p", EvictAfter: 5 * time.Second}, "EvictAfter must exceed HeartbeatInterval (10s)"},
		{"negative retention", Config{Project: "p", Retention: -time.Second}, "Retention must be at least 1ms"},
		{"batch too large", Config{Project: "p", EvictBatch: 10_001}, "EvictBatch must be between 1 and 10000"},
		{"negative batch", Config{Project: "p", EvictBatch: -1}, "EvictBatch"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantConfigErr(t, tc.cfg.Validate(), tc.want)
		})
	}
}

func TestNewRefusesNilClientAndBadConfig(t *testing.T) {
	if _, err := New(nil, Config{Project: "p"}); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(nil) = %v", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer rdb.Close()
	if _, err := New(rdb, Config{}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "Project") {
		t.Fatalf("New without project = %v", err)
	}
	r, err := New(rdb, Config{Project: "billing"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := r.WorkerKey("orders", "w-1"), "baton:registry:{billing}/w/orders/w-1"; got != want {
		t.Fatalf("WorkerKey = %q, want %q", got, want)
	}
	if got, want := r.HeartbeatKey("orders"), "baton:registry:{billing}/hb/orders"; got != want {
		t.Fatalf("HeartbeatKey = %q, want %q", got, want)
	}
	if got, want := r.IndexKey(), "baton:registry:{billing}/idx"; got != want {
		t.Fatalf("IndexKey = %q, want %q", got, want)
	}
}

// wantConfigErr fails t unless err is nil for want "", or an ErrInvalidConfig whose text contains want.
func wantConfigErr(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("Validate() = %v, want nil", err)
		}
		return
	}
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Validate() = %v, want ErrInvalidConfig containing %q", err, want)
	}
}
