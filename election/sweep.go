package election

import (
	"context"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
)

// sweep checks, about once a TTL while the session lives, that what etcd attaches to its lease is what
// the Elector knows of (one LeaseTimeToLive request per process, not per queue). A restore of etcd from
// a backup breaks both ways, without a watch event that could tell:
//
//   - a key of ours comes back for an election this Elector no longer campaigns for (it resigned or
//     stepped aside after the backup): our lease keeps it alive, so it would stand first in line for
//     ever and no candidate could win. It is deleted, comparing its create revision;
//   - a term's key is gone (it was put after the backup), or back at an older revision (the same
//     name: keys are named after the lease): the term's watch sees no event for either (without
//     --bump-revision it is resumed past the revisions the restore reused), and a leader that writes
//     nothing fenced would lead on without its key. The term ends with ErrKeyLost. A term whose key
//     the lease no longer lists is read at once; the others are checked with their HeldCmp, one
//     transaction of them per sweep (sweepTerms), so that a process's requests at rest do not grow
//     with the number of queues it leads.
func (e *Elector) sweep(s *session) {
	next := "" // the key the next sweep's transaction of terms starts at (sweepTerms)
	for e.sleep(s.ctx, clock.Jitter(e.cfg.Clock, e.cfg.TTL)) {
		terms := s.liveTerms() // before the request: each of their keys was put before it was sent
		ctx, cancel := context.WithTimeout(s.ctx, e.cfg.TTL)
		resp, err := e.client.TimeToLive(ctx, s.id, clientv3.WithAttachedKeys())
		cancel()
		if err != nil || resp.TTL <= 0 {
			continue // a lost lease is the keepalive's to find
		}
		attached := make(map[string]bool, len(resp.Keys))
		for _, k := range resp.Keys {
			attached[string(k)] = true
		}
		next = e.sweepTerms(s, terms, attached, next)
		for key := range attached {
			e.sweepStray(s, key)
		}
	}
}

// sweepStray deletes key, one of the session's, if no campaign or term of this Elector stands behind
// it. The delete compares the create revision read now, so a campaign that starts meanwhile (and puts
// its key again, at a new revision) keeps its key.
func (e *Elector) sweepStray(s *session, key string) {
	election := strings.TrimSuffix(CandidatePrefix(key), "/") // Keys.Election: what campaigns are keyed by
	if !strings.HasPrefix(key, e.cfg.Prefix+"/") || e.campaigning(election) {
		return
	}
	ctx, cancel := context.WithTimeout(s.ctx, e.cfg.TTL)
	defer cancel()
	g, err := e.client.Get(ctx, key)
	if err != nil || len(g.Kvs) == 0 || g.Kvs[0].Lease != int64(s.id) || e.campaigning(election) {
		return
	}
	if _, err := e.client.Txn(ctx).If(HeldCmp(key, g.Kvs[0].CreateRevision)).Then(clientv3.OpDelete(key)).Commit(); err == nil {
		s.log.Warn("deleted a key of the session no campaign stands behind (etcd restored?)", zap.String("key", key))
	}
}

// campaigning reports whether this Elector campaigns for or leads the election whose key is election,
// or still runs the leader callback of a term of it that ended (Term.claims).
func (e *Elector) campaigning(election string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, ok := e.campaigns[election]
	return ok
}

// liveTerms returns the session's terms.
func (s *session) liveTerms() []*Term {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*Term, 0, len(s.terms))
	for t := range s.terms {
		out = append(out, t)
	}
	return out
}

// sweepTermsPerTxn bounds the compares of one transaction (etcd's --max-txn-ops defaults to 128), and
// so the terms one sweep compares.
const sweepTermsPerTxn = 100

// sweepTerms ends the terms whose key no longer holds their token, and returns where the next sweep
// starts. A term whose key is missing from the lease's attached keys is read at once (a read that
// confirms it, since a lease's listing might lag a put). Of the others, one transaction compares the
// HeldCmp of up to sweepTermsPerTxn terms, in key order from next, round robin: two requests per
// process and TTL at rest, whatever the number of its terms; a key a restore put back older under the
// same name is found within terms/sweepTermsPerTxn sweeps. The batch's keys are read only when the
// transaction failed.
func (e *Elector) sweepTerms(s *session, terms []*Term, attached map[string]bool, next string) string {
	ctx, cancel := context.WithTimeout(s.ctx, e.cfg.TTL)
	defer cancel()
	listed := make([]*Term, 0, len(terms))
	for _, t := range terms {
		if attached[t.key] {
			listed = append(listed, t)
		} else {
			e.checkHeld(ctx, t)
		}
	}
	if len(listed) == 0 {
		return ""
	}
	slices.SortFunc(listed, func(a, b *Term) int { return strings.Compare(a.key, b.key) })
	from, _ := slices.BinarySearchFunc(listed, next, func(t *Term, k string) int { return strings.Compare(t.key, k) })
	if from == len(listed) {
		from = 0
	}
	batch := listed[from:min(len(listed), from+sweepTermsPerTxn)]
	cmps := make([]clientv3.Cmp, len(batch))
	for i, t := range batch {
		cmps[i] = HeldCmp(t.key, t.token)
	}
	resp, err := e.client.Txn(ctx).If(cmps...).Commit()
	for i := 0; err == nil && !resp.Succeeded && i < len(batch); i++ {
		e.checkHeld(ctx, batch[i])
	}
	if end := from + len(batch); end < len(listed) {
		return listed[end].key
	}
	return ""
}

// checkHeld reads t's key and ends t when the key no longer holds its token.
func (e *Elector) checkHeld(ctx context.Context, t *Term) {
	g, err := e.client.Get(ctx, t.key)
	if err == nil && !HeldIn(g.Kvs, t.token) {
		t.log.Warn("the term's key is gone or holds another revision, without an event (etcd restored?)")
		t.end(ErrKeyLost)
	}
}
