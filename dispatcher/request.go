package dispatcher

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode/utf8"
)

// Request is one dispatch request. Its identity fields decide its dispatch key: the same fields are the
// same request, however often it is sent and whichever run receives it.
type Request struct {
	Type          string `json:"type"`           // what kind of work, e.g. an agent or task type
	TaskID        string `json:"task_id"`        // the task it belongs to
	PayloadSHA256 string `json:"payload_sha256"` // SHA-256 (hex) of the payload, which travels elsewhere
	Parent        string `json:"parent"`         // the parent session or request; may be empty
}

// maxFieldLen bounds each identity field.
const maxFieldLen = 512

// Validate returns an error wrapping ErrInvalidRequest that names the first field breaking a rule.
func (r Request) Validate() error {
	for _, f := range []struct {
		name, value string
		required    bool
	}{{"type", r.Type, true}, {"task_id", r.TaskID, true}, {"payload_sha256", r.PayloadSHA256, true}, {"parent", r.Parent, false}} {
		switch {
		case f.required && f.value == "":
			return fmt.Errorf("%w: %s must not be empty", ErrInvalidRequest, f.name)
		case len(f.value) > maxFieldLen:
			return fmt.Errorf("%w: %s must be at most %d bytes, got %d", ErrInvalidRequest, f.name, maxFieldLen, len(f.value))
		case !utf8.ValidString(f.value):
			return fmt.Errorf("%w: %s must be valid UTF-8", ErrInvalidRequest, f.name)
		case strings.ContainsRune(f.value, 0):
			return fmt.Errorf("%w: %s must not contain NUL (it separates the fields of the dispatch key)", ErrInvalidRequest, f.name)
		}
	}
	if len(r.PayloadSHA256) != 64 || strings.Trim(strings.ToLower(r.PayloadSHA256), "0123456789abcdef") != "" {
		return fmt.Errorf("%w: payload_sha256 must be 64 hex digits, got %d bytes", ErrInvalidRequest, len(r.PayloadSHA256))
	}
	return nil
}

// Key is the deterministic dispatch key: hex SHA-256 over the identity fields joined with NUL.
func (r Request) Key() string {
	sum := sha256.Sum256([]byte(r.Type + "\x00" + r.TaskID + "\x00" + strings.ToLower(r.PayloadSHA256) + "\x00" + r.Parent))
	return hex.EncodeToString(sum[:])
}
