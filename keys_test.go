package writefence_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/testserver"
)

// TestHostileNamesStayInTheirKey: names that are valid however hostile
// (path separators, dot segments, NUL, newlines, terminal escapes, percent
// signs) land under an escaped key inside the shard space and read back.
func TestHostileNamesStayInTheirKey(t *testing.T) {
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem, Prefix: "tenant/"}
	names := []string{"..", "../../etc/passwd", "a/b", "\x00", "line\nbreak", "\x1b[31mred", "%2F", "_brand", "s/x", " "}
	for i, n := range names {
		require.NoError(t, f.Push(t.Context(), n, n, "w", uint64(i+1), []byte(n)))
	}
	keys := testserver.Keys(t, mem)
	require.Len(t, keys, len(names))
	for _, k := range keys {
		assert.True(t, strings.HasPrefix(k, "tenant/s/"), k)
		segments := strings.Split(k, "/")
		assert.Len(t, segments, 4, "key %q splits into prefix, space, plugin and shard", k)
		for _, seg := range segments {
			assert.NotContains(t, []string{"", ".", ".."}, seg, "key %q has a dot or empty segment", k)
		}
		for _, c := range []byte(k) {
			assert.True(t, c > ' ' && c < 0x7f, "key %q carries byte %#x", k, c)
		}
	}
	for i, n := range names {
		epoch, _, payload, err := f.Latest(t.Context(), n, n)
		require.NoError(t, err)
		assert.Equal(t, uint64(i+1), epoch)
		assert.Equal(t, n, string(payload))
	}
}
