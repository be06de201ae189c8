package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-run/baton/configerr"
)

// Zero means the documented default; a bad field is named with its rule, as a *configerr.Error.
func TestConfigValidate(t *testing.T) {
	if d := DefaultConfig(); d.Prefix != DefaultPrefix || d.Retention != DefaultRetention || d.IgnoreLegacy || d.Clock == nil {
		t.Fatalf("DefaultConfig() = %+v", d)
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"zero is every default", Config{}, ""},
		{"a prefix of its own", Config{Prefix: "/app/ledger", Retention: time.Hour}, ""},
		{"the shortest retention", Config{Retention: MinRetention}, ""},
		{"prefix ending with a slash", Config{Prefix: "/app/ledger/"}, "Prefix"},
		{"retention under a minute", Config{Retention: MinRetention - time.Second}, "Retention"},
		{"negative retention", Config{Retention: -time.Hour}, "Retention"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var bad *configerr.Error
			if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &bad) || bad.Field != tc.field {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
			if _, nerr := New(nil, tc.cfg); !errors.Is(nerr, ErrInvalidConfig) {
				t.Fatalf("New(nil, %+v) = %v, want ErrInvalidConfig", tc.cfg, nerr)
			}
		})
	}
}
