package writefence

import (
	"context"
	"sync"
)

// verdictOnce keeps the verdict of a start-up check a Fence runs before its
// first push (the brand check, the probe). A pass and a final refusal are
// kept for the Fence's lifetime; any other failure (network, auth, a done
// ctx) is not, so the next call checks again. At most one check runs at a
// time; concurrent callers wait for it, or for their own ctx.
type verdictOnce struct {
	mu      sync.Mutex    // guards the fields below
	done    bool          // a verdict is kept in err
	err     error         // the kept refusal; nil for a pass
	running chan struct{} // closed when the check in flight ends; nil when none
}

// do returns the kept verdict, or runs check and keeps its result when
// it is nil or final says it is a refusal.
func (o *verdictOnce) do(ctx context.Context, check func(context.Context) error, isFinal func(error) bool) error {
	for {
		o.mu.Lock()
		if o.done {
			err := o.err
			o.mu.Unlock()
			return err
		}
		if wait := o.running; wait != nil {
			o.mu.Unlock()
			select {
			case <-wait:
			case <-ctx.Done():
			}
			// Both may be ready: an ended ctx wins, whatever select picked.
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		running := make(chan struct{})
		o.running = running
		o.mu.Unlock()

		err := check(ctx)

		o.mu.Lock()
		if err == nil || isFinal(err) {
			o.done, o.err = true, err
		}
		o.running = nil
		o.mu.Unlock()
		close(running)
		return err
	}
}

// refusal returns the kept refusal, or nil.
func (o *verdictOnce) refusal() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}
