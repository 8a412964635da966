package main

import (
	"context"

	"github.com/writefence/writefence"
)

// recordInfo is what one read of a shard's record shows.
type recordInfo struct {
	Key      string `json:"key"`
	Version  string `json:"version"`
	Epoch    uint64 `json:"epoch"`
	Writer   string `json:"writer"`
	Identity string `json:"identity"`
	Size     int    `json:"size"` // payload bytes
	payload  []byte
}

// inspect describes the record of (plugin, shard) with Fence.Inspect: one
// read, the version of exactly the bytes decoded, and as much as the read
// allowed alongside an ErrNotFound, ErrCorrupt or ErrWire.
func inspect(ctx context.Context, store writefence.ConditionalStore, prefix, identity, plugin, shard string) (recordInfo, error) {
	f := &writefence.Fence{Store: store, Prefix: prefix, Identity: identity}
	ri, err := f.Inspect(ctx, plugin, shard)
	return recordInfo{Key: ri.Key, Version: ri.Version, Epoch: ri.Epoch, Writer: ri.Writer,
		Identity: ri.Identity, Size: len(ri.Payload), payload: ri.Payload}, err
}
