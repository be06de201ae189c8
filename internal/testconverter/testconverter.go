// Package testconverter holds a Temporal data converter that tests can recognise and see used, for
// the tests of every layer that must hand an application's converter on (clients, fxmodule).
package testconverter

import (
	"sync/atomic"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
)

// Counting is the default data converter, counting the payloads it encodes.
type Counting struct {
	converter.DataConverter
	encoded atomic.Int64
}

// New returns a Counting converter over Temporal's default one.
func New() *Counting {
	return &Counting{DataConverter: converter.GetDefaultDataConverter()}
}

// Encoded is how many times ToPayload or ToPayloads was called.
func (c *Counting) Encoded() int64 { return c.encoded.Load() }

// ToPayload counts and encodes v.
func (c *Counting) ToPayload(v any) (*commonpb.Payload, error) {
	c.encoded.Add(1)
	return c.DataConverter.ToPayload(v)
}

// ToPayloads counts and encodes vs.
func (c *Counting) ToPayloads(vs ...any) (*commonpb.Payloads, error) {
	c.encoded.Add(1)
	return c.DataConverter.ToPayloads(vs...)
}
