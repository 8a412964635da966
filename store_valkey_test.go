package writefence_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// valkeyPaths are the two PutIfVersion implementations; every behaviour test
// runs on both.
var valkeyPaths = []struct {
	name   string
	script bool
}{
	{"watch", false},
	{"script", true},
}

// newValkeyClient connects to the test server; opts adjust the options.
func newValkeyClient(t *testing.T, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: serverEnv(t, "WRITEFENCE_VALKEY_ADDR")}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// valkeyPrefix returns a key prefix of the test's own and deletes every key
// under it when the test ends. It never flushes: other tests share the
// server.
func valkeyPrefix(t *testing.T, c *redis.Client) string {
	t.Helper()
	prefix := uniqueName(t) + "/"
	t.Cleanup(func() { deleteValkeyKeys(t, c, prefix+"*") })
	return prefix
}

func deleteValkeyKeys(t *testing.T, c *redis.Client, pattern string) {
	t.Helper()
	ctx := context.Background()
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		assert.NoError(t, c.Del(ctx, iter.Val()).Err())
	}
	assert.NoError(t, iter.Err())
}

func TestValkeyLayout(t *testing.T) {
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c := newValkeyClient(t)
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			key := valkeyPrefix(t, c) + "k"

			v1, err := store.PutIfVersion(ctx, key, []byte("same"), "")
			require.NoError(t, err)
			raw, err := c.Get(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, valkeyRawValue(v1, "same"), raw, "the value is the digest, the token, then the data")
			assert.Len(t, v1, 32)
			_, err = hex.DecodeString(v1)
			assert.NoError(t, err, "the token is hex")

			v2, err := store.PutIfVersion(ctx, key, []byte("same"), v1)
			require.NoError(t, err)
			assert.NotEqual(t, v1, v2, "rewriting the same bytes still draws a new token")

			data, v, err := store.Get(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, "same", string(data))
			assert.Equal(t, v2, v)

			_, err = store.PutIfVersion(ctx, key, []byte("x"), v1)
			require.ErrorIs(t, err, writefence.ErrConflict, "an older token no longer matches")
			assert.Contains(t, err.Error(), "writefence: valkey put ")

			_, err = store.PutIfVersion(ctx, key, []byte("x"), "not-a-token")
			require.ErrorIs(t, err, writefence.ErrConflict, "a token of another form cannot match")
			_, err = store.PutIfVersion(ctx, valkeyPrefix(t, c)+"absent", []byte("x"), v2)
			require.ErrorIs(t, err, writefence.ErrConflict, "an update of an absent key")

			require.NoError(t, store.Delete(ctx, key))
			require.NoError(t, store.Delete(ctx, key), "deleting an absent key is not an error")
			_, _, err = store.Get(ctx, key)
			require.ErrorIs(t, err, writefence.ErrNotFound)
		})
	}
}

// valkeyRawValue is a value in the store's layout: the SHA-1 of token and
// data in hex, the token, the data.
func valkeyRawValue(token, data string) string {
	sum := sha1.Sum([]byte(token + data))
	return hex.EncodeToString(sum[:]) + token + data
}

// TestValkeyForeignValues: keys the store did not write are never taken for
// absent, and never overwritten by a create-only put: they are damaged
// values, with a version of their own.
func TestValkeyForeignValues(t *testing.T) {
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c := newValkeyClient(t)
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			prefix := valkeyPrefix(t, c)
			for name, value := range map[string]string{"empty": "", "short": "abc", "no token": strings.Repeat("z", 40)} {
				key := prefix + name
				require.NoError(t, c.Set(ctx, key, value, 0).Err())
				_, _, err := store.Get(ctx, key)
				var ce *writefence.CorruptError
				require.ErrorAs(t, err, &ce, name)
				assert.NotErrorIs(t, err, writefence.ErrNotFound, name)
				assert.NotErrorIs(t, err, writefence.ErrConflict, name)
				assert.True(t, strings.HasPrefix(ce.Version, "damaged-"), "%s: %s", name, ce.Version)

				_, err = store.PutIfVersion(ctx, key, []byte("x"), "")
				require.ErrorIs(t, err, writefence.ErrCorrupt, name)
				got, err := c.Get(ctx, key).Result()
				require.NoError(t, err)
				assert.Equal(t, value, got, "%s: untouched", name)
			}
		})
	}
}

func TestValkeyWrongType(t *testing.T) {
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c := newValkeyClient(t)
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			prefix := valkeyPrefix(t, c)
			list, hash := prefix+"list", prefix+"hash"
			require.NoError(t, c.RPush(ctx, list, "a").Err())
			require.NoError(t, c.HSet(ctx, hash, "data", "a", "version", strings.Repeat("0", 32)).Err())

			for _, key := range []string{list, hash} {
				_, _, getErr := store.Get(ctx, key)
				_, createErr := store.PutIfVersion(ctx, key, []byte("x"), "")
				_, updateErr := store.PutIfVersion(ctx, key, []byte("x"), strings.Repeat("0", 32))
				for name, err := range map[string]error{"get": getErr, "create": createErr, "update": updateErr} {
					require.Error(t, err, "%s %s", name, key)
					assert.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "%s %s: %v", name, key, err)
					assert.NotErrorIs(t, err, writefence.ErrConflict, name)
					assert.NotErrorIs(t, err, writefence.ErrNotFound, name)
					assert.Contains(t, err.Error(), "writefence: valkey ")
				}
			}
			n, err := c.LLen(ctx, list).Result()
			require.NoError(t, err)
			assert.EqualValues(t, 1, n, "the list is untouched")
			typ, err := c.Type(ctx, hash).Result()
			require.NoError(t, err)
			assert.Equal(t, "hash", typ, "the hash is untouched")
		})
	}
}

// valkeyCountingConn counts the bytes read from the server.
type valkeyCountingConn struct {
	net.Conn
	n *atomic.Int64
}

func (c valkeyCountingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.n.Add(int64(n))
	return n, err
}

type valkeyByteCounter struct{ n atomic.Int64 }

func (b *valkeyByteCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return valkeyCountingConn{Conn: conn, n: &b.n}, nil
	}
}
func (b *valkeyByteCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (b *valkeyByteCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestValkeyTooLarge: a value over the limit is refused having transferred
// no more than the limit, not the value.
func TestValkeyTooLarge(t *testing.T) {
	ctx := context.Background()
	c := newValkeyClient(t)
	counter := &valkeyByteCounter{}
	c.AddHook(counter)
	store := writefence.NewValkeyConditionalStore(c)
	store.MaxObjectSize = 1 << 10
	prefix := valkeyPrefix(t, c)

	_, err := store.PutIfVersion(ctx, prefix+"fits", make([]byte, 1<<10), "")
	require.NoError(t, err)
	data, _, err := store.Get(ctx, prefix+"fits")
	require.NoError(t, err)
	assert.Len(t, data, 1<<10, "exactly the limit is allowed")

	_, err = store.PutIfVersion(ctx, prefix+"big", make([]byte, 4<<20), "")
	require.NoError(t, err)
	before := counter.n.Load()
	_, _, err = store.Get(ctx, prefix+"big")
	read := counter.n.Load() - before
	var tooLarge *writefence.StoreError
	require.ErrorAs(t, err, &tooLarge)
	require.ErrorIs(t, err, writefence.ErrTooLarge)
	assert.Equal(t, prefix+"big", tooLarge.Key)
	assert.Contains(t, tooLarge.Error(), fmt.Sprintf("more than %d bytes", 1<<10))
	t.Logf("Get of a 4 MiB value with a 1 KiB limit read %d bytes from the server", read)
	assert.Less(t, read, int64(2<<10), "the value was not downloaded")
}

// TestValkeyTransportError: an unreachable server is neither a conflict nor
// an absent key, and the password never shows in the error.
func TestValkeyTransportError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())

	const password = "pw-must-not-leak-4711"
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	for _, path := range valkeyPaths {
		store := writefence.NewValkeyConditionalStore(c)
		store.Script = path.script
		_, _, getErr := store.Get(ctx, "k")
		_, putErr := store.PutIfVersion(ctx, "k", []byte("x"), "")
		delErr := store.Delete(ctx, "k")
		for name, err := range map[string]error{"get": getErr, "put": putErr, "delete": delErr} {
			require.Error(t, err, "%s %s", path.name, name)
			assert.NotErrorIs(t, err, writefence.ErrConflict, name)
			assert.NotErrorIs(t, err, writefence.ErrNotFound, name)
			var opErr *net.OpError
			assert.ErrorAs(t, err, &opErr, "%s: the dial error is reachable", name)
			assert.NotContains(t, err.Error(), password)
			assert.Contains(t, err.Error(), "writefence: valkey ")
		}
	}
}

// TestValkeyContextPassesThrough: a cancelled ctx is returned as it is.
func TestValkeyContextPassesThrough(t *testing.T) {
	c := newValkeyClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, path := range valkeyPaths {
		store := writefence.NewValkeyConditionalStore(c)
		store.Script = path.script
		_, _, err := store.Get(ctx, "k")
		assert.True(t, errors.Is(err, context.Canceled), "get: %v", err)
		_, err = store.PutIfVersion(ctx, "k", []byte("x"), "")
		assert.Equal(t, context.Canceled, err, "put")
	}
}
