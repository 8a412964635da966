package writefence_test

import (
	"context"
	"io"

	"github.com/writefence/writefence"
)

// hookedBlobs is a MemStore whose blob calls a test can step into: each
// hook runs on the caller's goroutine right before the call reaches the
// MemStore, so a test forces an interleaving without sleeping. It declares
// its capabilities as its own, so a Fence goes through it.
type hookedBlobs struct {
	*writefence.MemStore
	beforeDelete func(ctx context.Context, key string)
	beforeOpen   func(ctx context.Context, key string)
}

func (s *hookedBlobs) Capabilities() writefence.ConditionalStore { return s }

func (s *hookedBlobs) DeleteBlob(ctx context.Context, key string) error {
	if s.beforeDelete != nil {
		s.beforeDelete(ctx, key)
	}
	return s.MemStore.DeleteBlob(ctx, key)
}

// DeleteBlobs deletes each key with DeleteBlob, so that the hook runs
// for every key a Collect deletes.
func (s *hookedBlobs) DeleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	var deleted []string
	for _, k := range keys {
		if err := s.DeleteBlob(ctx, k); err != nil {
			return deleted, err
		}
		deleted = append(deleted, k)
	}
	return deleted, nil
}

func (s *hookedBlobs) OpenBlob(ctx context.Context, key string) (io.ReadCloser, writefence.BlobInfo, error) {
	if s.beforeOpen != nil {
		s.beforeOpen(ctx, key)
	}
	return s.MemStore.OpenBlob(ctx, key)
}
