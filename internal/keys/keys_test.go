package keys

import (
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		brand := Brand(prefix)
		reserved := strings.TrimSuffix(brand, "brand")
		for _, plugin := range hostileNames {
			for _, shard := range hostileNames {
				key, err := Shard(prefix, plugin, shard)
				if err != nil {
					// Only two long names together may escape past MaxKeyLen.
					var ia *Error
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
				assert.LessOrEqual(t, len(key), MaxKeyLen)
				rest := strings.TrimPrefix(key, prefixOrDefault(prefix))
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

func TestShardKeyInvalid(t *testing.T) {
	cases := []struct{ plugin, shard, arg string }{
		{"", "s", "plugin"},
		{"p", "", "shard"},
		{strings.Repeat("x", 257), "s", "plugin"},
		{"p", strings.Repeat("x", 1024), "shard"},
		{strings.Repeat("\x00", 200), strings.Repeat("\x00", 200), "key"}, // escapes to 1200 bytes
	}
	for _, tc := range cases {
		_, err := Shard("", tc.plugin, tc.shard)
		var ia *Error
		require.ErrorAs(t, err, &ia)
		assert.Equal(t, tc.arg, ia.Arg)
	}
}

func TestShardKeyReadable(t *testing.T) {
	key, err := Shard("", "wal", "shard-0001.log")
	require.NoError(t, err)
	assert.Equal(t, "writefence/s/wal/shard-0001.log", key)
	key, err = Shard("m/", "a/b", "..")
	require.NoError(t, err)
	assert.Equal(t, "m/s/a%2Fb/%2E.", key)
	assert.Equal(t, "writefence/_brand", Brand(""))
}

func TestLease(t *testing.T) {
	k, err := Lease("", "a/b")
	require.NoError(t, err)
	assert.Equal(t, "writefence/_lease/a%2Fb", k)
	k, err = Lease("p/", ".x")
	require.NoError(t, err)
	assert.Equal(t, "p/_lease/%2Ex", k)

	for _, name := range []string{"", strings.Repeat("n", MaxNameLen+1)} {
		_, err := Lease("", name)
		var ke *Error
		assert.ErrorAs(t, err, &ke, "name of %d bytes", len(name))
	}
	_, err = Lease(strings.Repeat("p", MaxKeyLen), "x")
	var ke *Error
	assert.ErrorAs(t, err, &ke)

	// Random names, including every byte value: lease keys never meet a
	// shard key or the brand key, and distinct names give distinct keys.
	rng := rand.New(rand.NewPCG(1, 2))
	name := func() string {
		b := make([]byte, 1+rng.IntN(6))
		for i := range b {
			b[i] = "ab/_.%s\x00"[rng.IntN(8)]
			if rng.IntN(8) == 0 {
				b[i] = byte(rng.IntN(256))
			}
		}
		return string(b)
	}
	seen := make(map[string]string)
	for range 20000 {
		n, plugin, shard := name(), name(), name()
		lk, err := Lease("", n)
		require.NoError(t, err)
		sk, err := Shard("", plugin, shard)
		require.NoError(t, err)
		require.NotEqual(t, sk, lk)
		require.NotEqual(t, Brand(""), lk)
		if prev, ok := seen[lk]; ok {
			require.Equal(t, prev, n, "two names share the key %q", lk)
		}
		seen[lk] = n
	}
}

// TestParseShard: every key Shard returns parses back to its names, and
// keys Shard never returns (another space, a non-canonical escape, a
// missing part) do not parse.
func TestParseShard(t *testing.T) {
	for _, prefix := range []string{"", "p/"} {
		for _, plugin := range hostileNames[:20] {
			for _, shard := range hostileNames {
				key, err := Shard(prefix, plugin, shard)
				if err != nil {
					continue
				}
				p, s, ok := ParseShard(prefix, key)
				require.True(t, ok, "key %q", key)
				require.Equal(t, [2]string{plugin, shard}, [2]string{p, s})
			}
		}
	}
	for _, key := range []string{"writefence/s/%41/b", "writefence/s/a", "writefence/s/a/b/c", "writefence/_brand", "other/s/a/b", "writefence/s/a/%4", "writefence/s//b"} {
		_, _, ok := ParseShard("", key)
		assert.False(t, ok, "key %q", key)
	}
}

// TestBrandKeyReserved: the brand key sits in the reserved space under any
// prefix, where no (plugin, shard) can reach, whatever the names.
func TestBrandKeyReserved(t *testing.T) {
	for _, prefix := range []string{"", "p/", "_", "s/", "x_brand/"} {
		brand := Brand(prefix)
		p := prefixOrDefault(prefix)
		require.True(t, strings.HasPrefix(brand, p+"_"), "brand key %q is reserved under %q", brand, p)
		n := 0
		for _, plugin := range hostileNames {
			for _, shard := range hostileNames {
				key, err := Shard(prefix, plugin, shard)
				if err != nil {
					continue
				}
				n++
				require.NotEqual(t, brand, key, "(%q, %q)", plugin, shard)
				require.NotEqual(t, byte('_'), key[len(p)], "(%q, %q) -> %q starts in the reserved space", plugin, shard, key)
			}
		}
		require.Greater(t, n, len(hostileNames)*len(hostileNames)/2)
	}
}

func TestBlobName(t *testing.T) {
	for _, writer := range []string{"w", "node-a", "a/b c", "%41", ".x"} {
		name := BlobName(7, writer, "0123456789abcdef0123456789abcdef")
		epoch, id, w, ok := ParseBlobName(name)
		if !ok || epoch != 7 || id != "0123456789abcdef0123456789abcdef" || w != writer {
			t.Errorf("ParseBlobName(%q) = %d %q %q %v", name, epoch, id, w, ok)
		}
		if strings.Contains(name, "/") {
			t.Errorf("blob name %q holds a slash", name)
		}
	}
	if name := BlobName(0xabcdef, "w", "0123456789abcdef0123456789abcdef"); name != "0000000000abcdef-0123456789abcdef0123456789abcdef-w" {
		t.Errorf("BlobName = %q: the epoch is 16 lower-case hexadecimal digits", name)
	}
	if p := BlobEpochPrefix(0xabcdef); p != "0000000000abcdef-" {
		t.Errorf("BlobEpochPrefix = %q", p)
	}
	for _, bad := range []string{"", "x", "0000000000000007-0123456789abcdef0123456789abcdef-",
		"0000000000ABCDEF-0123456789abcdef0123456789abcdef-w",
		"000000000000000G-0123456789abcdef0123456789abcdef-w", "0000000000000007-0123456789ABCDEF0123456789abcdef-w",
		"0000000000000007-0123456789abcdef0123456789abcdef-%41"} {
		if _, _, _, ok := ParseBlobName(bad); ok {
			t.Errorf("ParseBlobName(%q) accepted", bad)
		}
	}
	space, err := Blobs("", "wal", "0")
	if err != nil || space != "writefence/b/wal/0/" {
		t.Errorf("Blobs = %q, %v", space, err)
	}
	shard, _ := Shard("", "wal", "0")
	if strings.HasPrefix(shard, space) || strings.HasPrefix(space, shard) {
		t.Errorf("blob space %q and shard key %q overlap", space, shard)
	}
}

// TestCheckPrefix: a prefix ends in "/", and none of its segments names
// a space of another prefix's keys, so no prefix reaches into another's:
// a Fence under "a/b/" would share keys with one under "a/".
func TestCheckPrefix(t *testing.T) {
	for _, ok := range []string{"", "writefence/", "a/", "a/c/", "{app}/", "tenant/x/", "s1/", "bs/", "x_/"} {
		assert.NoError(t, CheckPrefix(ok), "%q", ok)
	}
	for _, bad := range []string{"a", "a/b/", "a/s/", "s/", "b/", "x/_lease/", "_/", "a/b", "a//"} {
		assert.Error(t, CheckPrefix(bad), "%q", bad)
	}
	// Whatever two valid prefixes, neither's keys start with the other's
	// spaces: check it on every pair of a set of prefixes.
	prefixes := []string{"a/", "a/c/", "a/c/d/", "wf/", "wf/x/"}
	for _, p := range prefixes {
		for _, q := range prefixes {
			if p == q || !strings.HasPrefix(q, p) {
				continue
			}
			for _, space := range []string{Shards(p), p + "b/", p + "_"} {
				assert.False(t, strings.HasPrefix(Shards(q), space) || strings.HasPrefix(q+"b/", space) || strings.HasPrefix(q+"_", space),
					"%q reaches into %q's space %q", q, p, space)
			}
		}
	}
}

// FuzzParseBlobName: ParseBlobName never panics and is BlobName's exact
// inverse: a name it accepts is the one BlobName makes of what it
// returned, and every name BlobName makes of an epoch, a non-empty writer
// and an id of 32 lower-case hexadecimal digits parses back to them.
func FuzzParseBlobName(f *testing.F) {
	const id = "0123456789abcdef0123456789abcdef"
	f.Add(BlobName(5, "node-4", id), uint64(5), "node-4")
	f.Add(BlobName(^uint64(0), "a b/%c\x00\xff", id), uint64(0), "a b/%c\x00\xff")
	f.Add("0000000000000005-"+id+"-", uint64(1), "")
	f.Add("000000000000000G-"+id+"-w", uint64(1), "w")
	f.Add("0000000000000005-"+strings.ToUpper(id)+"-w", uint64(1), "%")
	f.Add("", uint64(0), "x")
	f.Fuzz(func(t *testing.T, name string, epoch uint64, writer string) {
		if e, gotID, w, ok := ParseBlobName(name); ok {
			if w == "" || len(gotID) != 32 || !IsLowerHex(gotID) || strings.ToLower(gotID) != gotID {
				t.Fatalf("ParseBlobName(%q) accepted writer %q, id %q", name, w, gotID)
			}
			if again := BlobName(e, w, gotID); again != name {
				t.Fatalf("ParseBlobName(%q) = %d, %q, %q, which BlobName makes %q", name, e, gotID, w, again)
			}
		}
		if writer == "" {
			return
		}
		made := BlobName(epoch, writer, id)
		e, gotID, w, ok := ParseBlobName(made)
		if !ok || e != epoch || gotID != id || w != writer {
			t.Fatalf("BlobName(%d, %q, %q) = %q parses as %d, %q, %q, %v", epoch, writer, id, made, e, gotID, w, ok)
		}
	})
}
