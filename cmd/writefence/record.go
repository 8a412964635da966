package main

import (
	"context"
	"errors"
	"fmt"

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

// inspect reads the record of (plugin, shard) once and decodes it with the
// library's own decoder, through a Fence over a snapshot of that one read,
// so the version shown is the version of exactly the bytes decoded. It
// returns what it could learn and, like Fence.Latest, an error matching
// ErrNotFound, ErrCorrupt (a *CorruptError naming the check and the
// version) or ErrWire. A record of another identity is decoded anyway,
// under the identity it names, and returned in full with its *WireError.
func inspect(ctx context.Context, store writefence.ConditionalStore, prefix, identity, plugin, shard string) (recordInfo, error) {
	key, err := writefence.ShardKey(prefix, plugin, shard)
	if err != nil {
		return recordInfo{}, err
	}
	info := recordInfo{Key: key}
	data, version, err := store.Get(ctx, key)
	if errors.Is(err, writefence.ErrNotFound) {
		return info, fmt.Errorf("writefence: latest %s: %w", writefence.Escape(key), writefence.ErrNotFound)
	}
	if err != nil {
		return info, fmt.Errorf("writefence: read %s: %w", writefence.Escape(key), err)
	}
	info.Version = version
	snap := &snapshot{key: key, data: data, version: version}
	decode := func(id string) error {
		f := &writefence.Fence{Store: snap, Prefix: prefix, Identity: id}
		epoch, writer, payload, err := f.Latest(ctx, plugin, shard)
		if err == nil {
			info.Epoch, info.Writer, info.payload, info.Size = epoch, writer, payload, len(payload)
			info.Identity = id
			if id == "" {
				info.Identity = writefence.DefaultIdentity
			}
		}
		return err
	}
	err = decode(identity)
	var wire *writefence.WireError
	if errors.As(err, &wire) && !wire.Absent && wire.Found != "" {
		if decode(wire.Found) != nil {
			return info, err
		}
	}
	return info, err
}

// snapshot is a read-only ConditionalStore holding one object as one Get
// returned it.
type snapshot struct {
	key, version string
	data         []byte
}

var errReadOnly = errors.New("writefence: snapshot is read-only")

func (s *snapshot) Get(_ context.Context, key string) ([]byte, string, error) {
	if key != s.key {
		return nil, "", writefence.ErrNotFound
	}
	return s.data, s.version, nil
}

func (s *snapshot) PutIfVersion(context.Context, string, []byte, string) (string, error) {
	return "", errReadOnly
}
