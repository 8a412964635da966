package writefence

import (
	"context"
	"fmt"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// The floor survives the record. The record is how the store remembers a
// shard's floor, the epoch below which no write lands; a record deleted or
// set back (a lifecycle rule, a TTL, eviction, an operator's delete, a
// restore from backup, a failover to a replica that lacked it) would make
// the shard look new, or older, to a writer. Two things keep that from
// being silent:
//
//   - a Fence remembers the highest epoch it wrote or read of each record
//     (beside its version cache, bounded as it is), and refuses to write a
//     record it finds absent or below that epoch (ErrEpochRegressed);
//   - under Fence.KeepFloor the store keeps each shard's floor in a key of
//     its own, apart from the record, which every write checks: so a
//     Fence that never saw the shard refuses too.
//
// The way out is the operator's: Settle with Settlement.Lost writes a
// fresh record above the floor the operator asserts, for every Fence; and
// Fence.Forget drops what one Fence remembers of a shard.

// floorState is what a read of a shard's floor key found.
type floorState struct {
	present bool
	epoch   uint64
	writer  string
}

// sawRecord notes that the fence read the record st at key: the highest
// epoch seen rises to its epoch when its header decodes under the Fence's
// identity.
func (e *engine) sawRecord(key string, st decodedRecord) {
	if st.found && st.h.Epoch != 0 && st.h.Identity == e.wireID() {
		e.cache.saw(key, st.h.Epoch, st.h.Writer)
	}
}

// sight is the highest epoch known of a record before a read of it was
// sent, and its writer: what the Fence saw of it, or the shard's floor
// (under KeepFloor, read before the record). A read of the record must
// find it at or above: only what was known before the read was sent
// counts, as a write of this Fence landing while the read is under way
// is no loss.
type sight struct {
	epoch  uint64
	writer string
	floor  bool // the epoch is the floor's
}

// sightOf is the sight of the record at key now, with the floor fl read.
// Take it right before reading the record.
func (e *engine) sightOf(key string, fl floorState) sight {
	epoch, by := e.cache.seen(key)
	if fl.present && fl.epoch > epoch {
		return sight{epoch: fl.epoch, writer: fl.writer, floor: true}
	}
	return sight{epoch: epoch, writer: by}
}

// regression refuses, with an *EpochRegressedError, a call of op at epoch
// whose read finds the record at key absent or below what was known of it
// before the read was sent (seen).
func regression(op, key string, epoch uint64, st decodedRecord, seen sight) error {
	switch {
	case seen.epoch == 0:
		return nil
	case !st.found:
		return &EpochRegressedError{Op: op, Key: key, Epoch: epoch, Seen: seen.epoch, SeenWriter: seen.writer, Floor: seen.floor, Absent: true}
	case st.h.Epoch < seen.epoch:
		return &EpochRegressedError{Op: op, Key: key, Epoch: epoch, Seen: seen.epoch, SeenWriter: seen.writer, Floor: seen.floor,
			Found: st.h.Epoch, FoundWriter: st.h.Writer}
	}
	return nil
}

// floorKey returns the key of the floor of (plugin, shard).
func (e *engine) floorKey(plugin, shard string) (string, error) {
	k, err := keys.Floor(e.Prefix, plugin, shard)
	return k, keyErr(err)
}

// readFloor reads the floor at key: absent, or the epoch and writer of the
// last seal or settle entered in it. A failure to read is a readFailure;
// damage is a *CorruptError naming the key, and a floor of another
// identity a *WireError.
func (e *engine) readFloor(ctx context.Context, key string) (floorState, error) {
	s, err := e.readKey(ctx, key, false)
	if err != nil {
		return floorState{}, readFailure{err}
	}
	st := decodeSnapshot(key, s)
	switch {
	case !st.found:
		return floorState{}, nil
	case st.corrupt != nil:
		return floorState{}, st.corrupt
	}
	if err := e.checkIdentity(key, st.h); err != nil {
		return floorState{}, err
	}
	return floorState{present: true, epoch: st.h.Epoch, writer: st.h.Writer}, nil
}

// sightBefore returns a change's before for the record at key: at the
// start of every attempt it reads the floor at floorKey (none when empty)
// into *fl, then takes the sight of the record into *seen.
func (e *engine) sightBefore(key, floorKey string, fl *floorState, seen *sight) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		var got floorState
		if floorKey != "" {
			var err error
			if got, err = e.readFloor(ctx, floorKey); err != nil {
				return err
			}
		}
		*fl, *seen = got, e.sightOf(key, got)
		return nil
	}
}

// enterFloor raises the floor at key to epoch, entered by writer: a
// record of that epoch and writer, with no payload, written through the
// engine (Op "floor") once the seal or settle of that epoch landed. A
// floor at or above epoch is left as it is. Its error, but for ctx's,
// says that the record landed: a refusal of the floor's write refuses
// nothing the call wrote before (promise 3).
func (e *engine) enterFloor(ctx context.Context, key, writer string, epoch uint64) error {
	_, err := e.run(ctx, &change{op: opFloor, key: key, writer: writer, epoch: epoch, branded: true, decide: func(s *snapshot) ([][]byte, bool, error) {
		st := decodeSnapshot(key, s)
		if st.found {
			switch {
			case st.corrupt != nil:
				return nil, false, st.corrupt
			case st.h.Identity != e.wireID():
				return nil, false, e.checkIdentity(key, st.h)
			case st.h.Epoch >= epoch:
				return nil, true, nil
			}
		}
		return [][]byte{record.EncodeHeader(e.wireID(), writer, epoch, 0, record.CRC32C(nil))}, false, nil
	}})
	if err == nil || ctx.Err() != nil && isContextErr(err) {
		return err
	}
	return &prefixed{prefix: fmt.Sprintf("writefence: the record landed at epoch %d, but the floor was not raised to it: ", epoch), err: err}
}
