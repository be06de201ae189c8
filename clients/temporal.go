package clients

import (
	"crypto/tls"
	"fmt"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"
)

// NewTemporal connects a Temporal client lazily (an unreachable server does not fail here; the
// takeover retries) with TemporalOptions and the application's data converter dc (nil: the SDK's
// default); the caller closes it. log may be nil.
func NewTemporal(cfg Config, log *zap.Logger, dc converter.DataConverter) (client.Client, error) {
	opts, err := TemporalOptions(cfg, log)
	if err != nil {
		return nil, err
	}
	opts.DataConverter = dc
	tc, err := client.NewLazyClient(opts)
	if err != nil {
		return nil, fmt.Errorf("clients: Temporal client for %s: %w", opts.HostPort, err)
	}
	return tc, nil
}

// TemporalOptions are the SDK options NewTemporal dials with: address, namespace, TLS, the API key
// (which turns TLS on with the system roots unless TemporalTLS or TemporalTLSDisabled says otherwise),
// TemporalDialOptions and a logger over log (which may be nil).
func TemporalOptions(cfg Config, log *zap.Logger) (client.Options, error) {
	if err := cfg.Validate(); err != nil {
		return client.Options{}, err
	}
	c := cfg.withDefaults()
	tlsCfg, _ := c.TemporalTLS.config()
	opts := client.Options{HostPort: c.TemporalAddress, Namespace: c.TemporalNamespace,
		ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg, TLSDisabled: c.TemporalTLSDisabled, DialOptions: TemporalDialOptions()},
		Logger:            sdkLogger{orNop(log).Named("temporal-client").Sugar()}}
	if c.TemporalAPIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(c.TemporalAPIKey)
		if tlsCfg == nil && !c.TemporalTLSDisabled {
			opts.ConnectionOptions.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	return opts, nil
}

// sdkLogger adapts zap to the Temporal SDK's logger.
type sdkLogger struct{ l *zap.SugaredLogger }

func (z sdkLogger) Debug(msg string, kv ...any) { z.l.Debugw(msg, kv...) }
func (z sdkLogger) Info(msg string, kv ...any)  { z.l.Infow(msg, kv...) }
func (z sdkLogger) Warn(msg string, kv ...any)  { z.l.Warnw(msg, kv...) }
func (z sdkLogger) Error(msg string, kv ...any) { z.l.Errorw(msg, kv...) }
