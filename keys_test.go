package writefence_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
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

func TestEscape(t *testing.T) {
	cases := map[string]string{
		"plain/v1":       "plain/v1",
		"line\nforged":   `line\nforged`,
		"\x1b[31mred":    `\x1b[31mred`,
		"nul\x00":        `nul\x00`,
		"bad\xffutf8":    `bad\xffutf8`,
		`quote"back\`:    `quote\"back\\`,
		"é ok":           "é ok",
		"\u202eoverride": `\u202eoverride`,
	}
	for in, want := range cases {
		assert.Equal(t, want, escape.String(in))
	}
	long := escape.String(strings.Repeat("a", 10<<10))
	assert.Equal(t, strings.Repeat("a", 256)+"...(10240 bytes)", long)
}

// TestNestedPrefixRefused: a prefix that would reach into another Fence's
// keys (its shard, blob or reserved space) is refused before any I/O, as
// one that does not end in "/" (promise 28).
func TestNestedPrefixRefused(t *testing.T) {
	mem := &writefence.MemStore{}
	for _, prefix := range []string{"a/b/", "a/s/", "x/_lease/", "a"} {
		f := &writefence.Fence{Store: mem, Prefix: prefix}
		err := f.Push(t.Context(), "wal", "0", "w", 1, []byte("x"))
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "%q", prefix)
		_, err = f.Collect(t.Context(), "wal", "0", writefence.GCOptions{})
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "%q", prefix)
	}
	assert.Empty(t, testserver.Keys(t, mem), "nothing written")
	require.NoError(t, (&writefence.Fence{Store: mem, Prefix: "a/c/"}).Push(t.Context(), "wal", "0", "w", 1, []byte("x")))
}

// TestBlobIDsSortInTheOrderMade: a Fence's blob ids are 32 hexadecimal
// digits, the time in milliseconds then random ones, and each sorts after
// the one before, in the same millisecond, after the clock stepped back,
// and when the random digits carry over into the time's.
func TestBlobIDsSortInTheOrderMade(t *testing.T) {
	var ids writefence.BlobIDs
	t0 := time.UnixMilli(1_700_000_000_000)
	next := func(now time.Time) string {
		t.Helper()
		id, err := ids.Next(now)
		require.NoError(t, err)
		require.Regexp(t, `^[0-9a-f]{32}$`, id)
		return id
	}
	last := ""
	for i, now := range []time.Time{t0, t0, t0.Add(-time.Second), t0.Add(time.Millisecond), t0.Add(time.Millisecond)} {
		id := next(now)
		assert.Greater(t, id, last, "id %d", i)
		last = id
	}
	assert.Equal(t, fmt.Sprintf("%012x", t0.Add(time.Millisecond).UnixMilli()), last[:12], "the time of the last")
	assert.Equal(t, last[:12], ids.Latest(t0), "latest, the clock behind the last id")
	assert.Equal(t, fmt.Sprintf("%012x", t0.Add(time.Second).UnixMilli()), ids.Latest(t0.Add(time.Second)), "latest, the clock ahead")
	ids.SetRandom([10]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	id := next(t0)
	assert.Greater(t, id, last)
	assert.Equal(t, fmt.Sprintf("%012x%020x", t0.Add(2*time.Millisecond).UnixMilli(), 0), id, "carried into the time")
}
