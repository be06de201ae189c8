// Package names holds the one rule set for the project and queue names that Baton puts into etcd
// keys, Redis keys and Temporal workflow IDs, so every package rejects the same inputs with the same
// words.
//
// It is public because applications benefit from the same rules: a worker that checks its project and
// queue names (from flags, a manifest or a database) with Check before it starts fails with the field
// it read, instead of with Baton's configuration error after its clients are built.
package names

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxLen is the longest project or queue name accepted, in bytes. It keeps an etcd key, a Redis key
// and a dispatcher workflow ID (Temporal's default limit is 1,000 bytes) comfortably bounded.
const MaxLen = 200

// Check returns nil when value is a usable name, otherwise an error stating the rule it breaks.
func Check(value string) error {
	switch {
	case value == "":
		return errors.New("must not be empty")
	case len(value) > MaxLen:
		return fmt.Errorf("must be at most %d bytes, got %d", MaxLen, len(value))
	case !utf8.ValidString(value):
		return errors.New("must be valid UTF-8")
	}
	for i, r := range value {
		switch {
		case r == '/':
			return fmt.Errorf("must not contain '/' (at byte %d)", i)
		case unicode.IsControl(r):
			return fmt.Errorf("must not contain control characters (%U at byte %d)", r, i)
		case unicode.IsSpace(r):
			return fmt.Errorf("must not contain white space (%U at byte %d)", r, i)
		}
	}
	return nil
}

// Quote renders a user-supplied value for an error message: quoted, control characters escaped,
// and cut to a readable length.
func Quote(value string) string {
	const show = 64
	if len(value) > show {
		cut := show
		for cut > 0 && !utf8.RuneStart(value[cut]) {
			cut--
		}
		return fmt.Sprintf("%q...(%d bytes)", value[:cut], len(value))
	}
	return fmt.Sprintf("%q", value)
}

// CheckPrefix returns nil when p is a usable key prefix: not empty, at most 200 bytes, no white space
// or control characters, and none of the forbidden characters (why says what they mean to the caller,
// e.g. "glob characters" for a prefix used in SCAN MATCH).
func CheckPrefix(p, forbidden, why string) error {
	switch {
	case p == "":
		return errors.New("must not be empty")
	case len(p) > 200:
		return fmt.Errorf("must be at most 200 bytes, got %d", len(p))
	case forbidden != "" && strings.ContainsAny(p, forbidden):
		return fmt.Errorf("must not contain %s (%s), got %s", why, strings.Join(strings.Split(forbidden, ""), " "), Quote(p))
	case strings.ContainsFunc(p, func(r rune) bool { return r <= ' ' || r == 0x7f }):
		return fmt.Errorf("must not contain white space or control characters, got %s", Quote(p))
	}
	return nil
}

// GlobEscape returns s as a Redis glob (SCAN MATCH, an ACL key pattern) that matches s alone: the
// characters a glob gives a meaning ('*', '?', '[', ']', '\') are escaped with a backslash. A name may
// hold them, so a pattern built from a name escapes it.
func GlobEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
