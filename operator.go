package writefence

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/record"
)

// Settlement is what Settle writes, and what the operator asserts.
type Settlement struct {
	// Version is the version to replace, as a *CorruptError or Inspect
	// reported it; required, except with Lost for a record that is gone.
	Version string

	// Writer, Epoch and Payload are the new record's, validated as for
	// Push.
	Writer  string
	Epoch   uint64
	Payload []byte

	// Floor is the operator's assertion that no epoch above it was ever
	// granted for the shard; zero asserts none.
	Floor uint64

	// Lost settles a record lost or set back rather than damaged.
	Lost bool

	// DropBlobs settles a stream's record without its blob references,
	// making every blob of the shard garbage for Collect. Without it the
	// references of the record replaced are kept when they decode, and
	// Settle refuses when they may exist but cannot be read (promise 9).
	DropBlobs bool
}

// Settle replaces the corrupt record of (plugin, shard) with a record of
// s.Payload at s.Epoch by s.Writer, in one write conditioned on exactly
// s.Version: the only write over a record the others refuse, for an
// operator who has looked at it (Inspect). It refuses, writing nothing:
//
//   - ErrNotFound when there is no record, ErrConflict when it has another
//     version now (changed after the settle log's entry, the entry stays),
//     an *InvalidArgumentError when it decodes, or with s.Lost is damaged;
//   - a *WireError for a damaged record whose header decodes to another
//     identity, and a *StaleEpochError for an Epoch not above that header's
//     epoch, or not above every epoch in the shard's settle log (Prefix +
//     "_settled/" + plugin + "/" + shard, written right before the record, so
//     that an old settle run again over new damage is refused), or under
//     KeepFloor not above the shard's floor;
//   - an *InvalidArgumentError for an Epoch not above s.Floor, which is
//     required when the header does not decode and with s.Lost;
//   - an *EpochRegressedError for an Epoch not above what the Fence saw of
//     the record.
//
// So it never lowers the recorded epoch (promise 8). With s.Lost it settles
// a record lost or set back (ErrEpochRegressed): absent (s.Version empty),
// or sound at exactly s.Version, and Epoch must also be above the record
// found. A retry whose reply was lost returns nil once the record is this
// settle; one that finds the settle logged but the record still damaged is
// refused (*StaleEpochError), as the damage may be new. A settle log that
// does not decode is ErrCorrupt. Under KeepFloor a settle raises the floor.
func (f *Fence) Settle(ctx context.Context, plugin, shard string, s Settlement) error {
	e := f.engine()
	switch {
	case s.Version == "" && !s.Lost:
		return invalidArg("version", "empty: the version of the corrupt record is required")
	case s.Lost && s.Floor == 0:
		return invalidArg("floor", "required with Lost: the highest epoch ever granted for the shard")
	case s.Lost && s.Epoch <= s.Floor:
		return invalidArg("epoch", "%d is not above the floor %d", s.Epoch, s.Floor)
	}
	u, err := f.newUpdate(opSettle, plugin, shard, s.Writer, s.Epoch)
	if err != nil {
		return err
	}
	if err := e.checkBody(s.Payload, nil); err != nil {
		return err
	}
	logKey, err := keys.SettleLog(f.Prefix, plugin, shard)
	if err != nil {
		return keyErr(err)
	}
	st := &settleOp{f: f, e: e, key: u.key, logKey: logKey, s: s}
	if f.KeepFloor {
		if st.floorKey, err = e.floorKey(plugin, shard); err != nil {
			return err
		}
	}
	defer f.cache.forget(u.key)
	// The guards, the shard's blobs and the record as it stands first: a
	// settle they refuse enters nothing in the log, writes nothing, and
	// the Observer sees it refused as a settle. Then two runs of the
	// engine: the log entry, then the record, which checks the record
	// again; then, under KeepFloor, the floor.
	c := &change{op: opSettle, key: u.key, writer: s.Writer, epoch: s.Epoch, branded: true, decide: st.decide}
	start := time.Now()
	if err := e.guarded(ctx, c); err != nil {
		return err
	}
	if err := st.blobs(ctx, plugin, shard); err != nil {
		e.observe(ctx, c, start, false, 0, err)
		return err
	}
	c.before = e.sightBefore(u.key, st.floorKey, &st.floor, &st.sight)
	if f.KeepFloor {
		if st.floor, err = retried(ctx, e, func() (floorState, error) { return e.readFloor(ctx, st.floorKey) }); err != nil {
			err = &prefixed{prefix: fmt.Sprintf("writefence: settle %s: read the floor: ", esc(u.key)), err: err}
			e.observe(ctx, c, start, false, 1, err)
			return err
		}
	}
	st.sight = e.sightOf(u.key, st.floor)
	snap, err := retried(ctx, e, func() (*snapshot, error) { return e.readKey(ctx, u.key, false) })
	if err != nil {
		err = fmt.Errorf("writefence: settle %s: read: %w", esc(u.key), err)
		e.observe(ctx, c, start, false, 1, err)
		return err
	}
	if _, done, err := st.decide(snap); err != nil || done {
		e.observe(ctx, c, start, false, 1, err)
		if err == nil {
			return st.landed(ctx)
		}
		return err
	}
	if _, err := e.run(ctx, &change{op: opSettleLog, key: logKey, writer: s.Writer, epoch: s.Epoch, branded: true, decide: st.decideLog}); err != nil {
		e.observe(ctx, c, start, false, 0, err) // the settle ends with its log's refusal
		return err
	}
	if _, err = e.run(ctx, c); err != nil {
		return err
	}
	return st.landed(ctx)
}

// landed notes a settle whose record landed: the Fence saw its epoch, and
// under KeepFloor the shard's floor rises to it.
func (st *settleOp) landed(ctx context.Context) error {
	st.f.cache.saw(st.key, st.s.Epoch, st.s.Writer)
	if st.floorKey == "" {
		return nil
	}
	return st.e.enterFloor(ctx, st.floorKey, st.s.Writer, st.s.Epoch)
}

// settleOp is one Settle: its log entry, then its record.
type settleOp struct {
	f      *Fence
	e      *engine // f's, for this call
	key    string
	logKey string
	s      Settlement

	// tried is set once this call wrote the settle's log entry: an entry
	// found equal to it is then this call's, whose reply was lost.
	tried bool

	// hasBlobs: the shard's blob space holds a blob, as far as the
	// Fence's blob store tells (a Fence with none sees none). horizon:
	// with DropBlobs, the blob store's time, which the settled record
	// carries as its collection horizon.
	hasBlobs bool
	horizon  int64

	// floorKey is the shard's floor under KeepFloor ("" otherwise), and
	// floor what the last read of it found.
	floorKey string
	floor    floorState

	// found is what the last read of the record found, and sight what
	// was known of it before that read was sent.
	found decodedRecord
	sight sight
}

// blobs learns what a settle needs of the shard's blobs before it reads
// the record: with DropBlobs the blob store's time, else whether the
// shard has any blob at all. A Fence with no blob store has none.
func (st *settleOp) blobs(ctx context.Context, plugin, shard string) error {
	bs, err := st.f.blobs()
	if err != nil {
		return nil
	}
	if st.s.DropBlobs {
		// The clock is a blob the store creates: under BrandVerifyAlways
		// the brand is read first, as before any write.
		if st.e.brandEveryWrite() {
			if err := st.e.verifyBrandRetried(ctx); err != nil {
				return err
			}
		}
		now, err := st.f.blobClock(ctx, bs)
		st.horizon = now.UnixNano()
		return err
	}
	space, err := keys.Blobs(st.f.Prefix, plugin, shard)
	if err != nil {
		return keyErr(err)
	}
	errFound := errors.New("found")
	err = retryList(ctx, st.e, errFound, func() error { return bs.ListBlobs(ctx, space, func(BlobInfo) error { return errFound }) })
	switch {
	case errors.Is(err, errFound):
		st.hasBlobs = true
	case err != nil && !onlyDamage(err):
		return fmt.Errorf("writefence: settle: list the blobs of %s: %w", esc(space), err)
	}
	return nil
}

// aboveFloor refuses a settle whose epoch is not above the shard's floor
// (KeepFloor), with a *StaleEpochError naming the floor's key.
func (st *settleOp) aboveFloor() error {
	if st.floor.present && st.s.Epoch <= st.floor.epoch {
		return &StaleEpochError{Op: opSettle, Key: st.floorKey, Epoch: st.s.Epoch, RecordedEpoch: st.floor.epoch, RecordedWriter: st.floor.writer}
	}
	return nil
}

// aboveSeen refuses a settle whose epoch is not above every epoch the
// Fence saw of the record, with an *EpochRegressedError naming what the
// last read of the record found: a settle never lands below it. A settle
// of damage meets it after its log's check, which names an earlier
// settle as stale.
func (st *settleOp) aboveSeen() error {
	if seen, by := st.f.cache.seen(st.key); st.s.Epoch <= seen {
		return &EpochRegressedError{Op: opSettle, Key: st.key, Epoch: st.s.Epoch, Seen: seen, SeenWriter: by,
			Absent: !st.found.found, Found: st.found.h.Epoch, FoundWriter: st.found.h.Writer}
	}
	return nil
}

// decideLost applies Settle's rules to a record lost or set back
// (Settlement.Lost): it must be absent or sound at exactly the version
// the operator saw, and the settle must land above it, above the floor,
// and above what the Fence saw.
func (st *settleOp) decideLost(rec decodedRecord) ([][]byte, bool, error) {
	h := rec.h
	switch {
	case rec.corrupt != nil:
		return nil, false, invalidArg("lost", "the record at %s is damaged (%s): settle it without Lost, at the version reported", esc(st.key), rec.corrupt.Check)
	case !rec.found && st.s.Version != "":
		return nil, false, fmt.Errorf("writefence: settle %s: no record, not version %s: %w", esc(st.key), esc(st.s.Version), ErrConflict)
	case rec.found && rec.version != st.s.Version:
		want := "none"
		if st.s.Version != "" {
			want = esc(st.s.Version)
		}
		return nil, false, fmt.Errorf("writefence: settle %s: the record is at version %s, not %s: %w", esc(st.key), esc(rec.version), want, ErrConflict)
	case rec.found && h.Identity != st.e.wireID():
		return nil, false, st.e.checkIdentity(st.key, h)
	case rec.found && st.s.Epoch <= h.Epoch:
		return nil, false, &StaleEpochError{Op: opSettle, Key: st.key, Epoch: st.s.Epoch, RecordedEpoch: h.Epoch, RecordedWriter: h.Writer}
	}
	if err := st.aboveFloor(); err != nil {
		return nil, false, err
	}
	if err := st.aboveSeen(); err != nil {
		return nil, false, err
	}
	if !rec.found && st.hasBlobs && !st.s.DropBlobs {
		return nil, false, invalidArg("blobs", "there is no record at %s and the shard has blobs, which the lost record may have referenced: set DropBlobs (writefence settle -drop-blobs) to settle without them", esc(st.key))
	}
	body := record.Body{Payload: st.s.Payload}
	switch {
	case st.s.DropBlobs && (h.Stream() || st.horizon != 0):
		body.Stream, body.Since, body.Horizon = true, st.s.Epoch, max(h.Horizon, st.horizon)
	case rec.found && h.Stream():
		body.Stream, body.Since, body.Horizon, body.Refs = true, st.s.Epoch, h.Horizon, rec.body.Refs
	}
	if err := st.e.checkBody(body.Payload, body.Refs); err != nil {
		return nil, false, err
	}
	return record.Encode(st.e.wireID(), st.s.Writer, st.s.Epoch, body, record.CRC32C(st.s.Payload)), false, nil
}

// decideLog enters the settle in the log: a record of the settle's epoch
// and writer whose payload is the version it replaces.
func (st *settleOp) decideLog(s *snapshot) ([][]byte, bool, error) {
	entry := []byte(st.s.Version)
	if s.found {
		rec := decodeSnapshot(st.logKey, s)
		switch {
		case rec.corrupt != nil:
			return nil, false, rec.corrupt
		case rec.h.Identity != st.e.wireID():
			return nil, false, st.e.checkIdentity(st.logKey, rec.h)
		case st.tried && rec.h.Epoch == st.s.Epoch && rec.h.Writer == st.s.Writer && bytes.Equal(rec.body.Payload, entry):
			return nil, true, nil // this call's write landed, its reply was lost
		case st.s.Epoch <= rec.h.Epoch:
			return nil, false, &StaleEpochError{Op: opSettle, Key: st.logKey, Epoch: st.s.Epoch, RecordedEpoch: rec.h.Epoch, RecordedWriter: rec.h.Writer}
		}
	}
	if err := st.aboveSeen(); err != nil {
		return nil, false, err
	}
	h := record.EncodeHeader(st.e.wireID(), st.s.Writer, st.s.Epoch, uint64(len(entry)), record.CRC32C(entry))
	st.tried = true
	return [][]byte{h, entry}, false, nil
}

// decide applies Settle's rules to the record: it must still be corrupt at
// exactly the version the operator saw, the settle must not lower an
// epoch the damage left readable, and it must not drop references it
// cannot read unless told to.
func (st *settleOp) decide(s *snapshot) ([][]byte, bool, error) {
	rec := decodeSnapshot(st.key, s)
	st.e.sawRecord(st.key, rec)
	st.found = rec
	h := rec.h
	if rec.corrupt == nil && rec.found && h.Identity == st.e.wireID() && h.Epoch == st.s.Epoch && h.Writer == st.s.Writer && bytes.Equal(rec.body.Payload, st.s.Payload) {
		// This settle landed, unless the record went back to it below
		// what was seen of it since.
		if err := regression(opSettle, st.key, st.s.Epoch, rec, st.sight); err != nil {
			return nil, false, err
		}
		return nil, true, nil
	}
	if st.s.Lost {
		return st.decideLost(rec)
	}
	switch {
	case !rec.found:
		return nil, false, fmt.Errorf("writefence: settle %s: %w", esc(st.key), ErrNotFound)
	case rec.corrupt == nil:
		return nil, false, invalidArg("version", "the record at %s decodes: nothing to settle (a record lost or set back is settled with Lost)", esc(st.key))
	case rec.version != st.s.Version:
		return nil, false, fmt.Errorf("writefence: settle %s: the corrupt record is at version %s, not %s: %w",
			esc(st.key), esc(rec.version), esc(st.s.Version), ErrConflict)
	case h.Epoch != 0 && h.Identity != st.e.wireID():
		return nil, false, st.e.checkIdentity(st.key, h)
	case h.Epoch != 0 && st.s.Epoch <= h.Epoch:
		return nil, false, &StaleEpochError{Op: opSettle, Key: st.key, Epoch: st.s.Epoch, RecordedEpoch: h.Epoch, RecordedWriter: h.Writer}
	case h.Epoch == 0 && st.s.Floor == 0:
		return nil, false, invalidArg("floor", "not even the header of the corrupt record at %s can be read (%s), so the store holds no epoch to stay above: state the highest epoch ever granted for the shard", esc(st.key), rec.corrupt.Check)
	case st.s.Epoch <= st.s.Floor:
		return nil, false, invalidArg("epoch", "%d is not above the floor %d", st.s.Epoch, st.s.Floor)
	}
	if err := st.aboveFloor(); err != nil {
		return nil, false, err
	}
	switch {
	case st.s.DropBlobs:
	case h.Epoch != 0 && h.Stream() && !rec.salvagedKnown:
		return nil, false, invalidArg("blobs", "the references of the corrupt record at %s do not decode (%s): settling would drop every blob it references; set DropBlobs (writefence settle -drop-blobs) to settle without them", esc(st.key), rec.corrupt.Check)
	case h.Epoch == 0 && st.hasBlobs:
		return nil, false, invalidArg("blobs", "not even the header of the corrupt record at %s can be read (%s) and the shard has blobs, which it may reference: set DropBlobs (writefence settle -drop-blobs) to settle without them", esc(st.key), rec.corrupt.Check)
	}
	// A settle starts a tenure at its own epoch, as a seal does: no blob
	// written before it can be newly committed after it. A stream's record
	// stays one, with its references and horizon unless dropped.
	body := record.Body{Payload: st.s.Payload}
	switch {
	case st.s.DropBlobs && (h.Stream() || st.horizon != 0):
		body.Stream, body.Since, body.Horizon = true, st.s.Epoch, max(h.Horizon, st.horizon)
	case h.Stream():
		body.Stream, body.Since, body.Horizon, body.Refs = true, st.s.Epoch, h.Horizon, rec.salvaged
	}
	if err := st.e.checkBody(body.Payload, body.Refs); err != nil {
		return nil, false, err
	}
	return record.Encode(st.e.wireID(), st.s.Writer, st.s.Epoch, body, record.CRC32C(st.s.Payload)), false, nil
}
