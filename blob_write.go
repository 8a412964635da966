package writefence

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// BlobWriter is an optional capability of a BlobStore, used through
// WriteBlob when the store declares it (Capable): CreateBlob without the
// blob's info, for a store that learns it only by another request (S3: a
// PUT, then a HEAD for the time).
type BlobWriter interface {
	// WriteBlob is CreateBlob, with the same contract, but returns only
	// the number of bytes the store holds at key.
	WriteBlob(ctx context.Context, key string, r io.Reader) (size int64, err error)
}

// WriteBlob writes what r yields as the blob at key, through s's BlobWriter
// when s declares it (see Capable), else through CreateBlob, and returns the
// number of bytes the store holds at key. PutBlob writes through it.
func WriteBlob(ctx context.Context, s ConditionalStore, key string, r io.Reader) (int64, error) {
	if bw, ok := capability[BlobWriter](s); ok {
		return bw.WriteBlob(ctx, key, r)
	}
	bs, ok := capability[BlobStore](s)
	if !ok {
		return 0, fmt.Errorf("writefence: the store %T holds no blobs (it declares no BlobStore): %w", s, errors.ErrUnsupported)
	}
	info, err := bs.CreateBlob(ctx, key, r)
	return info.Size, err
}
