package writefence

import "github.com/writefence/writefence/internal/record"

// recorded is what one read of a record's key found, decoded.
type recorded struct {
	found   bool
	whole   bool          // the whole record was read, not only its head
	version string        // the version of the bytes read (of the damage, when damaged in place)
	h       record.Header // the decoded header; h.Epoch is 0 when it did not decode
	body    record.Body   // the payload, references and tenure floor, on a whole read of a sound record
	corrupt *CorruptError // set when the record, or the store's own check, failed

	// Of a corrupt record: its references, when its header and references
	// decode whatever failed after them (see record.SalvageRefs).
	salvaged      []BlobRef
	salvagedKnown bool
}

// decodeSnapshot decodes what a read of the record at key found. A whole
// record is decoded strictly. A head (a store that reads prefixes) is
// checked as far as it goes: the header's checksum and identity, and the
// record's size against the header's size plus the lengths of the
// references and the payload it declares; the references and the
// payload's checksum are then left to Latest, which reads the
// whole record, and to the store's own integrity checks. Of a record the
// store found damaged in place, the header is decoded from the head of the
// damaged data the store located, so that its epoch is still known.
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
	}
	if check != "" {
		st.corrupt = &CorruptError{Key: key, Version: s.version, Check: check}
		st.salvaged, st.salvagedKnown = record.SalvageRefs(s.data)
	}
	return st
}

func (f *Fence) checkIdentity(key string, h record.Header) error {
	if id := f.identity(); h.Identity != id {
		return &WireError{Key: key, Expected: id, Found: h.Identity}
	}
	return nil
}
