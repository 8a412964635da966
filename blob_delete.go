package writefence

import (
	"context"
	"errors"
	"fmt"
)

// BlobBatchDeleter is an optional capability of a BlobStore, used through
// DeleteBlobs: deleting many blobs in few requests (S3: 1,000 a request).
type BlobBatchDeleter interface {
	// DeleteBlobs removes the blobs at keys as DeleteBlob does, and
	// returns the keys removed or found missing, in any order; when some
	// are left, also a *StoreError naming one (or ctx's error). A key it
	// does not return may or may not be gone.
	DeleteBlobs(ctx context.Context, keys []string) (deleted []string, err error)
}

// DeleteBlobs removes the blobs at keys through s's BlobBatchDeleter when s
// declares it (see Capable), else with DeleteBlob of each in turn up to the
// first failure, and returns the keys removed or found missing and the error
// that left the others. Collect deletes through it.
func DeleteBlobs(ctx context.Context, s ConditionalStore, keys []string) ([]string, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	if bd, ok := capability[BlobBatchDeleter](s); ok {
		deleted, err := bd.DeleteBlobs(ctx, keys)
		deleted, left := answered(keys, deleted)
		switch {
		case err != nil, left == "":
		case ctx.Err() != nil:
			err = ctx.Err()
		default:
			err = storeErr("blob delete", left, nil, fmt.Errorf("the store answered for %d of %d keys, not this one", len(deleted), len(keys)))
		}
		return deleted, err
	}
	bs, ok := capability[BlobStore](s)
	if !ok {
		return nil, fmt.Errorf("writefence: the store %T holds no blobs (it declares no BlobStore): %w", s, errors.ErrUnsupported)
	}
	deleted := make([]string, 0, len(keys))
	for _, k := range keys {
		if err := bs.DeleteBlob(ctx, k); err != nil {
			return deleted, err
		}
		deleted = append(deleted, k)
	}
	return deleted, nil
}

// answered returns the keys of deleted that keys holds, each once, in
// deleted's order, and the first key of keys it leaves out ("" for none):
// what a batch delete, or a server's reply to one, accounts for of the
// keys it was asked, whatever else it names.
func answered(keys, deleted []string) (kept []string, left string) {
	asked := make(map[string]bool, len(keys))
	for _, k := range keys {
		asked[k] = true
	}
	kept = make([]string, 0, len(deleted))
	for _, k := range deleted {
		if asked[k] {
			kept = append(kept, k)
			delete(asked, k)
		}
	}
	for _, k := range keys {
		if asked[k] {
			return kept, k
		}
	}
	return kept, ""
}

// How many blobs Collect deletes between two reads of the record that
// check it still holds the tenure the deletes rely on (promise 32). On a
// store that declares a BlobBatchDeleter, ten of S3's DeleteObjects
// requests (1,000 keys each): the reads are then a small share of a large
// collection's requests (a Collect of 10,000 blobs reads the record twice,
// not eleven times), while the time from a read to the last delete it
// vouches for stays that of ten requests. Elsewhere, where each blob is a
// request of its own, fewer, for the same reason.
const (
	collectBatch  = 10000
	collectSerial = 100
)

// GCReport is what one Collect found and did.
type GCReport struct {
	Referenced []BlobInfo // blobs the recorded manifest references
	Deleted    []BlobInfo // blobs deleted (with DryRun: that would be)
	Kept       []BlobInfo // unreferenced blobs within the grace rule, and names of no blob of this package
}
