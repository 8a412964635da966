package writefence

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
)

// countedStore counts the reads of a MemStore.
type countedStore struct {
	*MemStore
	gets int
}

func (s *countedStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.gets++
	return s.MemStore.Get(ctx, key)
}

func (s *countedStore) Capabilities() ConditionalStore { return s }

// namedStore is a countedStore that declares bytesNamed: a store whose
// versions name its bytes, as S3's and GCS's do.
type namedStore struct{ *countedStore }

func (s namedStore) Capabilities() ConditionalStore { return s }
func (namedStore) versionNamesBytes()               {}

// TestRememberedLongRecord: a commit over a record its Fence wrote, longer
// than the part every store checks on a write (1343 bytes), reads it
// first, so that damage past that part is found; on a store whose
// versions name its bytes, which no damage in place can keep, it reads
// nothing, whatever the record's size.
func TestRememberedLongRecord(t *testing.T) {
	ctx := t.Context()
	for _, named := range []bool{false, true} {
		t.Run(fmt.Sprint("named=", named), func(t *testing.T) {
			counted := &countedStore{MemStore: &MemStore{}}
			var s ConditionalStore = counted
			if named {
				s = namedStore{counted}
			}
			f := &Fence{Store: s, Blobs: &MemStore{}}
			var refs []BlobRef
			for i := range 30 {
				ref, err := f.PutBlob(ctx, "wal", "0", "a", 1, strings.NewReader(fmt.Sprint("segment ", i)))
				require.NoError(t, err)
				refs = append(refs, ref)
			}
			add := func(refs ...BlobRef) func(Manifest) (Manifest, error) {
				return func(m Manifest) (Manifest, error) {
					m.Blobs = append(m.Blobs, refs...)
					return m, nil
				}
			}
			require.NoError(t, f.Commit(ctx, "wal", "0", "a", 1, add(refs[:29]...)))
			key, err := keys.Shard("", "wal", "0")
			require.NoError(t, err)
			data, _, err := counted.MemStore.Get(ctx, key)
			require.NoError(t, err)
			require.Greater(t, len(data), writeChecked, "a record longer than every store checks on a write")
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
