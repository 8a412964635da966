package writefence

import (
	"bytes"
	"context"
	"errors"
	"io"
	"slices"
	"time"

	"github.com/writefence/writefence/internal/record"
)

// BlobRef is a record's reference to a blob of its shard: the blob's name
// and what checks its bytes. The name carries the epoch and the writer
// that wrote the blob. Its fields:
//
//	Name string // the blob's name in the shard's blob space, as PutBlob returned it
//	Size int64  // its size in bytes
//	CRC  uint32 // the CRC-32C of its bytes
type BlobRef = record.BlobRef

// Manifest is a record as Commit reads and writes it: payload and blobs.
type Manifest struct {
	Payload []byte
	Blobs   []BlobRef
}

func (m Manifest) equal(o Manifest) bool {
	return bytes.Equal(m.Payload, o.Payload) && slices.Equal(m.Blobs, o.Blobs)
}

func (m Manifest) clone() Manifest {
	return Manifest{Payload: bytes.Clone(m.Payload), Blobs: slices.Clone(m.Blobs)}
}

// newRefs returns the references of next that current does not hold.
func newRefs(current, next []BlobRef) []BlobRef {
	had := make(map[BlobRef]bool, len(current))
	for _, r := range current {
		had[r] = true
	}
	var added []BlobRef
	for _, r := range next {
		if !had[r] {
			added = append(added, r)
		}
	}
	return added
}

// BlobStore is an optional capability of a ConditionalStore, used when the
// store declares it (Capable): immutable blobs of any size, streamed.
type BlobStore interface {
	// CreateBlob writes what r yields, to its end, as the blob at key,
	// holding at most one part in memory, and returns its info once it is
	// durable. An existing key is refused with a *StoreError matching
	// ErrConflict where the store can tell (a Fence creates new keys
	// only). An error from r fails the call with an error matching it, and
	// leaves no blob at key.
	CreateBlob(ctx context.Context, key string, r io.Reader) (BlobInfo, error)

	// OpenBlob returns a reader of the whole blob at key, from one
	// response, and its info; a missing key is ErrNotFound.
	OpenBlob(ctx context.Context, key string) (io.ReadCloser, BlobInfo, error)

	// StatBlob returns the info of the blob at key; a missing key is
	// ErrNotFound. Every method reports the same Modified for a blob.
	StatBlob(ctx context.Context, key string) (BlobInfo, error)

	// ListBlobs calls fn with the info of each blob whose key starts with
	// prefix, in any order (a blob created or deleted meanwhile may be
	// missed); fn's error or ctx's ends it and is returned.
	ListBlobs(ctx context.Context, prefix string, fn func(BlobInfo) error) error

	// DeleteBlob removes the blob at key; a missing key is not an error.
	DeleteBlob(ctx context.Context, key string) error
}

// BlobInfo describes a stored blob.
type BlobInfo struct {
	Key      string
	Size     int64
	Modified time.Time // when it was created, by the store's own clock
}

// onlyDamage reports whether err, or every error it joins, matches
// ErrCorrupt.
func onlyDamage(err error) bool {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if !onlyDamage(e) {
				return false
			}
		}
		return true
	}
	return errors.Is(err, ErrCorrupt)
}
