package writefence

import "context"

// Seal raises the recorded epoch of (plugin, shard) to epoch, so that
// every write at epoch or below is refused: a new writer's first act. It
// is Update with next returning its argument, keeping the payload,
// references and horizon (promise 22) and starting a tenure at epoch
// (21); a shard never pushed gets a plain record of an empty payload, as
// an absent one would let a deposed writer create it. A record already
// this seal returns nil; one over the payload limit, ErrInvalidArgument.
func (f *Fence) Seal(ctx context.Context, plugin, shard, writer string, epoch uint64) error {
	return f.seal(ctx, plugin, shard, writer, epoch, nil)
}

// seal is Seal, whose stale refusals that spares names depose nobody (a
// Hold's seal passed by its own Lease's epoch: promise 18).
func (f *Fence) seal(ctx context.Context, plugin, shard, writer string, epoch uint64, spares func(*StaleEpochError) bool) error {
	u, err := f.newUpdate(opSeal, plugin, shard, writer, epoch)
	if err != nil {
		return err
	}
	u.w = updateWrite{fn: func(current Manifest) (Manifest, error) { return current, nil }}
	u.newTenure, u.spares = true, spares
	return f.runUpdate(ctx, u)
}
