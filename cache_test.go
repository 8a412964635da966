package writefence_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// BenchmarkManyShards measures a writer pushing round-robin to 100,000
// shards of the in-memory store: the round trips of a steady push (each
// shard's version is remembered, so a push makes one write and no read)
// and the Fence's memory per shard (the heap the version cache holds once
// every shard was pushed, after a collection), with the MemStore's own
// memory left out by a store that keeps nothing.
func BenchmarkManyShards(b *testing.B) {
	const shards = 100_000
	ctx := context.Background()
	store := counted(&forgetfulStore{})
	names := make([]string, shards)
	for i := range names {
		names[i] = fmt.Sprintf("shard-%06d", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f := &writefence.Fence{Store: store}
	for i, name := range names {
		if err := f.Push(ctx, "wal", name, "w", 1, []byte("x")); err != nil {
			b.Fatal(i, err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perShard := float64(after.HeapAlloc-before.HeapAlloc) / shards
	start := roundTrips(store)
	epoch, i := uint64(1), 0
	b.ReportAllocs()
	for b.Loop() {
		if i == 0 {
			epoch++
		}
		if err := f.Push(ctx, "wal", names[i], "w", epoch, []byte("x")); err != nil {
			b.Fatal(err)
		}
		i = (i + 1) % shards
	}
	b.ReportMetric(float64(roundTrips(store)-start)/float64(b.N), "roundtrips/op")
	b.ReportMetric(perShard, "bytes/shard")
	runtime.KeepAlive(f)
}

// forgetfulStore accepts every conditional write and keeps nothing, so that
// a benchmark measures the Fence's memory alone. Its versions are 32 hex
// digits, as S3's ETags are.
type forgetfulStore struct{ n atomic.Uint64 }

func (s *forgetfulStore) Get(context.Context, string) ([]byte, string, error) {
	return nil, "", writefence.ErrNotFound
}

func (s *forgetfulStore) PutIfVersion(context.Context, string, []byte, string) (string, error) {
	return fmt.Sprintf("%032x", s.n.Add(1)), nil
}

// TestRememberedEmptyPayload: an update or a commit over a record its
// Fence remembers hands next the recorded payload as a read does: a record
// with an empty payload (created by a seal, or pushed with nil) gives an
// empty payload, never nil, which next gets only when there is no record.
func TestRememberedEmptyPayload(t *testing.T) {
	ctx := context.Background()
	for _, create := range []struct {
		name  string
		write func(f *writefence.Fence) error
	}{
		{"seal", func(f *writefence.Fence) error { return f.Seal(ctx, "wal", "0", "a", 1) }},
		{"push nil", func(f *writefence.Fence) error { return f.Push(ctx, "wal", "0", "a", 1, nil) }},
		{"update to nil", func(f *writefence.Fence) error {
			return f.Update(ctx, "wal", "0", "a", 1, func([]byte) ([]byte, error) { return nil, nil })
		}},
	} {
		for _, op := range []string{"update", "commit"} {
			for _, remembered := range []bool{true, false} {
				t.Run(fmt.Sprintf("%s/%s/remembered=%v", create.name, op, remembered), func(t *testing.T) {
					mem := &writefence.MemStore{}
					f := &writefence.Fence{Store: mem}
					require.NoError(t, create.write(f))
					if !remembered {
						f = &writefence.Fence{Store: mem}
					}
					var got []byte
					var err error
					switch op {
					case "update":
						err = f.Update(ctx, "wal", "0", "a", 2, func(p []byte) ([]byte, error) {
							got = p
							return []byte("next"), nil
						})
					case "commit":
						err = f.Commit(ctx, "wal", "0", "a", 2, func(m writefence.Manifest) (writefence.Manifest, error) {
							got = m.Payload
							return writefence.Manifest{Payload: []byte("next")}, nil
						})
					}
					require.NoError(t, err)
					assert.NotNil(t, got, "next got nil, as if there were no record")
					assert.Empty(t, got)
				})
			}
		}
	}
}

// TestRememberedVersionBelowTheFloor (promise 31): on a store whose
// versions are the bytes' hashes (S3's ETags), a record set back to the
// very bytes its Fence wrote last takes back the version that Fence
// remembers. Once another Fence's seal or settle has raised the shard's
// floor above what the Fence wrote, no write of it decides on what it
// remembers: each reads the record, finds it below the floor and is
// refused, writing nothing.
func TestRememberedVersionBelowTheFloor(t *testing.T) {
	ctx := t.Context()
	key := mustKey(t, "wal", "0")
	same := func(cur []byte) ([]byte, error) { return cur, nil }
	for _, raise := range []struct {
		name  string
		by    string
		floor func(s *contentVersioned, other *writefence.Fence) error
	}{
		{"seal", "b", func(_ *contentVersioned, other *writefence.Fence) error {
			return other.Seal(ctx, "wal", "0", "b", 20)
		}},
		{"settle", "op", func(s *contentVersioned, other *writefence.Fence) error {
			s.mu.Lock()
			delete(s.data, key)
			s.mu.Unlock()
			return other.Settle(ctx, "wal", "0", writefence.Settlement{Lost: true, Writer: "op", Floor: 19, Epoch: 20, Payload: []byte("s")})
		}},
	} {
		t.Run(raise.name, func(t *testing.T) {
			s := &contentVersioned{}
			a := &writefence.Fence{Store: s, KeepFloor: true}
			require.NoError(t, a.Seal(ctx, "wal", "0", "a", 10))
			require.NoError(t, a.Push(ctx, "wal", "0", "a", 11, []byte("eleven")))
			remembered, v, err := s.Get(ctx, key)
			require.NoError(t, err)
			require.NoError(t, raise.floor(s, &writefence.Fence{Store: s, KeepFloor: true}))
			s.raw(key, remembered)
			_, restored, err := s.Get(ctx, key)
			require.NoError(t, err)
			require.Equal(t, v, restored, "the version a remembers is back")

			want := writefence.EpochRegressedError{Key: key, Epoch: 12, Seen: 20, SeenWriter: raise.by, Floor: true, Found: 11, FoundWriter: "a"}
			for op, call := range map[string]func() error{
				"push":   func() error { return a.Push(ctx, "wal", "0", "a", 12, []byte("twelve")) },
				"update": func() error { return a.Update(ctx, "wal", "0", "a", 12, same) },
				"commit": func() error {
					return a.Commit(ctx, "wal", "0", "a", 12, func(m writefence.Manifest) (writefence.Manifest, error) { return m, nil })
				},
				"seal": func() error { return a.Seal(ctx, "wal", "0", "a", 12) },
			} {
				want.Op = op
				requireRegressed(t, call(), want)
				got, _, err := s.Get(ctx, key)
				require.NoError(t, err)
				assert.Equal(t, remembered, got, "%s wrote nothing", op)
			}
		})
	}
}

// countedStore counts the reads of a MemStore.
type countedStore struct {
	*writefence.MemStore
	gets int
}

func (s *countedStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.gets++
	return s.MemStore.Get(ctx, key)
}

func (s *countedStore) Capabilities() writefence.ConditionalStore { return s }

// namedStore is a countedStore that declares bytesNamed: a store whose
// versions name its bytes, as S3's and GCS's do.
type namedStore struct {
	*countedStore
	writefence.NamesBytes
}

func (s namedStore) Capabilities() writefence.ConditionalStore { return s }

// TestRememberedLongRecord: a commit over a record its Fence wrote, longer
// than the part every store checks on a write (1343 bytes), reads it
// first, so that damage past that part is found; on a store whose
// versions name its bytes, which no damage in place can keep, it reads
// nothing, whatever the record's size.
func TestRememberedLongRecord(t *testing.T) {
	ctx := t.Context()
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprint("named=", named), func(t *testing.T) {
			counted := &countedStore{MemStore: &writefence.MemStore{}}
			var s writefence.ConditionalStore = counted
			if named {
				s = namedStore{countedStore: counted}
			}
			f := &writefence.Fence{Store: s, Blobs: &writefence.MemStore{}}
			var refs []writefence.BlobRef
			for i := range 30 {
				ref, err := f.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader(fmt.Sprint("segment ", i)))
				require.NoError(t, err)
				refs = append(refs, ref)
			}
			add := func(refs ...writefence.BlobRef) func(writefence.Manifest) (writefence.Manifest, error) {
				return func(m writefence.Manifest) (writefence.Manifest, error) {
					m.Blobs = append(m.Blobs, refs...)
					return m, nil
				}
			}
			require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, add(refs[:29]...)))
			key, err := keys.Shard("", "wal", "0")
			require.NoError(t, err)
			data, _, err := counted.MemStore.Get(ctx, key)
			require.NoError(t, err)
			require.Greater(t, len(data), writefence.WriteChecked, "a record longer than every store checks on a write")
			gets := counted.gets
			require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, add(refs[29])))
			if named {
				assert.Equal(t, gets, counted.gets, "no read of the record")
			} else {
				assert.Equal(t, gets+1, counted.gets, "one read of the record")
			}
		})
	}
}
