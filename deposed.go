package writefence

import (
	"context"
	"errors"
	"sync"
)

// Deposed returns a context derived from ctx, cancelled the moment this
// Fence learns that its writer of (plugin, shard) is deposed: a Push,
// PushFrom, Update, Commit or Seal by f refused as stale (promise 18; the
// cause is the *StaleEpochError), or a Lease on f that gates the shard
// lost or expired (promise 16; the cause is the Lease's error). Only
// refusals after the call count. An invalid name returns a context already
// cancelled with the *InvalidArgumentError; stop cancels it with
// context.Canceled.
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
