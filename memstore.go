package writefence

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
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

// PutIfVersion implements ConditionalStore, comparing and writing under one
// lock.
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
	for _, k := range keys {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}
