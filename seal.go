package writefence

import "context"

// Seal raises the recorded epoch of (plugin, shard) to epoch without
// changing its payload, so that every write at epoch or below is refused
// from then on: a new writer's first act, which fences a deposed writer at
// once rather than at the new writer's first push.
//
// Seal is Update with a function that returns the recorded payload as it
// is: the new record holds the Fence's identity, this epoch and writer, and
// the recorded payload, blob references and collection horizon byte for
// byte, and starts a new tenure at epoch, fencing even a previous
// incarnation of the same writer name off the shard's blobs (promise 21). A
// shard never pushed is sealed with a plain record of an empty payload,
// since leaving it absent would let a deposed writer create it; Latest then
// returns that empty payload. A record whose payload and references exceed
// the Fence's payload limit cannot be sealed (ErrInvalidArgument). A record
// that already is this seal (same epoch and writer, and of a stream's
// record the tenure beginning at epoch) returns nil, so a retried seal
// succeeds. Under KeepFloor a seal enters its epoch in the shard's floor
// once its record landed.
func (f *Fence) Seal(ctx context.Context, plugin, shard, writer string, epoch uint64) error {
	u, err := f.newUpdate(opSeal, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	u.next = func(current Manifest) (Manifest, error) { return current, nil }
	u.newTenure = true
	return f.runUpdate(ctx, u)
}
