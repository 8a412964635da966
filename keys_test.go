package writefence_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

var hostileNames = []string{
	"a", "b", "a/b", "b/c", "c", "/", "//", ".", "..", "../..", ".a", "a.", "a..b",
	"%", "%2F", "%25", "a%2Fb", "{", "}", "{a}", "\x00", "a\x00b", "\xff\xfe", "\xc3",
	"é", "s", "_", "_brand", "brand", " ", "a b", "\n", "\\", "*", "?", "#",
	strings.Repeat("x", 256), strings.Repeat("/", 256), strings.Repeat("\xff", 256),
}

// TestShardKeyInjective checks that no two distinct (plugin, shard) pairs
// share a key, including the pairs that naive joining confuses, and that
// every key avoids the reserved space and fits MaxKeyLen.
func TestShardKeyInjective(t *testing.T) {
	for _, prefix := range []string{"", "p/", "tenant{1}/"} {
		seen := make(map[string][2]string)
		tooLong := 0
		brand := writefence.BrandKey(prefix)
		reserved := strings.TrimSuffix(brand, "brand")
		for _, plugin := range hostileNames {
			for _, shard := range hostileNames {
				key, err := writefence.ShardKey(prefix, plugin, shard)
				if err != nil {
					// Only two long names together may escape past MaxKeyLen.
					var ia *writefence.InvalidArgumentError
					require.ErrorAs(t, err, &ia)
					require.Equal(t, "key", ia.Arg)
					require.Greater(t, len(plugin)+len(shard), 300)
					tooLong++
					continue
				}
				if prev, ok := seen[key]; ok {
					t.Fatalf("(%q, %q) and (%q, %q) share key %q", prev[0], prev[1], plugin, shard, key)
				}
				seen[key] = [2]string{plugin, shard}
				assert.NotEqual(t, brand, key)
				assert.False(t, strings.HasPrefix(key, reserved), "key %q is in the reserved space %q", key, reserved)
				assert.LessOrEqual(t, len(key), writefence.MaxKeyLen)
				rest := strings.TrimPrefix(key, orDefault(prefix))
				assert.Equal(t, 1, strings.Count(rest[len("s/"):], "/"), "key %q", key)
				for _, seg := range strings.Split(rest, "/") {
					assert.NotContains(t, []string{"", ".", ".."}, seg, "key %q has a path segment %q", key, seg)
				}
				for i := 0; i < len(rest); i++ {
					assert.True(t, rest[i] > 0x20 && rest[i] < 0x7f && rest[i] != '{' && rest[i] != '}',
						"key %q carries byte %#x unescaped", key, rest[i])
				}
			}
		}
		t.Logf("prefix %q: %d distinct keys, %d pairs refused as too long, of %d pairs", prefix, len(seen), tooLong, len(hostileNames)*len(hostileNames))
	}
}

func orDefault(prefix string) string {
	if prefix == "" {
		return writefence.DefaultPrefix
	}
	return prefix
}

func TestShardKeyInvalid(t *testing.T) {
	cases := []struct{ plugin, shard, arg string }{
		{"", "s", "plugin"},
		{"p", "", "shard"},
		{strings.Repeat("x", 257), "s", "plugin"},
		{"p", strings.Repeat("x", 1024), "shard"},
		{strings.Repeat("\x00", 200), strings.Repeat("\x00", 200), "key"}, // escapes to 1200 bytes
	}
	for _, tc := range cases {
		_, err := writefence.ShardKey("", tc.plugin, tc.shard)
		require.ErrorIs(t, err, writefence.ErrInvalidArgument)
		var ia *writefence.InvalidArgumentError
		require.ErrorAs(t, err, &ia)
		assert.Equal(t, tc.arg, ia.Arg)
	}
}

func TestShardKeyReadable(t *testing.T) {
	key, err := writefence.ShardKey("", "wal", "shard-0001.log")
	require.NoError(t, err)
	assert.Equal(t, "writefence/s/wal/shard-0001.log", key)
	key, err = writefence.ShardKey("m/", "a/b", "..")
	require.NoError(t, err)
	assert.Equal(t, "m/s/a%2Fb/%2E.", key)
	assert.Equal(t, "writefence/_brand", writefence.BrandKey(""))
}
