package clients

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// NewEtcd builds an etcd client from cfg; the caller closes it. With TLS, it first makes one TLS
// connection to the endpoints itself, within ctx and at most maxProbeTimeout: etcd's client reports a
// server that refuses its certificate (or a certificate it cannot verify) only as "context deadline
// exceeded", so such a refusal fails here with its reason (wrapping ErrRefused). An unreachable etcd
// does not fail here unless credentials are set (etcd's client authenticates at once, within
// EtcdDialTimeout). log may be nil.
func NewEtcd(ctx context.Context, cfg Config, log *zap.Logger) (*clientv3.Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c := cfg.withDefaults()
	tlsCfg, _ := c.EtcdTLS.config()
	if tlsCfg != nil {
		if err := probeTLS(ctx, c.EtcdEndpoints, tlsCfg, min(c.EtcdDialTimeout, maxProbeTimeout)); err != nil {
			return nil, fmt.Errorf("clients: etcd client for %v: %w", c.EtcdEndpoints, err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.EtcdEndpoints, DialTimeout: c.EtcdDialTimeout, TLS: tlsCfg,
		Username: c.EtcdUsername, Password: c.EtcdPassword,
		// The client's own retry warnings repeat, request by request, what Baton reports once with
		// its consequence (a campaign failing, readiness red): only its errors are kept.
		Logger:            orNop(log).Named("etcd-client").WithOptions(zap.IncreaseLevel(zapcore.ErrorLevel)),
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
	})
	if errors.Is(err, context.DeadlineExceeded) {
		// With credentials the client authenticates at once: an etcd that does not answer ends here.
		return nil, fmt.Errorf("clients: etcd not reachable at %v within %v (BATON_ETCD_ENDPOINTS, BATON_ETCD_DIAL_TIMEOUT): %w",
			c.EtcdEndpoints, c.EtcdDialTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("clients: etcd client for %v: %w", c.EtcdEndpoints, err)
	}
	return cli, nil
}

// maxProbeTimeout bounds the connection checks NewEtcd and CheckRedis make.
const maxProbeTimeout = 3 * time.Second

// ErrRefused marks a check that failed because the server refused the client's credentials or TLS
// settings, as opposed to a server that could not be reached: retrying cannot fix it.
var ErrRefused = errors.New("refused")

func orNop(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}
