package writefence

import (
	"context"
	"reflect"
)

// EpochSource is where a push's epoch comes from: the seam through which a
// control plane's fencing token reaches the fence, which guarantees only what
// happens once a push arrives claiming one.
type EpochSource interface {
	// Epoch returns the epoch the caller currently holds for (plugin,
	// shard). It must be at least 1; an error means the caller holds no
	// epoch and must not push.
	Epoch(ctx context.Context, plugin, shard string) (uint64, error)
}

// StaticEpochSource is an EpochSource of one epoch for every shard, a
// fencing token its control plane handed the writer; zero is
// ErrInvalidArgument.
type StaticEpochSource uint64

// Epoch implements EpochSource.
func (s StaticEpochSource) Epoch(context.Context, string, string) (uint64, error) {
	if s == 0 {
		return 0, invalidArg("epoch", "StaticEpochSource is 0; epochs start at 1")
	}
	return uint64(s), nil
}

// PushFrom asks src for the epoch of (plugin, shard), pushes payload at it
// as Push does, and returns the epoch it used. An error from src writes
// nothing and is returned wrapped, "writefence: epoch source: " first.
func (f *Fence) PushFrom(ctx context.Context, src EpochSource, plugin, shard, writer string, payload []byte) (uint64, error) {
	if v := reflect.ValueOf(src); src == nil || v.Kind() == reflect.Pointer && v.IsNil() {
		return 0, invalidArg("source", "EpochSource is nil")
	}
	epoch, err := src.Epoch(ctx, plugin, shard)
	if err != nil {
		return 0, &prefixed{prefix: "writefence: epoch source: ", err: err}
	}
	return epoch, f.Push(ctx, plugin, shard, writer, epoch, payload)
}
