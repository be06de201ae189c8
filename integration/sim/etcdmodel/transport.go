package etcdmodel

import "context"

// Transport carries one message between a named client and the model. Call may wait (delay,
// partition), call deliver or not (drop before apply), call it twice (duplicate), or return an error
// after it ran (a response lost after apply). It returns deliver's error when it passes the answer on.
// A request already sent may be delivered after its caller's context ended (as on a real network), so
// deliver applies it regardless of that context; only Close or a returning leader unblocks it.
// Methods are the gRPC method names ("Range", "Txn", "LeaseKeepAlive", ...) and, for the server's
// stream messages, "WatchResponse".
type Transport interface {
	// req is the request (or, for "WatchResponse", the response) in flight, for the transport's own
	// ordering and its trace; the transport must not change it.
	Call(ctx context.Context, client, method string, req any, deliver func() error) error
}

type direct struct{}

func (direct) Call(_ context.Context, _, _ string, _ any, deliver func() error) error {
	return deliver()
}
