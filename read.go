package writefence

import (
	"context"
	"errors"
	"fmt"
)

// read reads the record at key once. A missing record and a corrupt one are
// states, not errors; any other failure is returned. With whole false, on a
// store that can read a prefix, it reads only the first 4 KiB: the
// header is checked (checksum, identity) and the record's size must equal
// the header's size plus the payload length it declares; the payload checksum
// is then left to Latest and to the store's own integrity checks.
func (f *Fence) read(ctx context.Context, key string, whole bool) (recorded, error) {
	pr, ok := f.Store.(PrefixReader)
	if whole || !ok {
		data, version, err := f.Store.Get(ctx, key)
		if err != nil {
			return readState(key, err)
		}
		return decodeState(key, version, data), nil
	}
	prefix, size, version, err := pr.GetPrefix(ctx, key, maxHeaderSize)
	if err != nil {
		return readState(key, err)
	}
	if size <= int64(len(prefix)) {
		return decodeState(key, version, prefix), nil
	}
	st := recorded{found: true, version: version}
	h, check := decodeHeader(prefix)
	if check == "" {
		st.h = h
		switch rest := uint64(size - int64(h.size)); {
		case h.payloadLen > rest:
			check = "truncated payload"
		case h.payloadLen < rest:
			check = "trailing bytes"
		}
	}
	if check != "" {
		st.corrupt = &CorruptError{Key: key, Version: version, Check: check}
	}
	return st, nil
}

// readState turns a failed read into a state (absent, or damaged as the
// store itself found) or the error to return.
func readState(key string, err error) (recorded, error) {
	var ce *CorruptError
	switch {
	case errors.Is(err, ErrNotFound):
		return recorded{}, nil
	case errors.As(err, &ce) && ce.Version != "":
		c := *ce
		if c.Key == "" {
			c.Key = key
		}
		return recorded{found: true, version: c.Version, corrupt: &c}, nil
	}
	return recorded{}, readError(key, err)
}

// decodeState decodes a whole record strictly.
func decodeState(key, version string, data []byte) recorded {
	h, payload, check := decodeRecord(data)
	st := recorded{found: true, whole: true, version: version, h: h, payload: payload}
	if check != "" {
		st.corrupt = &CorruptError{Key: key, Version: version, Check: check}
	}
	return st
}

func readError(key string, err error) error {
	if errors.Is(err, ErrNotFound) {
		return err
	}
	return fmt.Errorf("writefence: read %s: %w", esc(key), err)
}

func (f *Fence) checkIdentity(key string, h header) error {
	if id := f.identity(); h.identity != id {
		return &WireError{Key: key, Expected: id, Found: h.identity}
	}
	return nil
}
