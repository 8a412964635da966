package writefence

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// memBlobs are a MemStore's blobs, beside its objects: a separate key
// space, as an object store's blobs are objects of their own.
type memBlobs struct {
	mu    sync.Mutex // guards blobs
	blobs map[string]memBlob
}

type memBlob struct {
	data     []byte
	modified time.Time
}

var (
	_ Capable   = (*MemStore)(nil)
	_ BlobStore = (*MemStore)(nil)
)

// Capabilities implements Capable: the store's BlobStore is its own.
func (m *MemStore) Capabilities() ConditionalStore { return m }

func (m *MemStore) now() time.Time {
	if m.Clock != nil {
		return m.Clock()
	}
	return time.Now()
}

// CreateBlob implements BlobStore, holding the blob in memory whole.
func (m *MemStore) CreateBlob(ctx context.Context, key string, r io.Reader) (BlobInfo, error) {
	if err := ctx.Err(); err != nil {
		return BlobInfo{}, err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return BlobInfo{}, storeErr("mem blob", key, nil, err)
	}
	b := &m.blobs
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.blobs[key]; ok {
		return BlobInfo{}, storeErr("mem blob", key, ErrConflict, nil)
	}
	if b.blobs == nil {
		b.blobs = map[string]memBlob{}
	}
	blob := memBlob{data: data, modified: m.now()}
	b.blobs[key] = blob
	return BlobInfo{Key: key, Size: int64(len(data)), Modified: blob.modified}, nil
}

func (m *MemStore) blob(ctx context.Context, key string) (memBlob, error) {
	if err := ctx.Err(); err != nil {
		return memBlob{}, err
	}
	m.blobs.mu.Lock()
	defer m.blobs.mu.Unlock()
	blob, ok := m.blobs.blobs[key]
	if !ok {
		return memBlob{}, storeErr("mem blob", key, ErrNotFound, nil)
	}
	return blob, nil
}

// OpenBlob implements BlobStore.
func (m *MemStore) OpenBlob(ctx context.Context, key string) (io.ReadCloser, BlobInfo, error) {
	blob, err := m.blob(ctx, key)
	if err != nil {
		return nil, BlobInfo{}, err
	}
	return io.NopCloser(bytes.NewReader(blob.data)), BlobInfo{Key: key, Size: int64(len(blob.data)), Modified: blob.modified}, nil
}

// StatBlob implements BlobStore.
func (m *MemStore) StatBlob(ctx context.Context, key string) (BlobInfo, error) {
	blob, err := m.blob(ctx, key)
	if err != nil {
		return BlobInfo{}, err
	}
	return BlobInfo{Key: key, Size: int64(len(blob.data)), Modified: blob.modified}, nil
}

// ListBlobs implements BlobStore; fn may call the store.
func (m *MemStore) ListBlobs(ctx context.Context, prefix string, fn func(BlobInfo) error) error {
	m.blobs.mu.Lock()
	var infos []BlobInfo
	for k, b := range m.blobs.blobs {
		if strings.HasPrefix(k, prefix) {
			infos = append(infos, BlobInfo{Key: k, Size: int64(len(b.data)), Modified: b.modified})
		}
	}
	m.blobs.mu.Unlock()
	for _, info := range infos {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(info); err != nil {
			return err
		}
	}
	return nil
}

var _ ConsistentBlobLister = (*MemStore)(nil)

// ListBlobsConsistent implements ConsistentBlobLister.
func (m *MemStore) ListBlobsConsistent(ctx context.Context, prefix string, fn func(BlobInfo) error) error {
	return m.ListBlobs(ctx, prefix, fn)
}

var _ BlobBatchDeleter = (*MemStore)(nil)

// DeleteBlobs implements BlobBatchDeleter: every key under one lock.
func (m *MemStore) DeleteBlobs(ctx context.Context, keys []string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	m.blobs.mu.Lock()
	for _, k := range keys {
		delete(m.blobs.blobs, k)
	}
	m.blobs.mu.Unlock()
	return slices.Clone(keys), nil
}

// DeleteBlob implements BlobStore.
func (m *MemStore) DeleteBlob(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.blobs.mu.Lock()
	delete(m.blobs.blobs, key)
	m.blobs.mu.Unlock()
	return nil
}
