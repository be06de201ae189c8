package ledger

import "strings"

// DispatchKeyLen is the length of a dispatch key (Request.Key): a SHA-256 in lowercase hex.
const DispatchKeyLen = 64

// IsDispatchKey reports whether s has the shape of a dispatch key as Request.Key makes them: DispatchKeyLen
// lowercase hex digits. A tool that takes a key from a person checks it first, so that a task ID
// pasted in its place is refused instead of read as a request never begun.
func IsDispatchKey(s string) bool {
	return len(s) == DispatchKeyLen && strings.Trim(s, "0123456789abcdef") == ""
}
