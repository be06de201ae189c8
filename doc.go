// Package baton gives every (project, task queue) of a Temporal worker fleet exactly one owner of its
// dispatcher workflow, decided by an etcd election, and cleans up after owners that crash.
//
// A worker process creates one Node over its etcd, Temporal and Redis clients. For every queue the
// Node campaigns; the winner terminates the previous dispatcher run by its run ID and starts its own
// (package takeover), heartbeats it in Redis (package heartbeat) and evicts dead workers from the
// registry (package registry) while its term holds. Losing the etcd session ends the term at once:
// the Node stops acting before etcd can elect anyone else. One Node per project also wins the
// reconciler election and removes what crashed owners left behind (package reconciler). Stop
// resigns every term first, so a rolling restart hands each queue over in milliseconds.
//
// Package clients builds the etcd, Temporal and Redis clients from a Config or the BATON_* variables
// for applications that have none of their own. Applications built with Uber Fx use package
// fxmodule; everyone else:
//
//	node, err := baton.New(baton.Config{Project: "billing", Queues: []string{"orders"}, Logger: logger},
//		etcdClient, temporalClient, redisClient)
//	if err != nil {
//		return err
//	}
//	if err := node.Start(ctx); err != nil {
//		return err
//	}
//	defer node.Stop(stopCtx)
package baton
