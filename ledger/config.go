package ledger

import (
	"strings"
	"time"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
)

// DefaultPrefix is the etcd prefix of the ledger's records unless Config.Prefix names another.
const DefaultPrefix = "/baton/dispatch"

// DefaultRetention is how long a record lives unless Config.Retention says otherwise.
const DefaultRetention = 24 * time.Hour

// MinRetention is the shortest Config.Retention Validate accepts: a record must outlive the takeovers
// and retries that may send its request again.
const MinRetention = time.Minute

// Config tunes an Etcd ledger. The zero value of every field means its documented default; it is the
// ledger's one configuration (New).
type Config struct {
	// Prefix is the etcd prefix of every record: each project's lie under <Prefix>/p/<project>/
	// (Range). Default DefaultPrefix. It must not end with '/'.
	Prefix string
	// Retention is how long a record lives (records share a lease, rotated every half retention, so
	// a record lives between half and the full period). Default DefaultRetention (24h); at least
	// MinRetention (1m).
	Retention time.Duration
	// IgnoreLegacy stops Begin from consulting, for a dispatch key (IsDispatchKey), the record of the
	// layout before per-project keys (LegacyKey) when the project's own has none. Default false: this
	// release reads it, so that a request completed by a worker of the previous release stays a
	// duplicate across the upgrade; that needs read access to LegacyRange (`baton acl etcd` grants it
	// unless -legacy-ledger=false). Set it once the previous release's records have expired (the
	// ledger's retention after the last worker of that release stopped). The next release removes the
	// old layout's reading.
	IgnoreLegacy bool
	// Clock is read for the lease rotation, the age of a failing streak (Check) and the renewals of
	// attempts' claims. Default: the real clock. Lease TTLs and record expiry are always etcd's.
	Clock clock.Clock
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Retention == 0 {
		c.Retention = DefaultRetention
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// Validate checks the configuration after defaults are applied and returns an error wrapping
// ErrInvalidConfig (a *configerr.Error) that names the field and the rule it breaks.
func (c Config) Validate() error {
	c = c.withDefaults()
	switch {
	case strings.HasSuffix(c.Prefix, "/"):
		return configerr.New(ErrInvalidConfig, "Prefix", "must not end with '/', got %q", c.Prefix)
	case c.Retention < MinRetention:
		return configerr.New(ErrInvalidConfig, "Retention", "must be at least %v, got %v", MinRetention, c.Retention)
	}
	return nil
}
