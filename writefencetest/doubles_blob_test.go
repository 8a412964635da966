package writefencetest_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/listing"
)

// The doubles of writefence.BlobStore: MemStore's blobs with one fault.

// blobFault is how a blobStore departs from the contract, or, for
// blobCorrect and blobReplace, does not.
type blobFault int

const (
	blobCorrect       blobFault = iota
	blobReplace                 // an existing key replaced whole, atomically, as a store that cannot tell on its call does: allowed
	blobCompare                 // the key looked up first, then written unconditionally: a sequential create is refused, racing ones all land
	blobConflictLies            // an existing key overwritten, and the create refused with ErrConflict all the same
	blobInPlace                 // an existing key's bytes written over in place, its longer tail kept, as a file opened without O_TRUNC
	blobPartial                 // a reader's failure leaves what it yielded, as a multipart upload completed instead of aborted
	blobLostPart                // bytes after the last whole part lost, as a multipart upload completed without its last part
	blobUndated                 // every time zero
	blobBackwards               // each blob's time a minute before the last one's
	blobBareErrors              // a missing key and a refused create as the bare sentinel, not a *writefence.StoreError
	blobDeleteStrict            // DeleteBlob of a missing key ErrNotFound
	blobDeleteNoop              // DeleteBlob does nothing and returns nil
	blobUnescaping              // CreateBlob percent-decodes its key, as a client that unescapes a path once too often; the other methods do not
	blobListMisses              // the last blob of every listing left out, as a listing that drops its last page
	blobListTwice               // every blob listed twice, as a listing that restarts a page
	blobListOutside             // every blob, whatever the prefix
	blobListUndated             // listed with a zero time, as an adapter that does not copy the listing's LastModified
	blobListNoStop              // fn's error ignored
	blobListNoCancel            // ctx ignored
	blobListLags                // ListBlobsConsistent shows what was there at its previous call under the prefix, as a cached listing: ListBlobs is right
	blobListOnePage             // ListBlobsConsistent ends after the first 1,000 blobs, as a listing that drops its continuation: ListBlobs is right
	blobListFromStart           // ListBlobsConsistent lists from the start of the prefix, whatever after says
	blobListFromAfter           // ListBlobsConsistent lists from after too, as a start taken for inclusive
	blobDeleteCut               // DeleteBlobs deletes the first 1,000 keys and answers for all, as a client that sends one request of S3's size
)

// blobPage is how many blobs one request of S3 lists or deletes.
const blobPage = 1000

// blobDoublePart is the part size of the blob doubles, given to the
// suite as Options.BlobPartSize so their children stay quick.
const blobDoublePart = 64 << 10

// blobStore is a MemStore, declaring its capabilities, whose blobs have
// one fault.
type blobStore struct {
	writefence.MemStore
	fault blobFault
	gap   compareGap

	mu sync.Mutex // makes each create of an existing key one step

	lagMu  sync.Mutex                       // guards lagged
	lagged map[string][]writefence.BlobInfo // blobListLags: the last listing of each prefix
}

func newBlobStore(fault blobFault) *blobStore {
	s := &blobStore{fault: fault}
	switch fault {
	case blobUndated:
		s.Clock = func() time.Time { return time.Time{} }
	case blobBackwards:
		var n atomic.Int64
		start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		s.Clock = func() time.Time { return start.Add(-time.Duration(n.Add(1)) * time.Minute) }
	}
	return s
}

func (s *blobStore) Capabilities() writefence.ConditionalStore { return s }

// bare strips a *writefence.StoreError to its cause, for blobBareErrors.
func (s *blobStore) bare(err error) error {
	var se *writefence.StoreError
	if s.fault == blobBareErrors && errors.As(err, &se) {
		return se.Err
	}
	return err
}

// replace stores data at key whatever it holds. The caller holds mu.
func (s *blobStore) replace(ctx context.Context, key string, data []byte) (writefence.BlobInfo, error) {
	if err := s.MemStore.DeleteBlob(ctx, key); err != nil {
		return writefence.BlobInfo{}, err
	}
	return s.MemStore.CreateBlob(ctx, key, bytes.NewReader(data))
}

func (s *blobStore) CreateBlob(ctx context.Context, key string, r io.Reader) (writefence.BlobInfo, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		if s.fault == blobPartial {
			s.MemStore.CreateBlob(ctx, key, bytes.NewReader(data))
		}
		return writefence.BlobInfo{}, &writefence.StoreError{Op: "blob create", Key: key, Err: err}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.fault {
	case blobReplace:
		return s.replace(ctx, key, data)
	case blobCompare:
		_, err := s.MemStore.StatBlob(ctx, key)
		found := err == nil
		s.mu.Unlock() // the gap between the look-up and the write
		s.gap.compared(!found)
		s.mu.Lock()
		if found {
			return writefence.BlobInfo{}, conflict("blob create", key)
		}
		return s.replace(ctx, key, data)
	case blobConflictLies, blobInPlace:
		old, _, err := s.MemStore.OpenBlob(ctx, key)
		if errors.Is(err, writefence.ErrNotFound) {
			return s.MemStore.CreateBlob(ctx, key, bytes.NewReader(data))
		}
		if err != nil {
			return writefence.BlobInfo{}, err
		}
		if s.fault == blobConflictLies {
			s.replace(ctx, key, data)
			return writefence.BlobInfo{}, conflict("blob create", key)
		}
		held, _ := io.ReadAll(old)
		merged := slices.Clone(data)
		if len(held) > len(data) {
			merged = append(merged, held[len(data):]...)
		}
		info, err := s.replace(ctx, key, merged)
		info.Size = int64(len(data))
		return info, err
	case blobLostPart:
		size := int64(len(data))
		if size > blobDoublePart {
			data = data[:size/blobDoublePart*blobDoublePart]
		}
		info, err := s.MemStore.CreateBlob(ctx, key, bytes.NewReader(data))
		info.Size = size
		return info, err
	case blobUnescaping:
		if k, err := url.PathUnescape(key); err == nil {
			key = k
		}
	}
	info, err := s.MemStore.CreateBlob(ctx, key, bytes.NewReader(data))
	return info, s.bare(err)
}

func (s *blobStore) OpenBlob(ctx context.Context, key string) (io.ReadCloser, writefence.BlobInfo, error) {
	rc, info, err := s.MemStore.OpenBlob(ctx, key)
	return rc, info, s.bare(err)
}

func (s *blobStore) StatBlob(ctx context.Context, key string) (writefence.BlobInfo, error) {
	info, err := s.MemStore.StatBlob(ctx, key)
	return info, s.bare(err)
}

func (s *blobStore) DeleteBlob(ctx context.Context, key string) error {
	switch s.fault {
	case blobDeleteNoop:
		return nil
	case blobDeleteStrict:
		if _, err := s.MemStore.StatBlob(ctx, key); err != nil {
			return err
		}
	}
	return s.MemStore.DeleteBlob(ctx, key)
}

func (s *blobStore) ListBlobs(ctx context.Context, prefix string, fn func(writefence.BlobInfo) error) error {
	switch s.fault {
	case blobListMisses:
		var all []writefence.BlobInfo
		if err := s.MemStore.ListBlobs(ctx, prefix, func(b writefence.BlobInfo) error { all = append(all, b); return nil }); err != nil {
			return err
		}
		slices.SortFunc(all, func(a, b writefence.BlobInfo) int { return strings.Compare(a.Key, b.Key) })
		for _, b := range all[:max(len(all)-1, 0)] {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := fn(b); err != nil {
				return err
			}
		}
		return nil
	case blobListTwice:
		return s.MemStore.ListBlobs(ctx, prefix, func(b writefence.BlobInfo) error {
			if err := fn(b); err != nil {
				return err
			}
			return fn(b)
		})
	case blobListOutside:
		return s.MemStore.ListBlobs(ctx, "", fn)
	case blobListUndated:
		return s.MemStore.ListBlobs(ctx, prefix, func(b writefence.BlobInfo) error {
			b.Modified = time.Time{}
			return fn(b)
		})
	case blobListNoStop:
		return s.MemStore.ListBlobs(ctx, prefix, func(b writefence.BlobInfo) error { _ = fn(b); return nil })
	case blobListNoCancel:
		return s.MemStore.ListBlobs(context.WithoutCancel(ctx), prefix, fn)
	}
	return s.MemStore.ListBlobs(ctx, prefix, fn)
}

// DeleteBlobs is DeleteBlob of each key, with its faults.
func (s *blobStore) DeleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	sent := keys
	if s.fault == blobDeleteCut {
		sent = keys[:min(len(keys), blobPage)]
	}
	var deleted []string
	for _, k := range sent {
		if err := s.DeleteBlob(ctx, k); err != nil {
			return deleted, err
		}
		deleted = append(deleted, k)
	}
	if s.fault == blobDeleteCut {
		return slices.Clone(keys), nil
	}
	return deleted, nil
}

// ListBlobsConsistent is ListBlobs, with its faults; with blobListLags,
// the listing of the call before.
func (s *blobStore) ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(writefence.BlobInfo) error) error {
	switch s.fault {
	case blobListFromStart:
		after = ""
	case blobListFromAfter:
		if after != "" {
			after = after[:len(after)-1]
		}
	}
	if after != "" {
		inner := fn
		fn = func(b writefence.BlobInfo) error {
			if b.Key <= after {
				return nil
			}
			return inner(b)
		}
	}
	switch s.fault {
	case blobListOnePage:
		var all []writefence.BlobInfo
		if err := s.MemStore.ListBlobs(ctx, prefix, func(b writefence.BlobInfo) error { all = append(all, b); return nil }); err != nil {
			return err
		}
		slices.SortFunc(all, func(a, b writefence.BlobInfo) int { return strings.Compare(a.Key, b.Key) })
		return listing.Each(ctx, all[:min(len(all), blobPage)], fn)
	case blobListLags:
	default:
		return s.ListBlobs(ctx, prefix, fn)
	}
	var now []writefence.BlobInfo
	if err := s.MemStore.ListBlobs(ctx, prefix, func(b writefence.BlobInfo) error { now = append(now, b); return nil }); err != nil {
		return err
	}
	s.lagMu.Lock()
	if s.lagged == nil {
		s.lagged = map[string][]writefence.BlobInfo{}
	}
	shown, seen := s.lagged[prefix]
	s.lagged[prefix] = now
	s.lagMu.Unlock()
	if !seen {
		shown = now
	}
	return listing.Each(ctx, shown, fn)
}

// blobWriterStore is a blobStore that declares a writefence.BlobWriter
// whose WriteBlob writes only the first part its reader yields, and
// returns that size, as a writer that sends what it buffered as one PUT
// and never reads on.
type blobWriterStore struct{ *blobStore }

func (s *blobWriterStore) Capabilities() writefence.ConditionalStore { return s }

func (s *blobWriterStore) WriteBlob(ctx context.Context, key string, r io.Reader) (int64, error) {
	info, err := s.CreateBlob(ctx, key, io.LimitReader(r, blobDoublePart))
	return info.Size, err
}
