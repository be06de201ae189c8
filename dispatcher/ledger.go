package dispatcher

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/takeover"
)

// EtcdLedger keeps dispatch keys in etcd under a prefix, each for a retention period (records share
// a lease, rotated every half retention, so a record lives between half and the full period).
type EtcdLedger struct {
	client    *clientv3.Client
	prefix    string
	retention time.Duration

	mu      sync.Mutex
	lease   clientv3.LeaseID
	granted time.Time
}

var _ Ledger = (*EtcdLedger)(nil)

// NewEtcdLedger returns a ledger under prefix (default "/baton/dispatch") keeping records for
// retention (default 24h, at least 1 minute).
func NewEtcdLedger(c *clientv3.Client, prefix string, retention time.Duration) (*EtcdLedger, error) {
	if c == nil {
		return nil, fmt.Errorf("dispatcher: ledger client must not be nil")
	}
	if prefix == "" {
		prefix = "/baton/dispatch"
	}
	if strings.HasSuffix(prefix, "/") {
		return nil, fmt.Errorf("dispatcher: ledger prefix must not end with '/', got %q", prefix)
	}
	if retention == 0 {
		retention = 24 * time.Hour
	}
	if retention < time.Minute {
		return nil, fmt.Errorf("dispatcher: ledger retention must be at least 1m, got %v", retention)
	}
	return &EtcdLedger{client: c, prefix: prefix, retention: retention}, nil
}

func (l *EtcdLedger) key(k string) string { return l.prefix + "/" + k }

func (l *EtcdLedger) currentLease(ctx context.Context) (clientv3.LeaseID, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lease != 0 && time.Since(l.granted) < l.retention/2 {
		return l.lease, nil
	}
	resp, err := l.client.Grant(ctx, int64(l.retention/time.Second))
	if err != nil {
		return 0, err
	}
	l.lease, l.granted = resp.ID, time.Now()
	return l.lease, nil
}

// Begin records key as pending unless it exists; a completed record reports done.
func (l *EtcdLedger) Begin(ctx context.Context, key string, owner takeover.Owner) (bool, error) {
	lease, err := l.currentLease(ctx)
	if err != nil {
		return false, err
	}
	k := l.key(key)
	resp, err := l.client.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, record("pending", owner), clientv3.WithLease(lease))).
		Else(clientv3.OpGet(k)).
		Commit()
	if err != nil {
		return false, err
	}
	if resp.Succeeded {
		return false, nil
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	return len(kvs) > 0 && strings.HasPrefix(string(kvs[0].Value), "done "), nil
}

// Complete marks key as dispatched.
func (l *EtcdLedger) Complete(ctx context.Context, key string, owner takeover.Owner) error {
	lease, err := l.currentLease(ctx)
	if err != nil {
		return err
	}
	_, err = l.client.Put(ctx, l.key(key), record("done", owner), clientv3.WithLease(lease))
	return err
}

func record(state string, owner takeover.Owner) string {
	return fmt.Sprintf("%s %s %d", state, owner.ServerID, owner.Token)
}
