package writefence

import (
	"bytes"
	"context"
	"fmt"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// RecordInfo is what Inspect learned of a shard's record from one read.
type RecordInfo struct {
	Key      string    // the record's key
	Version  string    // the store's version token of exactly the bytes decoded
	Identity string    // the wire identity the record carries
	Epoch    uint64    // the recorded epoch
	Writer   string    // the writer of the record
	Payload  []byte    // the payload
	Blobs    []BlobRef // the blobs it references (see Commit)
	Since    uint64    // the epoch its writer's tenure began (see Commit); 0 in a record of no stream
	Stream   bool      // a stream's record (format version 3), as every later record of the shard is
}

// floor is the tenure floor Commit and Collect apply over the record (see
// record.TenureFloor): Since in a stream's record, the epoch in a plain one.
func (i RecordInfo) floor() uint64 {
	if i.Stream {
		return i.Since
	}
	return i.Epoch
}

// Inspect reads the record of (plugin, shard) once and describes it, with
// the version of exactly the bytes it decoded: what an operator looks at
// before settling. It is Latest with the detail an operator needs: the same
// brand check and the same errors, with as much of the description as the
// read allowed: on ErrCorrupt, Key and Version (the version Settle needs),
// and Identity, Epoch and Writer when the record's header still decodes
// (only a check after it failed, such as the payload checksum or the
// store's own check of damage in place); on ErrWire, the whole record
// decoded under the identity it carries.
func (f *Fence) Inspect(ctx context.Context, plugin, shard string) (RecordInfo, error) {
	key, err := f.key(plugin, shard)
	if err != nil {
		return RecordInfo{}, err
	}
	if err := f.checkBrand(ctx, false); err != nil {
		return RecordInfo{Key: key}, err
	}
	info := RecordInfo{Key: key}
	s, err := f.readKey(ctx, key, false)
	if err != nil {
		return info, fmt.Errorf("writefence: inspect %s: %w", esc(key), err)
	}
	st := decodeSnapshot(key, s)
	if !st.found {
		return info, fmt.Errorf("writefence: inspect %s: %w", esc(key), ErrNotFound)
	}
	info.Version = st.version
	if st.h.Epoch != 0 {
		// The header decoded, whatever check failed after it: its epoch
		// and writer are what Settle must not go below.
		info.Identity, info.Epoch, info.Writer = st.h.Identity, st.h.Epoch, st.h.Writer
	}
	if st.corrupt != nil {
		return info, st.corrupt
	}
	info.Payload, info.Blobs, info.Since = st.body.Payload, st.body.Refs, st.body.Since
	info.Stream = st.body.Stream
	return info, f.checkIdentity(key, st.h)
}

// Settlement is what Settle writes over a corrupt record, and what it
// asserts about it.
type Settlement struct {
	// Version is the version of the corrupt record to replace, as a
	// *CorruptError or Inspect reported it: the only version Settle
	// replaces. Required.
	Version string

	// Writer, Epoch and Payload are the fresh record's, validated as for
	// Push.
	Writer  string
	Epoch   uint64
	Payload []byte

	// Floor is the caller's assertion that no epoch above it was ever
	// granted for the shard; Epoch must be above it. It is required (at
	// least 1) when not even the corrupt record's header can be read, so
	// that the store holds no epoch to compare Epoch with; zero means
	// none is asserted.
	Floor uint64
}

// Settle replaces the corrupt record of (plugin, shard) with a fresh record
// of s.Payload at s.Epoch by s.Writer, in one write conditioned on exactly
// s.Version, the version found corrupt. It is the only way this package
// overwrites a record the other writes refuse, and it is meant for an
// operator who has looked at the record (Inspect).
//
// It refuses, writing nothing, unless the record is still corrupt at
// s.Version: an error matching ErrNotFound when there is no record,
// ErrConflict when the record has another version now (someone wrote
// since), and an *InvalidArgumentError when the record decodes (there is
// nothing to settle). It never lowers the recorded epoch:
//
//   - when the corrupt record's header still decodes (only a check after
//     it failed: the payload's checksum, or the store's own check of damage
//     in place), a header of another identity is refused with a *WireError
//     and an Epoch not above the header's with a *StaleEpochError;
//   - when not even the header can be read, s.Floor must be stated and
//     Epoch above it, else an *InvalidArgumentError;
//   - a settle that passed these checks is entered in the shard's settle
//     log (a reserved key, Prefix + "_settled/" + plugin + "/" + shard)
//     right before it writes the record, and Epoch must be above every
//     epoch entered there before, else a *StaleEpochError. Damaged bytes
//     can repeat (the same truncation twice has the same version on most
//     stores), so the log is what refuses an old settle run again over new
//     damage.
//
// Retrying a settle whose reply was lost returns nil once the record is
// exactly this settle. A retry that finds the settle entered in the log but
// the record still damaged is refused (a *StaleEpochError): the damage may
// be new, so settle again at a higher epoch. A settle log that fails to
// decode is refused with ErrCorrupt naming it; an operator who removes it
// with the store's own tools loses only that protection.
//
// Settle goes through the engine every write takes (the brand check, the
// probe verdict, the retries, the Observer with Op "settle log" and
// "settle").
func (f *Fence) Settle(ctx context.Context, plugin, shard string, s Settlement) error {
	if s.Version == "" {
		return invalidArg("version", "empty: the version of the corrupt record is required")
	}
	u, err := f.newUpdate(opSettle, plugin, shard, s.Writer, s.Epoch)
	if err != nil {
		return err
	}
	if err := f.checkBody(s.Payload, nil); err != nil {
		return err
	}
	logKey, err := keys.SettleLog(f.Prefix, plugin, shard)
	if err != nil {
		return keyErr(err)
	}
	st := &settle{f: f, key: u.key, logKey: logKey, s: s}
	_, err = f.run(ctx, &change{op: opSettle, key: u.key, writer: s.Writer, epoch: s.Epoch, branded: true,
		decide: func(snap *snapshot) ([][]byte, bool, error) { return st.decide(ctx, snap) }})
	f.forget(u.key)
	return err
}

// settle is one Settle: its log entry, then its record.
type settle struct {
	f      *Fence
	key    string
	logKey string
	s      Settlement

	// tried is set once this call wrote the settle's log entry, entered
	// once the write is known to have landed.
	tried, entered bool
}

// enter enters the settle in the log, through the engine, right before the
// record is written: only a settle that passed every check of the record
// is entered.
func (st *settle) enter(ctx context.Context) error {
	_, err := st.f.run(ctx, &change{op: opSettleLog, key: st.logKey, writer: st.s.Writer, epoch: st.s.Epoch, branded: true, decide: st.decideLog})
	if err == nil {
		st.entered = true
	}
	return err
}

// decideLog enters the settle in the log: a record of the settle's epoch
// and writer whose payload is the version it replaces.
func (st *settle) decideLog(s *snapshot) ([][]byte, bool, error) {
	entry := []byte(st.s.Version)
	if s.found {
		rec := decodeSnapshot(st.logKey, s)
		switch {
		case rec.corrupt != nil:
			return nil, false, rec.corrupt
		case rec.h.Identity != st.f.identity():
			return nil, false, st.f.checkIdentity(st.logKey, rec.h)
		case st.tried && rec.h.Epoch == st.s.Epoch && rec.h.Writer == st.s.Writer && bytes.Equal(rec.body.Payload, entry):
			return nil, true, nil // this call's write landed, its reply was lost
		case st.s.Epoch <= rec.h.Epoch:
			return nil, false, &StaleEpochError{Op: opSettle, Key: st.logKey, Epoch: st.s.Epoch, RecordedEpoch: rec.h.Epoch, RecordedWriter: rec.h.Writer}
		}
	}
	h := record.EncodeHeader(st.f.identity(), st.s.Writer, st.s.Epoch, uint64(len(entry)), record.CRC32C(entry))
	st.tried = true
	return [][]byte{h, entry}, false, nil
}

// decide applies Settle's rules to the record: it must still be corrupt at
// exactly the version the operator saw, and the settle must not lower an
// epoch the damage left readable. Once every check passed, it enters the
// settle in the log before the record is written.
func (st *settle) decide(ctx context.Context, s *snapshot) ([][]byte, bool, error) {
	rec := decodeSnapshot(st.key, s)
	h := rec.h
	switch {
	case !rec.found:
		return nil, false, fmt.Errorf("writefence: settle %s: %w", esc(st.key), ErrNotFound)
	case rec.corrupt == nil:
		if h.Identity == st.f.identity() && h.Epoch == st.s.Epoch && h.Writer == st.s.Writer && bytes.Equal(rec.body.Payload, st.s.Payload) && len(rec.body.Refs) == 0 {
			return nil, true, nil
		}
		return nil, false, invalidArg("version", "the record at %s decodes: nothing to settle", esc(st.key))
	case rec.version != st.s.Version:
		return nil, false, fmt.Errorf("writefence: settle %s: the corrupt record is at version %s, not %s: %w",
			esc(st.key), esc(rec.version), esc(st.s.Version), ErrConflict)
	case h.Epoch != 0 && h.Identity != st.f.identity():
		return nil, false, st.f.checkIdentity(st.key, h)
	case h.Epoch != 0 && st.s.Epoch <= h.Epoch:
		return nil, false, &StaleEpochError{Op: opSettle, Key: st.key, Epoch: st.s.Epoch, RecordedEpoch: h.Epoch, RecordedWriter: h.Writer}
	case h.Epoch == 0 && st.s.Floor == 0:
		return nil, false, invalidArg("floor", "not even the header of the corrupt record at %s can be read (%s), so the store holds no epoch to stay above: state the highest epoch ever granted for the shard", esc(st.key), rec.corrupt.Check)
	case st.s.Epoch <= st.s.Floor:
		return nil, false, invalidArg("epoch", "%d is not above the floor %d", st.s.Epoch, st.s.Floor)
	}
	if !st.entered {
		if err := st.enter(ctx); err != nil {
			return nil, false, err
		}
	}
	// A shard of blobs keeps its tenure floor rising: above the damaged
	// record's epoch when its header decodes. When it does not, the record
	// carries none; the settle's writer differs from the stream's writers,
	// so their next commit starts a tenure above the settle's epoch anyway.
	body := record.Body{Payload: st.s.Payload}
	if h.Version == record.StreamVersion {
		body.Stream, body.Since = true, since(st.s.Writer, h.Writer, h.Epoch, h.Since)
	}
	return record.Encode(st.f.identity(), st.s.Writer, st.s.Epoch, body, record.CRC32C(st.s.Payload)), false, nil
}
