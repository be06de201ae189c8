// Package etcdmodel is an in-memory model of the etcd v3 API that Baton uses, honest enough that the
// real clientv3 and concurrency code runs on top of it inside a testing/synctest bubble.
//
// The model keeps one global revision; per key its CreateRevision, ModRevision, Version and Lease; the
// history of every revision since the last compaction (for historic reads and watches from a revision);
// leases that expire on the model's clock and delete their keys in one revision; watches with history
// replay, ErrCompacted below the compaction, created notifications, filters, events batched per
// revision and WithRequireLeader streams closed with rpctypes.ErrGRPCNoLeader while the model has no
// raft leader. A raft-leader change gives every lease its full TTL again, as etcd's lessor Promote does.
//
// [Model.Snapshot] and [Model.Restore] are an operator's backup and `etcdutl snapshot restore`, with
// or without --bump-revision and --mark-compacted: the key space, history and leases go back to the
// snapshot's, the revision goes back (later writes reuse revision numbers) or jumps by the bump with
// everything below compacted, the snapshot's leases live their full TTL again, and every watch
// stream breaks, so that clientv3 resumes its watches from the revision after the last it saw.
// TestConformanceEtcdRestore holds this to a real etcd restored with etcdutl.
//
// Clients reach it through pb.KVClient, pb.WatchClient and pb.LeaseClient implementations, wrapped by
// clientv3.NewCtxClient and the NewXFromXClient constructors (see [Model.NewClient]); errors are the gRPC
// status values of rpctypes, so clientv3's own conversion runs. Every request and every stream message
// passes a [Transport], where a simulator delays, reorders, drops or duplicates it; the default delivers
// at once.
//
// What the model does not support fails loudly with [ErrUnsupported] naming the field: a request Baton
// does not make gets an error, never a made-up answer. Known simplifications: no progress notifications
// (WithProgressNotify is accepted, etcd's default interval is ten minutes), no auth, no cluster or
// maintenance API, serializable reads are answered linearizably.
//
// A planted bug ([Options.Bug]) exists so that the conformance tests can prove they notice a model that
// drifted from the real server.
package etcdmodel
