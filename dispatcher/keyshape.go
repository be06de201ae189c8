package dispatcher

import "strings"

// KeyLen is the length of a dispatch key (Request.Key): a SHA-256 in lowercase hex.
const KeyLen = 64

// IsKey reports whether s has the shape of a dispatch key as Request.Key makes them: KeyLen
// lowercase hex digits. A tool that takes a key from a person checks it first, so that a task ID
// pasted in its place is refused instead of read as a request never begun.
func IsKey(s string) bool {
	return len(s) == KeyLen && strings.Trim(s, "0123456789abcdef") == ""
}
