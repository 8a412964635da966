package testserver

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/writefence/writefence/internal/hook"
)

// Trace counts what a Fence's write engine does under the context Traced
// returned: the reads it makes of keys, the conditional writes it sends,
// and the back-offs before its retries, which it skips, so that a test of
// retries costs no time.
type Trace struct {
	reads, writes, waits atomic.Int64
}

// Traced returns ctx carrying a new Trace's hooks, and the Trace.
func Traced(ctx context.Context) (context.Context, *Trace) {
	t := &Trace{}
	return hook.With(ctx, &hook.Hooks{
		Read: func(context.Context, string) error {
			t.reads.Add(1)
			return nil
		},
		Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
			t.writes.Add(1)
			return write()
		},
		Wait: func(context.Context, int, time.Duration) error {
			t.waits.Add(1)
			return nil
		},
	}), t
}

// Reads returns the reads of keys the engine made so far.
func (t *Trace) Reads() int64 { return t.reads.Load() }

// Writes returns the conditional writes the engine sent so far.
func (t *Trace) Writes() int64 { return t.writes.Load() }

// Waits returns the back-offs the engine would have slept so far.
func (t *Trace) Waits() int64 { return t.waits.Load() }

// Counts returns reads, writes and waits, for one comparison.
func (t *Trace) Counts() [3]int64 { return [3]int64{t.Reads(), t.Writes(), t.Waits()} }
