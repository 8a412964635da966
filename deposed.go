package writefence

import (
	"context"
	"errors"
	"sync"
)

// Deposed returns a context derived from ctx that is cancelled the moment
// this Fence learns that its writer of (plugin, shard) is deposed: when a
// Push, Update, Commit or Seal by f to that shard (or PushFrom, which
// pushes) returns an error matching ErrStaleEpoch, context.Cause of the returned context is then the
// *StaleEpochError, naming the epoch and writer the store records; when a
// Lease on f that gates the shard (it sealed it in Hold, or handed out an
// epoch for it) finds the lease lost or expired, the cause is the Lease's
// error, a *LeaseLostError or one matching ErrLeaseExpired. A writer's
// pipeline ships under it and stops at once, rather than retrying writes
// the store will keep refusing, whichever of its goroutines made the
// refused write.
//
// Only a refusal after the call counts: Deposed does not look at the past,
// so a writer that takes the shard over later starts afresh. A conflict
// that was retried and landed never fires it, nor does a write whose outcome
// is unknown (ErrOutcomeUnknown: pushing again decides), nor a refused
// Settle, which is an operator's, not a writer's. A stale refusal means the
// store records an epoch at or above the refused one: another writer's, or
// one of this Fence's own later writes to the shard if its writes at
// different epochs race each other (one pipeline pushes at rising epochs, in
// order, and never refuses itself).
//
// An invalid plugin or shard returns a context already cancelled, with the
// *InvalidArgumentError as its cause: no write to that shard can happen.
// The returned context also ends when ctx does. Call stop to release it
// when the pipeline ends without being deposed; it cancels the context
// with context.Canceled.
func (f *Fence) Deposed(ctx context.Context, plugin, shard string) (deposed context.Context, stop context.CancelFunc) {
	dctx, cancel := context.WithCancelCause(ctx)
	key, err := f.key(plugin, shard)
	if err != nil {
		cancel(err)
		return dctx, func() {}
	}
	w := &deposedWaiter{key: key, cancel: cancel}
	f.deposed.add(w)
	// However the context ends (stop, ctx, a refusal), it is forgotten.
	context.AfterFunc(dctx, func() { f.deposed.remove(w) })
	return dctx, func() {
		f.deposed.remove(w)
		cancel(context.Canceled)
	}
}

// deposition is a Fence's registry of the contexts Deposed handed out.
//
// It is the seam through which anything that learns a writer is deposed
// tells its pipelines: the engine calls depose on a stale refusal of a
// shard's write (Fence.refused); a Lease that finds its lease lost or
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

// refused tells the Deposed contexts of c's key that c ended on err, when
// err refuses a writer's write (c.deposes) as stale.
func (f *Fence) refused(c *change, err error) {
	var stale *StaleEpochError
	if err == nil || !c.deposes || !errors.As(err, &stale) {
		return
	}
	f.deposed.depose(stale, func(key string) bool { return key == c.key })
}
