package writefence

import (
	"bytes"
	"context"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/writefence/writefence/internal/listing"
)

// MemStore is an in-memory ConditionalStore and BlobStore for tests,
// examples and the command's demo; its zero value is an empty store. Version
// tokens come from one counter, so a token never repeats within a store. Get
// and PutIfVersion copy the bytes they are given or return. MaxObjectSize,
// when positive, is the read limit of Get (zero means 64 MiB + 4 KiB), and
// Clock gives the creation time of its blobs (nil means time.Now); set them
// before first use.
type MemStore struct {
	MaxObjectSize int64
	Clock         func() time.Time

	blobs memBlobs

	mu      sync.Mutex // guards objects and counter
	objects map[string]memObject
	counter uint64
}

type memObject struct {
	data    []byte
	version string
}

var (
	_ ConditionalStore = (*MemStore)(nil)
	_ Deleter          = (*MemStore)(nil)
	_ Lister           = (*MemStore)(nil)
)

// Get implements ConditionalStore.
func (m *MemStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	m.mu.Lock()
	o, ok := m.objects[key]
	m.mu.Unlock()
	if !ok {
		return nil, "", storeErr("mem get", key, ErrNotFound, nil)
	}
	limit := m.MaxObjectSize
	if limit <= 0 {
		limit = defaultMaxObjectSize
	}
	if int64(len(o.data)) > limit {
		return nil, "", tooLarge("mem get", key, limit)
	}
	data := make([]byte, len(o.data))
	copy(data, o.data)
	return data, o.version, nil
}

// PutIfVersion implements ConditionalStore, comparing and writing in one lock.
func (m *MemStore) PutIfVersion(ctx context.Context, key string, data []byte, expectVersion string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	buf := append([]byte(nil), data...)
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objects[key]
	if ok != (expectVersion != "") || (ok && o.version != expectVersion) {
		return "", storeErr("mem put", key, ErrConflict, nil)
	}
	m.counter++
	v := strconv.FormatUint(m.counter, 10)
	if m.objects == nil {
		m.objects = make(map[string]memObject)
	}
	m.objects[key] = memObject{data: buf, version: v}
	return v, nil
}

// Delete implements Deleter.
func (m *MemStore) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.objects, key)
	m.mu.Unlock()
	return nil
}

// List implements Lister, in lexical order; fn may call the store.
func (m *MemStore) List(ctx context.Context, prefix string, fn func(key string) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	var keys []string
	for k := range m.objects {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	m.mu.Unlock()
	slices.Sort(keys)
	return listing.Each(ctx, keys, fn)
}

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
	return m.ListBlobsConsistent(ctx, prefix, "", fn)
}

var _ ConsistentBlobLister = (*MemStore)(nil)

// ListBlobsConsistent implements ConsistentBlobLister; fn may call the
// store.
func (m *MemStore) ListBlobsConsistent(ctx context.Context, prefix, after string, fn func(BlobInfo) error) error {
	m.blobs.mu.Lock()
	var infos []BlobInfo
	for k, b := range m.blobs.blobs {
		if strings.HasPrefix(k, prefix) && k > after {
			infos = append(infos, BlobInfo{Key: k, Size: int64(len(b.data)), Modified: b.modified})
		}
	}
	m.blobs.mu.Unlock()
	return listing.Each(ctx, infos, fn)
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
