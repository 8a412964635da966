package writefence

import (
	"context"
	"fmt"
)

// EpochSource is where a push's epoch comes from: the seam through which a
// control plane's lease epoch (a fencing token) reaches the fence. The fence
// does not care how an epoch is decided; it guarantees only what happens
// once a push arrives claiming one.
type EpochSource interface {
	// Epoch returns the epoch the caller currently holds for (plugin,
	// shard). It must be at least 1; an error means the caller holds no
	// epoch and must not push.
	Epoch(ctx context.Context, plugin, shard string) (uint64, error)
}

// StaticEpochSource is an EpochSource that returns the same epoch for every
// shard, for a writer handed one fencing token by its control plane. Zero is
// not an epoch and returns an error matching ErrInvalidArgument.
type StaticEpochSource uint64

// Epoch implements EpochSource.
func (s StaticEpochSource) Epoch(context.Context, string, string) (uint64, error) {
	if s == 0 {
		return 0, invalidArg("epoch", "StaticEpochSource is 0; epochs start at 1")
	}
	return uint64(s), nil
}

// PushFrom asks src for the epoch of (plugin, shard) and pushes payload at
// it, as Push does. It returns the epoch it used, so a caller can log what
// it claimed; an error from src is returned wrapped and nothing is written.
func (f *Fence) PushFrom(ctx context.Context, src EpochSource, plugin, shard, writer string, payload []byte) (uint64, error) {
	if src == nil {
		return 0, invalidArg("source", "EpochSource is nil")
	}
	epoch, err := src.Epoch(ctx, plugin, shard)
	if err != nil {
		return 0, fmt.Errorf("writefence: epoch source: %w", err)
	}
	return epoch, f.Push(ctx, plugin, shard, writer, epoch, payload)
}
