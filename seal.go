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
// this epoch and writer, and the recorded payload, blob references and
// collection horizon byte for byte. A stream's record stays a stream's,
// and a seal starts a new tenure at its own epoch (RecordInfo.Since
// becomes epoch), whoever wrote the record before: no blob written at an
// epoch below the seal's can be newly committed after it, so a previous
// incarnation of the same writer name (a restarted process, an earlier
// lease term of the same holder) is fenced off the shard's blobs as well
// as its record. A plain record stays plain. A push landing in between
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
// record already is this seal (same epoch and writer, and of a stream's
// record the tenure beginning at this epoch), when Seal returns nil:
// retrying a seal whose reply was lost succeeds. Over a record absent or
// below what the Fence saw of it, or below the shard's floor, a seal is
// refused as every write is (ErrEpochRegressed). Under KeepFloor a seal
// enters its epoch in the shard's floor once its record landed (the
// Observer sees Op "floor"), and is with Settle the only write that
// creates a shard's first record.
func (f *Fence) Seal(ctx context.Context, plugin, shard, writer string, epoch uint64) error {
	u, err := f.newUpdate(opSeal, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	u.w = updateWrite{fn: func(current Manifest) (Manifest, error) { return current, nil }}
	u.newTenure = true
	return f.runUpdate(ctx, u)
}
