package etcdmodel

import "context"

// Transport carries one message between a named client and the model. Call may wait (delay,
// partition), call deliver or not (drop before apply), call it twice (duplicate), or return an error
// after it ran (a response lost after apply). It returns deliver's error when it passes the answer on.
// Methods are the gRPC method names ("Range", "Txn", "LeaseKeepAlive", ...) and, for the server's
// stream messages, "WatchResponse".
type Transport interface {
	Call(ctx context.Context, client, method string, deliver func() error) error
}

type direct struct{}

func (direct) Call(_ context.Context, _, _ string, deliver func() error) error { return deliver() }
