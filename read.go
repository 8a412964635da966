package writefence

import (
	"slices"

	"github.com/writefence/writefence/internal/record"
)

// decodedRecord is what one read of a record's key found, decoded.
type decodedRecord struct {
	found   bool
	whole   bool          // the whole record was read, not only its head
	version string        // the version of the bytes read (of the damage, when damaged in place)
	h       record.Header // the decoded header; h.Epoch is 0 when it did not decode
	body    record.Body   // the payload, references and tenure floor, on a whole read of a sound record
	corrupt *CorruptError // set when the record, or the store's own check, failed

	// headBody: a head that holds all of the record but its payload (its
	// header and, of a stream's record, its references), checked; body
	// then holds the references, tenure floor and horizon, not the
	// payload.
	headBody bool

	// Of a corrupt record: its references, when its header and references
	// decode whatever failed after them (see record.SalvageRefs).
	salvaged      []BlobRef
	salvagedKnown bool
}

// decodeSnapshot decodes what a read of the record at key found. A whole
// record is decoded strictly. A head (a store that reads prefixes) is
// checked as far as it goes: the header's checksum, and the record's size
// against the header's size plus the lengths of the references and the
// payload it declares, and, when the head holds them, the references
// against their checksum; the payload's checksum is then left to the
// reads of the whole record (Latest, Update, Commit) and to the store's
// own integrity checks (see the package documentation, "Damage"). Of a
// record the store found damaged in place, the header is decoded from the
// head of the damaged data the store located, so that its epoch is still
// known.
func decodeSnapshot(key string, s *snapshot) decodedRecord {
	st := decodedRecord{found: s.found, whole: s.whole, version: s.version}
	check := ""
	switch {
	case !s.found:
		return st
	case s.damage != nil:
		if h, c := record.DecodeHeader(s.damage.Head); c == "" {
			st.h = h
		}
		st.corrupt = s.damage
		st.salvaged, st.salvagedKnown = record.SalvageRefs(s.damage.Head)
		return st
	case s.whole:
		st.h, st.body, check = record.Decode(s.data)
	default:
		st.h, check = record.DecodeHeader(s.data)
		if check == "" {
			switch rest := uint64(s.size - int64(st.h.Size)); {
			case st.h.BodyLen() > rest:
				check = "truncated payload"
			case st.h.BodyLen() < rest:
				check = "trailing bytes"
			}
		}
		if check == "" {
			check = st.decodeHeadBody(s.data)
		}
	}
	if check != "" {
		st.corrupt = &CorruptError{Key: key, Version: s.version, Check: check}
		st.salvaged, st.salvagedKnown = record.SalvageRefs(s.data)
	}
	return st
}

// decodeHeadBody decodes what a sound head holds besides the header: of a
// stream's record, its references, when the head holds them whole. It
// returns the failed check of references that fail theirs.
func (st *decodedRecord) decodeHeadBody(head []byte) string {
	if !st.h.Stream() {
		st.headBody = true
		return ""
	}
	refs, complete, check := record.HeadRefs(st.h, head)
	if complete && check == "" {
		st.body = record.Body{Refs: refs, Since: st.h.Since, Horizon: st.h.Horizon, Stream: true}
		st.headBody = true
	}
	return check
}

// snapshot is what one read of a key found.
type snapshot struct {
	found   bool
	cached  bool   // not read: the version the change remembered
	whole   bool   // data is the whole object
	version string // of the bytes read, or of the damage
	data    []byte // the object, or its first bytes
	size    int64  // the object's size

	// damage is set when the store's own check found the bytes damaged in
	// place; data is then nil and damage.Head holds what the store could
	// locate of them.
	damage *CorruptError

	// sent is the bytes of this call's last write that failed without
	// learning whether it landed (a conflict, a lost reply), nil when
	// none: a decision that finds them recorded (see ours, decide.go)
	// knows the write landed, and needs no memory of its own for it.
	sent []byte
}

// prior is what a write of a record carries on from the record it
// replaces, besides the payload: the writer and epoch that decide a new
// tenure, and, of a stream's record, its tenure floor, collection horizon
// and references.
type prior struct {
	writer string
	epoch  uint64
	stream *streamState // nil for a plain record, or none
}

// streamState is what a stream's record (format version 3 or 4) holds
// besides its payload.
type streamState struct {
	since   uint64
	horizon int64
	refs    []BlobRef
}

// priorOf is what the sound record with header h and body b hands on.
func priorOf(h record.Header, b record.Body) prior {
	p := prior{writer: h.Writer, epoch: h.Epoch}
	if h.Stream() {
		p.stream = &streamState{since: h.Since, horizon: h.Horizon, refs: b.Refs}
	}
	return p
}

// priorOfBody is what a record this Fence wrote, by writer at epoch,
// hands on.
func priorOfBody(writer string, epoch uint64, b record.Body) prior {
	p := prior{writer: writer, epoch: epoch}
	if b.Stream {
		// A copy: the references may be a slice the caller's next
		// returned, which the caller may use again.
		p.stream = &streamState{since: b.Since, horizon: b.Horizon, refs: slices.Clone(b.Refs)}
	}
	return p
}

// floor is the tenure floor over the record (see record.TenureFloor):
// the floor a stream's record carries, the epoch of a plain one.
func (p prior) floor() uint64 {
	if p.stream != nil {
		return p.stream.since
	}
	return p.epoch
}
