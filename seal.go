package writefence

import "context"

// Seal raises the recorded epoch of (plugin, shard) to epoch without
// changing its payload, so that from now on every write at epoch or below
// is refused: a new writer's first act, which fences a deposed writer at
// once rather than at the new writer's first push.
//
// Seal is Update with a function that returns the recorded payload as it
// is. It reads the whole record and writes, in one write conditioned on
// the version it read, a new record in its place: the Fence's identity,
// this epoch and writer, and the recorded payload and blob references byte
// for byte. A stream's record stays a stream's, and when writer is not the
// recorded writer its tenure floor becomes the recorded epoch plus one (see
// RecordInfo.Since); a plain record stays plain. A push landing in between
// makes the write conflict, and Seal decides again on a fresh read. A
// shard never pushed is sealed with a plain record of an empty payload and
// no blob references: leaving it absent would let a deposed writer create
// it. Latest then returns that empty payload, not ErrNotFound. A recorded
// payload and references over the Fence's payload limit cannot be sealed
// (ErrInvalidArgument).
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
