package writefence

import (
	"context"
	"sync"
)

// deposition is a Fence's registry of the contexts Deposed handed out.
//
// It is the seam through which anything that learns a writer is deposed
// tells its pipelines: the engine calls depose on a stale refusal of a
// shard's write (engine.refused); a Lease that finds its lease lost or
// expired calls l.Fence.deposed.depose with that as the cause and a match
// of every key it gates (Lease.endLocked).
type deposition struct {
	mu      sync.Mutex                  // guards waiting
	waiting map[*deposedWaiter]struct{} // the contexts not yet ended
}

// deposedWaiter is one context of Deposed: the shard key it watches and how
// to cancel it.
type deposedWaiter struct {
	key    string
	cancel context.CancelCauseFunc
}

func (d *deposition) add(w *deposedWaiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.waiting == nil {
		d.waiting = make(map[*deposedWaiter]struct{})
	}
	d.waiting[w] = struct{}{}
}

func (d *deposition) remove(w *deposedWaiter) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.waiting, w)
}

// depose cancels, with cause, every waiting context whose key match
// accepts, and forgets them.
func (d *deposition) depose(cause error, match func(key string) bool) {
	d.mu.Lock()
	var fire []*deposedWaiter
	for w := range d.waiting {
		if match(w.key) {
			fire = append(fire, w)
			delete(d.waiting, w)
		}
	}
	d.mu.Unlock()
	// Outside the lock: a cancellation starts the context's AfterFunc,
	// which takes it.
	for _, w := range fire {
		w.cancel(cause)
	}
}
