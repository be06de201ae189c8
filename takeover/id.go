package takeover

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/baton-run/baton/names"
)

// MaxIDLength is the longest dispatcher workflow ID WorkflowID returns, in bytes (Temporal's
// default limit is 1,000).
const MaxIDLength = 255

const idPrefix = "dispatcher-"

// WorkflowID returns the stable ID of the dispatcher workflow of (project, queue):
// "dispatcher-<project>-<queue>". The server ID is never part of it, so every owner addresses the
// same workflow and a new owner's start replaces the old owner's run.
//
// Distinct inputs never share an ID. The plain form is unambiguous only when the project has no
// '-' (otherwise "a-b"+"c" and "a"+"b-c" would meet) and when it fits MaxIDLength; in every other
// case the ID is the plain form, cut to fit, followed by '/' and 128 bits of SHA-256 over the two
// names. Names cannot contain '/', so a hashed ID never equals a plain one.
func WorkflowID(project, queue string) (string, error) {
	if err := names.Check(project); err != nil {
		return "", fmt.Errorf("%w: project %s %v", ErrInvalidName, names.Quote(project), err)
	}
	if err := names.Check(queue); err != nil {
		return "", fmt.Errorf("%w: queue %s %v", ErrInvalidName, names.Quote(queue), err)
	}
	plain := idPrefix + project + "-" + queue
	if !strings.Contains(project, "-") && len(plain) <= MaxIDLength {
		return plain, nil
	}
	sum := sha256.Sum256([]byte(project + "\x00" + queue))
	suffix := "/" + hex.EncodeToString(sum[:16])
	head := plain
	if len(head) > MaxIDLength-len(suffix) {
		cut := MaxIDLength - len(suffix)
		for cut > 0 && !utf8.RuneStart(head[cut]) {
			cut--
		}
		head = head[:cut]
	}
	return head + suffix, nil
}

// DefaultTaskQueue is the Temporal task queue of a queue's dispatcher runs when neither
// Config.TaskQueue nor the Start hook names one: "<project>/<queue>". A task queue is shared by the
// whole namespace, so the bare queue name would let two projects with a queue of the same name run
// each other's dispatcher tasks. Names cannot contain '/', so no two (project, queue) pairs share one.
// Workers that run the dispatcher poll this name.
func DefaultTaskQueue(project, queue string) string { return project + "/" + queue }

// WorkflowIDPrefix returns a prefix that every dispatcher workflow ID of project starts with, for a
// visibility query (WorkflowId STARTS_WITH). Other projects' IDs may share it ("a" and "a-b"):
// callers tell them apart by the run's Owner.
func WorkflowIDPrefix(project string) string {
	prefix := idPrefix + project + "-"
	// A hashed ID keeps at least MaxIDLength minus its suffix ('/' and 32 hex digits) of the plain form.
	if limit := MaxIDLength - 33; len(prefix) > limit {
		for limit > 0 && !utf8.RuneStart(prefix[limit]) {
			limit--
		}
		prefix = prefix[:limit]
	}
	return prefix
}
