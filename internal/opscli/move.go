package opscli

import (
	"cmp"
	"fmt"
	"io"
	"time"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
)

// DefaultMoveTimeout is how long transfer and drain wait for a queue to move by default, from the
// configuration's own bounds: a worker learns it drains at its next registry heartbeat
// (Registry.HeartbeatInterval), hands over within the election's stop budget
// (election.Config.StopBudget), and a successor is elected within a session TTL (Election.TTL) even
// when the hand-over fails.
func DefaultMoveTimeout(cfg baton.Config) time.Duration {
	return cfg.Registry.WithDefaults().HeartbeatInterval + cfg.Election.StopBudget() +
		cmp.Or(cfg.Election.TTL, election.DefaultConfig().TTL)
}

// electionKeys is the layout of the queues' elections in cfg.
func electionKeys(cfg baton.Config) election.Keys {
	return election.Keys{Prefix: cmp.Or(cfg.Election.Prefix, election.DefaultConfig().Prefix)}
}

// reportMove prints that queue went from one leader to the next, and how long it took.
func reportMove(w io.Writer, queue string, from, to election.Leader, took time.Duration) {
	fmt.Fprintf(w, "%s: %s (token %d) -> %s (token %d) in %v\n", queue, from.ID, from.Token, to.ID, to.Token, took.Round(time.Millisecond))
}
