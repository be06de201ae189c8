package configerr_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/baton-run/baton/configerr"
)

var (
	errOuter = errors.New("outer: invalid config")
	errInner = errors.New("inner: invalid config")
)

func TestNewAndUnder(t *testing.T) {
	inner := configerr.New(errInner, "TTL", "must be at least %v, got %v", "2s", "1s")
	if got := inner.Error(); got != "inner: invalid config: TTL must be at least 2s, got 1s" {
		t.Fatalf("Error() = %q", got)
	}
	outer := configerr.Under(errOuter, "Election", fmt.Errorf("wrapped: %w", inner), nil)
	if got := outer.Error(); got != "outer: invalid config: Election.TTL must be at least 2s, got 1s" {
		t.Fatalf("Error() = %q", got)
	}
	if !errors.Is(outer, errOuter) || !errors.Is(outer, errInner) {
		t.Fatal("the restated error must match both sentinels")
	}
	var bad *configerr.Error
	if !errors.As(outer, &bad) || bad.Field != "Election.TTL" || bad.Rule != "must be at least 2s, got 1s" {
		t.Fatalf("errors.As gives %+v", bad)
	}
	renamed := configerr.Under(errOuter, "Registry", configerr.New(errInner, "Project", "must not be empty"),
		func(p string) string {
			if p == "Registry.Project" {
				return "Project"
			}
			return p
		})
	if got := renamed.Error(); got != "outer: invalid config: Project must not be empty" {
		t.Fatalf("renamed: %q", got)
	}
	if got := configerr.Under(errOuter, "Queues", configerr.New(errInner, "[2]", "is listed twice"), nil).Error(); got != "outer: invalid config: Queues[2] is listed twice" {
		t.Fatalf("index path: %q", got)
	}
	if got := configerr.Under(errOuter, "", inner, nil).Error(); got != "outer: invalid config: TTL must be at least 2s, got 1s" {
		t.Fatalf("empty parent: %q", got)
	}
	plain := configerr.Under(errOuter, "Balance", errors.New("boom"), nil)
	if !errors.As(plain, &bad) || bad.Field != "Balance" || bad.Rule != "boom" {
		t.Fatalf("a plain error: %+v", bad)
	}
	if configerr.Under(errOuter, "X", nil, nil) != nil {
		t.Fatal("nil must stay nil")
	}
}
