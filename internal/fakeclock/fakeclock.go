// Package fakeclock is the tests' one fake clock: a time that only the
// test moves, read by any number of goroutines. It is not part of the
// public API.
package fakeclock

import (
	"sync/atomic"
	"time"
)

// Start is the time a zero Clock reads: a fixed date, so that a test's
// times do not depend on when it runs.
var Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// Clock is a fake clock, safe for concurrent use. Its zero value reads
// Start. Its Now is the func() time.Time a Lease's or a MemStore's Clock
// takes.
type Clock struct {
	since atomic.Int64 // nanoseconds since Start
}

// Now returns the clock's time, in the local zone as time.Unix gives the
// times a Lease decodes from its record. It reads any time Set can set,
// beyond the years Unix nanoseconds hold (1678 to 2262) too.
func (c *Clock) Now() time.Time { return Start.Add(time.Duration(c.since.Load())).In(time.Local) }

// Advance moves the clock by d, backwards when d is negative.
func (c *Clock) Advance(d time.Duration) { c.since.Add(int64(d)) }

// Set moves the clock to t, which must be within 292 years of Start.
func (c *Clock) Set(t time.Time) { c.since.Store(int64(t.Sub(Start))) }
