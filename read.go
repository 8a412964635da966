package writefence

import (
	"context"

	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/record"
)

// recorded is what one read of a record's key found, decoded.
type recorded struct {
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
func decodeSnapshot(key string, s *snapshot) recorded {
	st := recorded{found: s.found, whole: s.whole, version: s.version}
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
func (st *recorded) decodeHeadBody(head []byte) string {
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

func (f *Fence) checkIdentity(key string, h record.Header) error {
	if id := f.identity(); h.Identity != id {
		return &WireError{Key: key, Expected: id, Found: h.Identity}
	}
	return nil
}

// readHead reads the head of the record at key through GetPrefix: its
// first record.MaxHeaderSize bytes, which hold every header, and, of a
// stream's record whose references run past them, a second read of its
// header and references. It never reads the payload, except from a store
// that reads no prefixes (see Capable): that store's Get brings the whole
// record anyway, which is then decided on whole.
func (f *Fence) readHead(ctx context.Context, key string) ([]byte, int64, string, error) {
	if _, ok := capability[PrefixReader](f.Store); !ok {
		data, version, err := f.Store.Get(ctx, key)
		return data, int64(len(data)), version, err
	}
	data, size, version, err := GetPrefix(ctx, f.Store, key, record.MaxHeaderSize)
	if err != nil || size <= int64(len(data)) {
		return data, size, version, err
	}
	h, check := record.DecodeHeader(data)
	if check != "" || !h.Stream() {
		return data, size, version, nil
	}
	// The header's checksum passed, so RefsLen is what a writer wrote;
	// a record shorter than it declares is left to the decision.
	end := uint64(h.Size) + h.RefsLen
	if end <= uint64(len(data)) || end > uint64(size) {
		return data, size, version, nil
	}
	if err := hook.Read(ctx, key); err != nil {
		return nil, 0, "", err
	}
	return GetPrefix(ctx, f.Store, key, int64(end))
}
