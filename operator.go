package writefence

import (
	"bytes"
	"context"
	"fmt"
)

// RecordInfo is what Inspect learned of a shard's record from one read.
type RecordInfo struct {
	Key      string // the record's key
	Version  string // the store's version token of exactly the bytes decoded
	Identity string // the wire identity the record carries
	Epoch    uint64 // the recorded epoch
	Writer   string // the writer of the record
	Payload  []byte // the payload
}

// Inspect reads the record of (plugin, shard) once and describes it, with
// the version of exactly the bytes it decoded: what an operator looks at
// before settling. It is Latest with the detail an operator needs: the same
// brand check and the same errors, with as much of the
// description as the read allowed: on ErrCorrupt, Key and Version (the
// version Settle needs), and Identity, Epoch and Writer when the record's
// header still decodes (only a check after it, such as the payload checksum,
// failed); on ErrWire, the whole record decoded under the identity it
// carries.
func (f *Fence) Inspect(ctx context.Context, plugin, shard string) (RecordInfo, error) {
	key, err := f.key(plugin, shard)
	if err != nil {
		return RecordInfo{}, err
	}
	if err := f.checkBrand(ctx, false); err != nil {
		return RecordInfo{Key: key}, err
	}
	return f.inspect(ctx, key)
}

func (f *Fence) inspect(ctx context.Context, key string) (RecordInfo, error) {
	info := RecordInfo{Key: key}
	st, err := f.read(ctx, key, true)
	if err != nil {
		return info, err
	}
	if !st.found {
		return info, fmt.Errorf("writefence: latest %s: %w", esc(key), ErrNotFound)
	}
	info.Version = st.version
	if st.h.epoch != 0 {
		// The header decoded, whatever check failed after it: its epoch
		// and writer are what Settle must not go below.
		info.Identity, info.Epoch, info.Writer = st.h.identity, st.h.epoch, st.h.writer
	}
	if st.corrupt != nil {
		return info, st.corrupt
	}
	info.Payload = st.payload
	return info, f.checkIdentity(key, st.h)
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
// this or another identity: there is nothing to settle). It never lowers
// an epoch it can read: when the corrupt record's header still decodes
// (only its payload is damaged), an epoch not above the header's returns a
// *StaleEpochError (ErrStaleEpoch). When not even the header can be read,
// the store holds no epoch to compare with: choose an epoch above every
// epoch ever granted for the shard.
//
// Settle goes through Push's write loop, with its brand check, probe
// verdict and Observer (PushEvent.Op "settle"); arguments are validated as
// for Push. Retrying a settle whose reply was lost returns nil once the
// record is exactly this settle.
func (f *Fence) Settle(ctx context.Context, plugin, shard, corruptVersion, writer string, epoch uint64, payload []byte) error {
	if corruptVersion == "" {
		return invalidArg("corruptVersion", "empty")
	}
	w, err := f.prepare(opSettle, plugin, shard, writer, epoch, payload)
	if err != nil {
		return err
	}
	w.corruptVersion = corruptVersion
	return f.write(ctx, w)
}

// decideSettle is decide for a settle: the record must still be corrupt at
// exactly the version the operator saw, and the epoch above any header
// epoch the damage left readable.
func (f *Fence) decideSettle(w *recordWrite, st recorded) (done bool, err error) {
	switch {
	case !st.found:
		return false, fmt.Errorf("writefence: settle %s: %w", esc(w.key), ErrNotFound)
	case st.corrupt == nil:
		if st.h.identity == f.identity() && w.mayBeReplay(st.h) && bytes.Equal(st.payload, w.payload) {
			return true, nil
		}
		return false, invalidArg("corruptVersion", "the record at %s decodes: nothing to settle", esc(w.key))
	case st.version != w.corruptVersion:
		return false, fmt.Errorf("writefence: settle %s: the corrupt record is at version %s, not %s: %w",
			esc(w.key), esc(st.version), esc(w.corruptVersion), ErrConflict)
	case st.h.epoch != 0 && w.epoch <= st.h.epoch:
		return false, staleEpoch(w, st.h)
	}
	return false, nil
}
