// Package names holds the one rule set for the project and queue names that Baton puts into etcd
// keys, Redis keys and Temporal workflow IDs, so every package rejects the same inputs with the same
// words.
package names

import (
	"errors"
	"fmt"
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
