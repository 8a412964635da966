package keys

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseLeaseRoundTrip: every lease key parses back to its name, and a
// key of another space, or not in canonical form, does not.
func TestParseLeaseRoundTrip(t *testing.T) {
	for _, prefix := range []string{"", "p/", "tenant{1}/"} {
		for _, name := range hostileNames {
			key, err := Lease(prefix, name)
			require.NoError(t, err)
			got, ok := ParseLease(prefix, key)
			require.True(t, ok, "%q", key)
			assert.Equal(t, name, got)
		}
		shard, err := Shard(prefix, "a", "b")
		require.NoError(t, err)
		for _, key := range []string{Brand(prefix), shard, Leases(prefix) + "%41", Leases(prefix), Leases(prefix) + "a/b"} {
			_, ok := ParseLease(prefix, key)
			assert.False(t, ok, "%q", key)
		}
	}
}

// TestParseBlobRoundTrip: every blob key parses back to its plugin, shard
// and name; a shard key, a prefix of a blob key and a name Blob refuses
// do not.
func TestParseBlobRoundTrip(t *testing.T) {
	name := BlobName(7, "node/a", "0123456789abcdef0123456789abcdef")
	for _, prefix := range []string{"", "p/"} {
		for _, plugin := range hostileNames[:20] {
			for _, shard := range hostileNames[:20] {
				key, err := Blob(prefix, plugin, shard, name)
				require.NoError(t, err)
				p, s, n, ok := ParseBlob(prefix, key)
				require.True(t, ok, "%q", key)
				assert.Equal(t, [3]string{plugin, shard, name}, [3]string{p, s, n})
			}
		}
		space, err := Blobs(prefix, "a", "b")
		require.NoError(t, err)
		shard, err := Shard(prefix, "a", "b")
		require.NoError(t, err)
		for _, key := range []string{shard, space, space + "x", AllBlobs(prefix) + "a/b", AllBlobs(prefix) + "%61/b/" + name} {
			_, _, _, ok := ParseBlob(prefix, key)
			assert.False(t, ok, "%q", key)
		}
	}
}
