package writefence

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/writefence/writefence/internal/record"
)

// The decision of a write of a shard's record: what to write, given what
// one read found. The rules every such write shares (identity, epoch,
// regression, the tenure floor, the size limit, a write found landed) are
// recordUpdate.decide's, once; what one kind of write decides on its own
// is its recordWrite, built by Push, Update, Seal or Commit. A decision
// reads only its arguments: it keeps nothing from one attempt to the
// next (the engine hands it the bytes the call sent before, snapshot.sent,
// and ours tells when the record read is those).

// A recordWrite is what one kind of write of a record decides on its own.
type recordWrite interface {
	// blind reports whether the write needs nothing of the recorded
	// payload: it may decide on the record's head, or on the version the
	// Fence remembers without reading.
	blind() bool
	// mayBe reports whether a record whose header h names this write's
	// epoch and writer may be this write, before its body is read.
	mayBe(h record.Header) bool
	// next returns the body to record over current, the recorded
	// manifest (empty when blind), and p, what the record hands on.
	next(u *recordUpdate, current Manifest, p prior) (record.Body, error)
	// landed reports whether body, recorded at this write's epoch by its
	// writer, is this write's, landed earlier.
	landed(body record.Body) bool
	// crc returns the checksum of b's payload.
	crc(b record.Body) uint32
}

// pushWrite is a push: a constant payload, which replaces the recorded
// one and keeps everything else the record holds.
type pushWrite struct {
	payload []byte
	sum     uint32 // the payload's CRC-32C
}

func (w pushWrite) blind() bool { return true }

func (w pushWrite) mayBe(h record.Header) bool {
	return h.PayloadLen == uint64(len(w.payload)) && (h.Version == 1 || h.PayloadCRC == w.sum)
}

// next returns the push's record over p: its payload, and everything else
// p's record holds (a stream's record stays one, with its references and
// horizon, and its floor as since says).
func (w pushWrite) next(u *recordUpdate, _ Manifest, p prior) (record.Body, error) {
	b := record.Body{Payload: w.payload}
	if p.stream != nil {
		b.Stream, b.Refs, b.Horizon = true, p.stream.refs, p.stream.horizon
		b.Since = u.since(p)
	}
	return b, nil
}

func (w pushWrite) landed(body record.Body) bool { return bytes.Equal(body.Payload, w.payload) }

func (w pushWrite) crc(record.Body) uint32 { return w.sum }

// updateWrite is an update or a seal: a payload computed by next from the
// recorded manifest, whose references it keeps as they are.
type updateWrite struct {
	fn func(current Manifest) (Manifest, error)
}

func (w updateWrite) blind() bool { return false }

func (w updateWrite) mayBe(record.Header) bool { return true }

func (w updateWrite) next(u *recordUpdate, current Manifest, p prior) (record.Body, error) {
	// next gets a copy: what it does to its manifest must not change the
	// recorded one.
	m, err := w.fn(current.clone())
	if err != nil {
		return record.Body{}, err
	}
	return manifestBody(u, m.Payload, current.Blobs, p, p.stream != nil), nil
}

// landed: a record next leaves unchanged is this update's (retrying an
// update whose reply was lost, with an idempotent next).
func (w updateWrite) landed(body record.Body) bool {
	return manifestLanded(w.fn, body)
}

func (w updateWrite) crc(b record.Body) uint32 { return record.CRC32C(b.Payload) }

// commitWrite is a commit: a manifest computed by next, whose new
// references are checked (see Commit); the record becomes a stream's. It
// decides as an update does (updateWrite), but for the record it makes.
type commitWrite struct {
	updateWrite
	// check checks the blobs the commit newly references (refs), over the
	// references the record holds (current), which is at version read.
	check func(current, refs []BlobRef, floor uint64, horizon int64, read string) error
}

func (w commitWrite) next(u *recordUpdate, current Manifest, p prior) (record.Body, error) {
	m, err := w.fn(current.clone())
	if err != nil {
		return record.Body{}, err
	}
	b := manifestBody(u, m.Payload, m.Blobs, p, true)
	// The blobs are checked last: their check costs requests.
	if err := u.f.checkBody(b.Payload, b.Refs); err != nil {
		return record.Body{}, err
	}
	if err := distinctRefs(b.Refs); err != nil {
		return record.Body{}, err
	}
	if err := keptRefs(current.Blobs, b.Refs); err != nil {
		return record.Body{}, err
	}
	if err := w.check(current.Blobs, newRefs(current.Blobs, b.Refs), b.Since, b.Horizon, u.read); err != nil {
		return record.Body{}, err
	}
	return b, nil
}

// manifestBody is the body of a record of payload and refs written by u
// over p: a stream's record (stream) carries p's collection horizon and
// its tenure floor as since says.
func manifestBody(u *recordUpdate, payload []byte, refs []BlobRef, p prior, stream bool) record.Body {
	b := record.Body{Payload: payload, Refs: refs, Stream: stream}
	if stream {
		b.Since = u.since(p)
		if p.stream != nil {
			b.Horizon = p.stream.horizon
		}
	}
	return b
}

// manifestLanded reports whether next leaves the recorded manifest of body
// unchanged.
func manifestLanded(next func(Manifest) (Manifest, error), body record.Body) bool {
	recorded := Manifest{Payload: body.Payload, Blobs: body.Refs}
	again, err := next(recorded.clone())
	return err == nil && recorded.equal(again)
}

// parts encodes the record of body written by this update.
func (u *recordUpdate) parts(b record.Body) [][]byte {
	return record.Encode(u.f.wireID(), u.writer, u.epoch, b, u.w.crc(b))
}

// decide is the protocol's decision on what the store records: the record
// to write, done when the record already is this write, or the refusal.
func (u *recordUpdate) decide(s *snapshot) ([][]byte, bool, record.Body, error) {
	st := decodeSnapshot(u.key, s)
	if st.corrupt != nil {
		return nil, false, record.Body{}, st.corrupt
	}
	u.f.sawRecord(u.key, st)
	var current Manifest
	var p prior
	u.read = ""
	if st.found {
		u.read = s.version
		if err := u.f.checkIdentity(u.key, st.h); err != nil {
			return nil, false, record.Body{}, err
		}
		if st.h.Epoch == u.epoch && st.h.Writer == u.writer && u.w.mayBe(st.h) {
			if !st.whole {
				return nil, false, record.Body{}, errReadWhole
			}
			if ours(s, st) || u.landed(st.body) {
				// This write, landed; but a record gone back below what was
				// seen of it is refused, even when it went back to this.
				if err := regression(u.op, u.key, u.epoch, st, u.sight); err != nil {
					return nil, false, record.Body{}, err
				}
				return nil, true, st.body, nil
			}
		}
		if u.epoch <= st.h.Epoch {
			return nil, false, record.Body{}, &StaleEpochError{Op: u.op, Key: u.key, Epoch: u.epoch, RecordedEpoch: st.h.Epoch, RecordedWriter: st.h.Writer}
		}
		// A push replaces a record from its head: the header and the
		// references, checked against their checksums and the record's
		// size. Damage in place is the store's to find (see the package
		// documentation, "Damage"). Every other write computes from the
		// payload, and reads it whole.
		if !st.whole && !(u.w.blind() && st.headBody) {
			return nil, false, record.Body{}, errReadWhole
		}
		current = Manifest{Payload: st.body.Payload, Blobs: st.body.Refs}
		p = priorOf(st.h, st.body)
	}
	if err := u.regressed(st); err != nil {
		return nil, false, record.Body{}, err
	}
	b, err := u.w.next(u, current, p)
	if err != nil {
		return nil, false, record.Body{}, err
	}
	if err := u.f.checkBody(b.Payload, b.Refs); err != nil {
		return nil, false, record.Body{}, err
	}
	return u.parts(b), false, b, nil
}

// landed reports whether body, recorded at this write's epoch by its
// writer, is this write's, as its kind tells; a write that starts a
// tenure is not one whose record's tenure began elsewhere (a commit of
// this writer at this epoch, which a seal cannot be).
func (u *recordUpdate) landed(body record.Body) bool {
	if u.newTenure && body.Stream && body.Since != u.epoch {
		return false
	}
	return u.w.landed(body)
}

// ours reports whether the record st, read whole as s, is the call's
// last write that failed (s.sent), landed: byte for byte, or but for a
// collection horizon raised over it since, which Collect writes
// changing nothing else in the record (promise 1): the same identity,
// epoch, writer, tenure floor, payload and references, at a horizon no
// lower. A write whose reply was lost is so resolved by the next read
// even when a Collect ran in between, whatever next would do again.
func ours(s *snapshot, st decodedRecord) bool {
	if s.sent == nil || !st.whole {
		return false
	}
	h, b, check := record.Decode(s.sent)
	return check == "" && h.Identity == st.h.Identity && h.Epoch == st.h.Epoch && h.Writer == st.h.Writer &&
		record.TenureFloor(h) == record.TenureFloor(st.h) && h.Horizon <= st.h.Horizon &&
		bytes.Equal(b.Payload, st.body.Payload) && slices.Equal(b.Refs, st.body.Refs)
}

// keptRefs refuses a manifest that references a blob the record
// references with another size or checksum: a blob is written once
// (promise 19), and so is its reference.
func keptRefs(current, next []BlobRef) error {
	had := make(map[string]BlobRef, len(current))
	for _, r := range current {
		had[r.Name] = r
	}
	for _, r := range next {
		if h, ok := had[r.Name]; ok && h != r {
			return invalidArg("manifest", "blob %s is referenced with size %d and checksum %08x, recorded with size %d and checksum %08x", esc(r.Name), r.Size, r.CRC, h.Size, h.CRC)
		}
	}
	return nil
}

// distinctRefs refuses a manifest that references one blob name twice (the
// same reference repeated, or one name with two checksums): no record can
// hold it.
func distinctRefs(refs []BlobRef) error {
	seen := make(map[string]bool, len(refs))
	for _, r := range refs {
		if seen[r.Name] {
			return invalidArg("manifest", "blob %s is referenced twice", esc(r.Name))
		}
		seen[r.Name] = true
	}
	return nil
}

// recordUpdate is one Push, Update, Seal or Commit of a record.
type recordUpdate struct {
	f      engine // the engine of this call
	op     string
	key    string
	writer string
	epoch  uint64

	plugin, shard string
	floor         floorState // the shard's floor, read by this attempt under KeepFloor
	sight         sight      // what was known of the record before this attempt read it
	read          string     // the version of the record this attempt read, "" when absent

	// w is what this kind of write decides on its own (see recordWrite).
	w recordWrite

	// newTenure: the write starts a tenure at its own epoch, whoever
	// wrote the record before (a seal; see Seal).
	newTenure bool

	// spares: see change.spares.
	spares func(stale *StaleEpochError) bool
}

// since is the tenure floor of a record this update writes over prior p:
// a seal starts a tenure at its own epoch; a change of writer starts one
// above every epoch recorded before it; otherwise the floor stays.
func (u *recordUpdate) since(p prior) uint64 {
	switch {
	case u.newTenure:
		return u.epoch
	case p.epoch != 0 && u.writer != p.writer:
		return p.epoch + 1
	}
	return p.floor()
}

// regressed refuses a write of this update that finds the record st
// absent or below what was seen of it (see regression), and, under
// KeepFloor, a write that would create a shard's first record unless it
// is a seal.
func (u *recordUpdate) regressed(st decodedRecord) error {
	if err := regression(u.op, u.key, u.epoch, st, u.sight); err != nil {
		return err
	}
	if u.f.KeepFloor && !st.found && !u.newTenure {
		return fmt.Errorf("writefence: %s at epoch %d to %s refused: no record, and under KeepFloor only a seal or a settle creates one: %w",
			u.op, u.epoch, esc(u.key), ErrNotFound)
	}
	return nil
}

// checkBody refuses a record whose payload and references together pass
// the Fence's limit.
func (e *engine) checkBody(payload []byte, refs []BlobRef) error {
	size := int64(len(payload))
	for _, r := range refs {
		size += record.RefEntryFixed + int64(len(r.Name))
	}
	if limit := e.maxPayload(); size > limit {
		return invalidArg("payload", "%d bytes with its references, more than the limit of %d", size, limit)
	}
	return nil
}
