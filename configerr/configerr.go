// Package configerr is the one shape of Baton's configuration errors: which field is wrong (a path
// such as "Election.TTL") and the rule it breaks, typed, so that an application, a tool or the root
// Config learns both with errors.As instead of parsing an error's text.
//
// Every package's Validate returns an *Error that matches the package's own ErrInvalidConfig (or
// ErrInvalidName, ...) with errors.Is. A configuration that holds another restates the inner error
// under its own field path and sentinel (Under), so the root Config reports
// "baton: invalid config: Election.TTL must be ..." and the error still matches
// election.ErrInvalidConfig too.
//
//	var bad *configerr.Error
//	if errors.As(err, &bad) {
//		fmt.Println(bad.Field, bad.Rule) // Election.TTL must be at most 30s, got 1000h0m0s ...
//	}
package configerr

import (
	"errors"
	"fmt"
	"strings"
)

// Error is an invalid field of a configuration.
type Error struct {
	// Field is the field's path from the configuration that reported it ("TTL", "Election.TTL",
	// "Queues[3]"); empty when the rule concerns the whole configuration.
	Field string
	// Rule is what the field breaks, for people ("must be at least 1s, got 0s").
	Rule string

	kind  error // the reporting package's sentinel, for errors.Is
	inner error // the error this one restates (Under), for errors.Is and errors.As
}

// New returns the error of field breaking the rule format (fmt.Sprintf with args), reported as kind,
// the package's sentinel (for example its ErrInvalidConfig).
func New(kind error, field, format string, args ...any) *Error {
	return &Error{Field: field, Rule: fmt.Sprintf(format, args...), kind: kind}
}

// Error reads "<kind>: <Field> <Rule>", for example
// "election: invalid config: TTL must be at least 2s, got 1s".
func (e *Error) Error() string {
	var b strings.Builder
	if e.kind != nil {
		b.WriteString(e.kind.Error())
		b.WriteString(": ")
	}
	if e.Field != "" {
		b.WriteString(e.Field)
		b.WriteByte(' ')
	}
	b.WriteString(e.Rule)
	return b.String()
}

// Unwrap returns the sentinel and the restated error.
func (e *Error) Unwrap() []error {
	out := make([]error, 0, 2)
	for _, err := range []error{e.kind, e.inner} {
		if err != nil {
			out = append(out, err)
		}
	}
	return out
}

// Under restates err, an inner configuration's error, for the configuration that holds it at field
// parent: reported as kind, its Field under parent ("TTL" becomes "Election.TTL"; an empty parent
// keeps the path). rename maps a resulting path to the one the caller reports instead (a field the
// holder sets from one of its own); nil keeps every path. An err without an *Error is kept whole as
// the rule. nil stays nil.
func Under(kind error, parent string, err error, rename func(path string) string) error {
	if err == nil {
		return nil
	}
	var inner *Error
	if !errors.As(err, &inner) {
		return &Error{Field: parent, Rule: err.Error(), kind: kind, inner: err}
	}
	path := inner.Field
	switch {
	case parent == "":
	case path == "":
		path = parent
	case strings.HasPrefix(path, "["):
		path = parent + path
	default:
		path = parent + "." + path
	}
	if rename != nil {
		path = rename(path)
	}
	return &Error{Field: path, Rule: inner.Rule, kind: kind, inner: err}
}
