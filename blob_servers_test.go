//go:build !writefence_novalkey && !writefence_nominio && !writefence_nosdk

package writefence_test

import (
	"hash/crc32"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
)

// Fence.Blobs (blob.go) on the real servers of two adapters: the
// manifests in one store, the blobs in another.

// TestValkeyBlobsElsewhere: the deployment the adapter's documentation
// names for blobs, the manifests in Valkey and the blobs in an object
// store (MinIO here) through Fence.Blobs: a blob is put, committed in a
// manifest that Valkey holds, read back checked, and a deposed writer's
// blob is collected while the referenced one stays.
func TestValkeyBlobsElsewhere(t *testing.T) {
	ctx := t.Context()
	c := newValkeyClient(t)
	prefix := valkeyPrefix(t, c)
	mc, bucket := newMinioBucket(t)
	blobs := writefence.NewMinioStore(mc, bucket)
	f := &writefence.Fence{Store: writefence.NewValkeyStore(c), Blobs: blobs, Prefix: prefix}

	ref, err := f.PutBlob(ctx, "wal", "0", "a", 1, newPattern(1<<20, 5))
	require.NoError(t, err)
	require.NoError(t, f.Commit(ctx, "wal", "0", "a", 2, appendBlob(ref)))
	got, err := readBlob(t, f, ref.Name)
	require.NoError(t, err)
	assert.Equal(t, patternSum(1<<20, 5), crc32.Checksum([]byte(got), crc32.MakeTable(crc32.Castagnoli)))

	record, err := keys.Shard(prefix, "wal", "0")
	require.NoError(t, err)
	n, err := c.Exists(ctx, record).Result()
	require.NoError(t, err)
	assert.Equal(t, int64(1), n, "the manifest is in Valkey")
	_, err = blobs.StatBlob(ctx, record)
	require.ErrorIs(t, err, writefence.ErrNotFound, "and not in the bucket")
	blobKey, err := keys.Blob(prefix, "wal", "0", ref.Name)
	require.NoError(t, err)
	_, err = blobs.StatBlob(ctx, blobKey)
	require.NoError(t, err, "the blob is in the bucket")

	stale, err := f.PutBlob(ctx, "wal", "0", "a", 3, strings.NewReader("never committed"))
	require.NoError(t, err)
	require.NoError(t, f.Seal(ctx, "wal", "0", "b", 4))
	report, err := f.Collect(ctx, "wal", "0", writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err)
	assert.Equal(t, sortedNames(stale), blobNames(report.Deleted))
	assert.Equal(t, sortedNames(ref), blobNames(report.Referenced))
}
