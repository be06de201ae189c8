package baton_test

import (
	"context"
	"log"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
)

// A listener that does the application's own work for as long as this process leads a queue, and
// fences its etcd writes with Baton's term: a write commits only while the term holds. Listen must
// be called before Start. (Shown, not run: integration/node's examples run a Node end to end against
// real servers.)
func ExampleListener() {
	var node *baton.Node // from baton.New(cfg, etcd, temporal, redis)
	err := node.Listen(baton.Listener{
		OnStartedLeading: func(ctx context.Context, lead baton.Lead) {
			log.Printf("leading %s with token %d, run %s", lead.Queue, lead.Token, lead.Run.RunID)
			// The term's context ends with the term; the write is refused once it has ended.
			if _, err := lead.Term.Guard(ctx, clientv3.OpPut("/app/"+lead.Queue+"/owner", lead.Run.RunID)); err != nil {
				log.Printf("not written: %v", err)
			}
		},
		OnStoppedLeading: func(queue string, cause error) {
			log.Printf("stopped leading %s: %v", queue, cause)
		},
		OnNewLeader: func(queue string, leader election.Leader) {
			log.Printf("%s is led by %q", queue, leader.ID)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
}
