package writefence

import "context"

// Seal raises the recorded epoch of (plugin, shard) to epoch without
// changing its payload, so that every write at a lower epoch is refused from
// now on: a new writer's first act, which fences a deposed writer at once
// rather than at the new writer's first push.
//
// Seal is Update with a function that returns the recorded payload as it
// is: it reads the whole record and writes it back with a new header (this
// epoch and writer, the same payload and blob references) in one write
// conditioned on the version it read, so what it carries forward is
// exactly what was recorded at that moment; a push landing in between makes the write
// conflict, and Seal reads again. A shard never pushed is sealed with an
// empty payload: leaving it absent would let a deposed writer create it.
// Latest then returns that empty payload, not ErrNotFound.
//
// The rules are Update's: a corrupt record (ErrCorrupt) or one of another
// identity (ErrWire) refuses without writing, and an epoch not greater than
// the recorded one returns a *StaleEpochError (ErrStaleEpoch), unless the
// record already is this seal (same epoch and writer), when Seal returns
// nil: retrying a seal whose reply was lost succeeds.
func (f *Fence) Seal(ctx context.Context, plugin, shard, writer string, epoch uint64) error {
	u, err := f.newUpdate(opSeal, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	u.next = func(current Manifest) (Manifest, error) { return current, nil }
	return f.runUpdate(ctx, u)
}
