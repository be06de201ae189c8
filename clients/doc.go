// Package clients builds the etcd, Temporal and Redis clients Baton runs on, from one Config, for
// applications and tools that have no clients of their own: the demo worker, the baton command, the
// integration servers and fxmodule.Clients all build theirs here, so every one of them connects,
// authenticates and fails the same way.
//
// A Config says where the servers are, with which credentials and TLS files; LoadEnv fills it from
// the BATON_ETCD_*, BATON_TEMPORAL_* and BATON_REDIS_* variables (EnvVars lists them; the root
// package owns the BATON_* namespaces and leaves these to LoadEnv, which refuses a misspelt name in
// them). Validate names the field, the variable and the rule; secrets never appear in an error or
// in String.
//
// What the constructors add to the clients' own behaviour is about failing early and clearly:
//
//   - NewEtcd makes one TLS connection itself before building the client, because etcd's client
//     reports a refused certificate only as "context deadline exceeded"; the refusal wraps ErrRefused
//     and says why.
//   - CheckRedis pings once and separates a refusal (credentials, ACL, TLS: ErrRefused, retrying
//     cannot fix it) from a server that cannot be reached (the loops retry).
//   - NewTemporal connects lazily, with TemporalDialOptions: a reconnect backoff capped at 250 ms,
//     and task polls, task completions and updates that wait for the connection instead of failing
//     while it is down, so a restarted Temporal server is served again as soon as it is back.
//     Applications that build their own Temporal client add those options.
//
// The caller owns and closes what it builds; fxmodule ties the clients to an Fx app's lifecycle.
//
//	cfg, err := clients.LoadEnv(clients.Config{})
//	if err != nil {
//		return err
//	}
//	etcd, err := clients.NewEtcd(ctx, cfg, log)
//	if err != nil {
//		return err
//	}
//	defer etcd.Close()
package clients
