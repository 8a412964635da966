package writefence

import (
	"context"
	"errors"
	"fmt"
)

// RecordInfo is what Inspect learned of a shard's record from one read.
type RecordInfo struct {
	Key         string // the record's key
	Version     string // the store's version token of exactly the bytes decoded
	Identity    string // the wire identity the record carries
	Epoch       uint64 // the recorded epoch
	Writer      string // the writer of the record
	PayloadSize int    // bytes of payload
	Payload     []byte // the payload
}

// Inspect reads the record of (plugin, shard) once and describes it, with
// the version of exactly the bytes it decoded: what an operator looks at
// before settling. Errors are those of Latest, with as much of the
// description as the read allowed: on ErrCorrupt, Key and Version (the
// version Settle needs), and Identity, Epoch and Writer when the record's
// header still decodes (only a check after it, such as the payload digest,
// failed); on ErrWire, the whole record decoded under the identity it
// carries.
func (f *Fence) Inspect(ctx context.Context, plugin, shard string) (RecordInfo, error) {
	key, err := f.key(plugin, shard)
	if err != nil {
		return RecordInfo{}, err
	}
	return f.inspect(ctx, key)
}

func (f *Fence) inspect(ctx context.Context, key string) (RecordInfo, error) {
	info := RecordInfo{Key: key}
	data, version, err := f.Store.Get(ctx, key)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			return info, fmt.Errorf("writefence: latest %s: %w", Escape(key), ErrNotFound)
		}
		return info, readError(key, err)
	}
	info.Version = version
	h, payload, check := decodeRecord(data)
	if h.epoch != 0 {
		// The header decoded, whatever check failed after it: its epoch
		// and writer are what Settle must not go below.
		info.Identity, info.Epoch, info.Writer = h.identity, h.epoch, h.writer
	}
	if check != "" {
		return info, &CorruptError{Key: key, Version: version, Check: check}
	}
	info.PayloadSize, info.Payload = len(payload), payload
	return info, f.checkIdentity(key, h)
}

// Settle replaces the corrupt record of (plugin, shard) with a fresh record
// of payload at epoch by writer, in one write conditioned on exactly
// corruptVersion, the version a CorruptError (or Inspect) reported. It is
// the only way this package overwrites a record Push refuses, and it is
// meant for an operator who has looked at the record.
//
// It refuses, writing nothing, unless the record at the key is still
// corrupt at corruptVersion: an error matching ErrNotFound when there is no
// record, ErrConflict when the record has another version now (someone
// wrote since), and an *InvalidArgumentError when the record decodes (of
// this or another identity: there is nothing to settle). Arguments are
// validated as for Push.
func (f *Fence) Settle(ctx context.Context, plugin, shard, corruptVersion, writer string, epoch uint64, payload []byte) error {
	if corruptVersion == "" {
		return invalidArg("corruptVersion", "empty")
	}
	p, err := f.prepare(plugin, shard, writer, epoch, payload)
	if err != nil {
		return err
	}
	_, err = f.inspect(ctx, p.key)
	var corrupt *CorruptError
	switch {
	case errors.As(err, &corrupt):
		if corrupt.Version != corruptVersion {
			return fmt.Errorf("writefence: settle %s: the corrupt record is at version %s, not %s: %w",
				Escape(p.key), Escape(corrupt.Version), Escape(corruptVersion), ErrConflict)
		}
	case err == nil || errors.Is(err, ErrWire):
		return invalidArg("corruptVersion", "the record at %s decodes: nothing to settle", Escape(p.key))
	default:
		return err
	}
	if _, err := f.Store.PutIfVersion(ctx, p.key, p.record, corruptVersion); err != nil {
		return fmt.Errorf("writefence: settle %s: %w", Escape(p.key), err)
	}
	f.forget(p.key)
	return nil
}
