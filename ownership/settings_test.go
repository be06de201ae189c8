package ownership

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-run/baton/configerr"
)

func TestSettingsValidate(t *testing.T) {
	if err := (Settings{}).Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	d := DefaultSettings()
	if d.MaxReplacements != DefaultMaxReplacements || d.PermanentHold != DefaultPermanentHold || d.PermanentHoldMax != DefaultPermanentHoldMax {
		t.Fatalf("DefaultSettings() = %+v", d)
	}
	cases := []struct {
		name  string
		s     Settings
		field string
	}{
		{"no replacements", Settings{MaxReplacements: -1}, "MaxReplacements"},
		{"negative hold", Settings{PermanentHold: -time.Second}, "PermanentHold"},
		{"hold cap below the hold", Settings{PermanentHold: time.Minute, PermanentHoldMax: 30 * time.Second}, "PermanentHoldMax"},
		{"hold cap below the default hold", Settings{PermanentHoldMax: time.Second}, "PermanentHoldMax"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate()
			var ce *configerr.Error
			if !errors.Is(err, ErrInvalidConfig) || !errors.As(err, &ce) || ce.Field != tc.field {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}
