// Package heartbeat keeps the Redis record of who runs each dispatcher: the owner of a
// (project, queue) writes dispatcher:heartbeat:{<project>}/<workflow-id> (Key: the project is the
// Redis Cluster hash tag, and a project's keys match Pattern and no other project's) every Interval with the workflow ID, the
// run ID, its server ID, its fencing token and the Redis server's own time (never the writer's clock,
// so hosts with skewed clocks agree on how old an entry is).
//
// The write is a Lua script that refuses to overwrite an entry carrying a higher fencing token: a
// superseded owner that is still running (paused, partitioned) can never make a newer owner's entry
// look like its own, and learns from the refusal that it was superseded. The key's TTL is only a
// backstop; the reconciler decides when an entry is stale and removes it.
//
// A leader's heartbeat loop:
//
//	w, err := heartbeat.NewWriter(rdb, heartbeat.Config{Logger: logger})
//	if err != nil {
//		return err
//	}
//	// run is what takeover.Manager.Take returned for term.
//	return w.Run(term.Context(), term, run)
package heartbeat
