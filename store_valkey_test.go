//go:build !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// Unit tests of ValkeyStore: what it decides before, or
// without, reaching a server. They talk to an address where nothing
// listens, so any I/O they should not make shows as a dial error. The
// tests against a real server are in store_valkey_integration_test.go.

// valkeyPaths are the two write paths; every behaviour test runs on both.
var valkeyPaths = []struct {
	name   string
	script bool
}{
	{"watch", false},
	{"script", true},
}

// eachValkeyPath runs f as a subtest once per write path.
func eachValkeyPath(t *testing.T, f func(t *testing.T, script bool)) {
	t.Helper()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) { f(t, path.script) })
	}
}

// newValkeyStore returns a store over c, on the Script path when script is
// set.
func newValkeyStore(c redis.UniversalClient, script bool) *writefence.ValkeyStore {
	s := writefence.NewValkeyStore(c)
	s.Script = script
	return s
}

// deadValkeyClient returns a client of an address where nothing listens,
// which logs in with password and never retries, not even a dial.
func deadValkeyClient(t *testing.T, password string) (*redis.Client, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1, DialerRetries: 1})
	t.Cleanup(func() { _ = c.Close() })
	return c, addr
}

// requireStoreError asserts err is a *StoreError of op on key that is
// neither a conflict nor an absent key, and returns it.
func requireStoreError(t *testing.T, err error, op, key string, msgAndArgs ...any) *writefence.StoreError {
	t.Helper()
	var se *writefence.StoreError
	require.ErrorAs(t, err, &se, msgAndArgs...)
	assert.Equal(t, op, se.Op, msgAndArgs...)
	assert.Equal(t, key, se.Key, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrConflict, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrNotFound, msgAndArgs...)
	assert.True(t, strings.HasPrefix(err.Error(), "writefence: "+op+" "), "%v", err)
	return se
}

// valkeyCall is one call of a store's methods and the error it returned.
type valkeyCall struct {
	name, op string // the call, and the Op of its *StoreError
	err      error
}

// callValkey calls every method of store on the key "k" (a branded put
// under the brand key "brand") and returns their errors.
func callValkey(store *writefence.ValkeyStore) []valkeyCall {
	ctx := context.Background()
	_, _, getErr := store.Get(ctx, "k")
	_, _, _, prefixErr := store.GetPrefix(ctx, "k", 1)
	_, createErr := store.PutIfVersion(ctx, "k", []byte("x"), "")
	_, updateErr := store.PutIfVersion(ctx, "k", []byte("x"), strings.Repeat("0", 32))
	_, partsErr := store.PutPartsIfVersion(ctx, "k", [][]byte{[]byte("x"), []byte("y")}, strings.Repeat("0", 32))
	_, brandedErr := store.PutIfBranded(ctx, "brand", "id", "k", [][]byte{[]byte("x")}, "")
	delErr := store.Delete(ctx, "k")
	listErr := store.List(ctx, "k", func(string) error { return nil })
	return []valkeyCall{
		{"get", "valkey get", getErr},
		{"get prefix", "valkey get", prefixErr},
		{"create", "valkey put", createErr},
		{"update", "valkey put", updateErr},
		{"parts", "valkey put", partsErr},
		{"branded put", "valkey put", brandedErr},
		{"delete", "valkey delete", delErr},
		{"list", "valkey list", listErr},
	}
}

// TestValkeyTransportError: an unreachable server is neither a conflict nor
// an absent key, the client's error is reachable, and the password never
// shows in the error.
func TestValkeyTransportError(t *testing.T) {
	const password = "pw-must-not-leak-4711"
	c, _ := deadValkeyClient(t, password)
	eachValkeyPath(t, func(t *testing.T, script bool) {
		for _, call := range callValkey(newValkeyStore(c, script)) {
			requireStoreError(t, call.err, call.op, "k", call.name)
			var opErr *net.OpError
			assert.ErrorAs(t, call.err, &opErr, "%s: the dial error is reachable", call.name)
			assert.NotContains(t, call.err.Error(), password)
		}
	})
}

// TestValkeyContextPassesThrough: a cancelled ctx is returned as it is,
// before any I/O.
func TestValkeyContextPassesThrough(t *testing.T) {
	c, _ := deadValkeyClient(t, "")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		store := newValkeyStore(c, script)
		_, _, err := store.Get(ctx, "k")
		assert.Equal(t, context.Canceled, err, "get")
		_, err = store.PutIfVersion(ctx, "k", []byte("x"), "")
		assert.Equal(t, context.Canceled, err, "put")
		_, err = store.PutPartsIfVersion(ctx, "k", [][]byte{[]byte("x")}, "")
		assert.Equal(t, context.Canceled, err, "put parts")
		_, err = store.PutIfBranded(ctx, "brand", "id", "k", [][]byte{[]byte("x")}, "")
		assert.Equal(t, context.Canceled, err, "branded put")
	})
}

// TestValkeyRefusesRing: a ring is refused before any I/O, with an error
// that matches errors.ErrUnsupported and says why, while a cluster client
// is served: its calls reach the network. (A standalone client of a
// cluster node is refused too, after INFO: TestValkeyRefusesCluster.)
func TestValkeyRefusesRing(t *testing.T) {
	t.Parallel()
	_, addr := deadValkeyClient(t, "")
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": addr}, MaxRetries: -1})
	t.Cleanup(func() { _ = ring.Close() })
	eachValkeyPath(t, func(t *testing.T, script bool) {
		requireValkeyUnsupported(t, newValkeyStore(ring, script), "the client is a *redis.Ring")
	})

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: -1, MaxRedirects: -1})
	t.Cleanup(func() { _ = cc.Close() })
	eachValkeyPath(t, func(t *testing.T, script bool) {
		for _, call := range callValkey(newValkeyStore(cc, script)) {
			if call.name == "branded put" {
				continue // "brand" and "k" are in different slots: refused before I/O
			}
			require.Error(t, call.err, call.name)
			assert.NotErrorIs(t, call.err, errors.ErrUnsupported, "%s: a cluster client is served", call.name)
			var opErr *net.OpError
			assert.ErrorAs(t, call.err, &opErr, "%s: the dial error is reachable", call.name)
		}
	})
}

// TestValkeyClusterBrandSlot: on a cluster, PutIfBranded of a key in
// another slot than the brand key is refused before any I/O, as
// unsupported, saying why; keys that share the brand's slot by a hash tag
// in their prefix reach the server.
func TestValkeyClusterBrandSlot(t *testing.T) {
	t.Parallel()
	_, addr := deadValkeyClient(t, "")
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{addr}, MaxRetries: -1, MaxRedirects: -1})
	t.Cleanup(func() { _ = cc.Close() })
	eachValkeyPath(t, func(t *testing.T, script bool) {
		store := newValkeyStore(cc, script)
		_, err := store.PutIfBranded(context.Background(), "writefence/_brand", "id", "writefence/s/wal/0", [][]byte{[]byte("x")}, "")
		requireStoreError(t, err, "valkey put", "writefence/s/wal/0")
		require.ErrorIs(t, err, errors.ErrUnsupported)
		assert.Contains(t, err.Error(), "no atomic step spans two slots")
		var opErr *net.OpError
		assert.False(t, errors.As(err, &opErr), "no I/O")

		_, err = store.PutIfBranded(context.Background(), "{app}/_brand", "id", "{app}/s/wal/0", [][]byte{[]byte("x")}, "")
		assert.NotErrorIs(t, err, errors.ErrUnsupported, "one slot: served")
		assert.ErrorAs(t, err, &opErr, "and sent")
	})
}

// requireValkeyUnsupported asserts that every call of store is refused as
// unsupported, for reason.
func requireValkeyUnsupported(t *testing.T, store *writefence.ValkeyStore, reason string) {
	t.Helper()
	for _, call := range callValkey(store) {
		requireStoreError(t, call.err, call.op, "k", call.name)
		require.ErrorIs(t, call.err, errors.ErrUnsupported, call.name)
		assert.Contains(t, call.err.Error(), "a standalone server or a *redis.ClusterClient is required: "+reason, call.name)
	}
}

// TestValkeyRefusedBeforeIO: a version of no form the store issues cannot
// match, and PutIfBranded's arguments are checked, without a round trip.
func TestValkeyRefusedBeforeIO(t *testing.T) {
	c, _ := deadValkeyClient(t, "")
	ctx := context.Background()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		store := newValkeyStore(c, script)
		for _, v := range []string{"not-a-token", strings.Repeat("A", 32), strings.Repeat("0", 31), "damaged-" + strings.Repeat("0", 39)} {
			_, err := store.PutIfVersion(ctx, "k", []byte("x"), v)
			require.ErrorIs(t, err, writefence.ErrConflict, v)
			var se *writefence.StoreError
			require.ErrorAs(t, err, &se, v)
			assert.Equal(t, "valkey put", se.Op)
			assert.Contains(t, err.Error(), "is not a version this store issues")
			_, err = store.PutPartsIfVersion(ctx, "k", [][]byte{[]byte("x")}, v)
			require.ErrorIs(t, err, writefence.ErrConflict, "parts %s", v)
			_, err = store.PutIfBranded(ctx, "brand", "id", "k", [][]byte{[]byte("x")}, v)
			require.ErrorIs(t, err, writefence.ErrConflict, "branded %s", v)
		}

		_, err := store.PutIfBranded(ctx, "", "id", "k", [][]byte{[]byte("x")}, "")
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "no brand key")
		_, err = store.PutIfBranded(ctx, "k", "id", "k", [][]byte{[]byte("x")}, "")
		require.ErrorIs(t, err, writefence.ErrInvalidArgument, "a write to the brand key itself")
		assert.NotErrorIs(t, err, writefence.ErrWire)
	})
}

// countingReader counts the bytes read from it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// TestValkeyHoldsNoBlobs: the Valkey store is no BlobStore, so a Fence
// over it refuses to put or collect blobs, as unsupported, before reading
// a byte of the blob or reaching the server.
func TestValkeyHoldsNoBlobs(t *testing.T) {
	c, _ := deadValkeyClient(t, "")
	store := writefence.NewValkeyStore(c)
	_, isBlobStore := any(store).(writefence.BlobStore)
	require.False(t, isBlobStore)

	f := &writefence.Fence{Store: store}
	blob := &countingReader{r: strings.NewReader("a segment")}
	_, err := f.PutBlob(t.Context(), "wal", "0", "a", 1, blob)
	require.ErrorIs(t, err, errors.ErrUnsupported)
	assert.Contains(t, err.Error(), "holds no blobs")
	assert.Zero(t, blob.n, "no byte of the blob was read")
	_, err = f.Collect(t.Context(), "wal", "0", writefence.GCOptions{})
	require.ErrorIs(t, err, errors.ErrUnsupported)
}

// respFake is a server that speaks just enough of the Redis protocol
// (RESP2) for the store's check of the server: it reads commands and
// answers each with what answer returns for it, a raw RESP reply, or
// closes the connection when answer returns "". It counts the commands it
// is sent, by name in lower case.
type respFake struct {
	addr string

	mu    sync.Mutex // guards calls
	calls map[string]int
}

func newRESPFake(t *testing.T, answer func(cmd []string) string) *respFake {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &respFake{addr: ln.Addr().String(), calls: map[string]int{}}
	var wg sync.WaitGroup
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	var conns sync.Map // the open connections, closed when the test ends
	t.Cleanup(func() {
		conns.Range(func(c, _ any) bool {
			_ = c.(net.Conn).Close()
			return true
		})
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Store(c, nil)
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					cmd, err := readRESPCommand(r)
					if err != nil {
						return
					}
					f.mu.Lock()
					f.calls[strings.ToLower(cmd[0])]++
					f.mu.Unlock()
					reply := answer(cmd)
					if reply == "" {
						return
					}
					if _, err := io.WriteString(c, reply); err != nil {
						return
					}
				}
			}()
		}
	}()
	return f
}

// count returns how many commands named name (lower case) f was sent.
func (f *respFake) count(name string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[name]
}

// readRESPCommand reads one command, an array of bulk strings.
func readRESPCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(line, "*"), "\r\n"))
	if err != nil || !strings.HasPrefix(line, "*") || n < 1 {
		return nil, fmt.Errorf("not a command: %q", line)
	}
	cmd := make([]string, n)
	for i := range cmd {
		line, err := r.ReadString('\n')
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(line, "$"), "\r\n"))
		if err != nil || !strings.HasPrefix(line, "$") || size < 0 {
			return nil, fmt.Errorf("not a bulk string: %q", line)
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		cmd[i] = string(buf[:size])
	}
	return cmd, nil
}

// respBulk is a bulk string reply.
func respBulk(s string) string { return fmt.Sprintf("$%d\r\n%s\r\n", len(s), s) }

// TestValkeyCheckWithoutInfoCluster: a server that cannot answer INFO
// cluster (an error reply saying the command or the section is unknown,
// or an INFO without cluster_enabled) leaves the store unable to tell
// whether it is a cluster node: every call is refused, as unsupported,
// and a Fence does not retry the refusal. An ACL's refusal matches
// fs.ErrPermission instead; a reply naming a passing state, and a
// connection lost before the reply, are transient: the Fence retries
// them, checking again. A server that reports cluster_enabled:0 is served.
func TestValkeyCheckWithoutInfoCluster(t *testing.T) {
	cases := []struct {
		name  string
		info  string // the reply to INFO; "" closes the connection
		want  error  // the sentinel every call's error matches; nil: none, transient
		about string // what the error says
	}{
		{"unknown command", "-ERR unknown command 'INFO', with args beginning with: 'cluster' \r\n", errors.ErrUnsupported, "ERR unknown command 'INFO'"},
		{"unknown section", "-ERR unknown section 'cluster'\r\n", errors.ErrUnsupported, "ERR unknown section"},
		{"no cluster_enabled", respBulk("# Server\r\nredis_version:7.0.0\r\n"), errors.ErrUnsupported, "INFO cluster does not report cluster_enabled"},
		{"refused by the ACL", "-NOPERM User u has no permissions to run the 'info' command\r\n", fs.ErrPermission, "NOPERM"},
		{"loading", "-LOADING Valkey is loading the dataset in memory\r\n", nil, "LOADING"},
		{"connection lost", "", nil, "check server"},
		{"standalone", respBulk("# Cluster\r\ncluster_enabled:0\r\n"), nil, "ERR the test server holds no keys"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newRESPFake(t, func(cmd []string) string {
				if strings.EqualFold(cmd[0], "info") {
					return tc.info
				}
				return "-ERR the test server holds no keys\r\n"
			})
			c := redis.NewClient(&redis.Options{Addr: f.addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, DialerRetries: 1})
			t.Cleanup(func() { _ = c.Close() })
			store := writefence.NewValkeyStore(c)

			calls := callValkey(store)
			for _, call := range calls {
				requireStoreError(t, call.err, call.op, "k", call.name)
				assert.Contains(t, call.err.Error(), tc.about, call.name)
				for _, sentinel := range []error{errors.ErrUnsupported, fs.ErrPermission} {
					assert.Equal(t, sentinel == tc.want, errors.Is(call.err, sentinel), "%s: errors.Is(%v, %v)", call.name, call.err, sentinel)
				}
				if tc.want == errors.ErrUnsupported && strings.HasPrefix(tc.info, "-") {
					var reply redis.Error
					assert.ErrorAs(t, call.err, &reply, "%s: the server's reply is reachable", call.name)
				}
			}
			if tc.name == "standalone" {
				assert.Equal(t, 1, f.count("info"), "checked once, then remembered")
				assert.Positive(t, f.count("exists")+f.count("getrange")+f.count("watch"), "the calls reached the keys")
				return
			}
			assert.Equal(t, len(calls), f.count("info"), "every call checked the server afresh")

			// A Fence retries a transient failure and not a refusal.
			before := f.count("info")
			fence := &writefence.Fence{Store: store, MaxAttempts: 3, RetryDelay: time.Millisecond}
			err := fence.Push(context.Background(), "wal", "0", "w", 1, []byte("x"))
			require.Error(t, err)
			attempts := f.count("info") - before
			if tc.want != nil {
				assert.ErrorIs(t, err, tc.want)
				assert.Equal(t, 1, attempts, "a refusal is final: %v", err)
			} else {
				assert.Greater(t, attempts, 1, "a transient failure is retried: %v", err)
			}
		})
	}
}

// TestValkeyScriptSentOnce: the Script path's write is never sent twice
// by the client, though the client retries other commands: the connection
// is lost after the server received the script (its reply is lost), and
// the call fails with an error that is neither a conflict nor a refusal.
// A second run could find a rival's write after its own and report a
// conflict for a write that landed. With WaitReplicas the script runs on
// a connection of its own; without, on the client's pool.
func TestValkeyScriptSentOnce(t *testing.T) {
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait=%d", wait), func(t *testing.T) {
			f := newRESPFake(t, func(cmd []string) string {
				switch strings.ToLower(cmd[0]) {
				case "info":
					return respBulk("# Cluster\r\ncluster_enabled:0\r\n")
				case "set":
					return "+OK\r\n"
				case "hello":
					return "-ERR unknown command 'HELLO'\r\n"
				}
				return "" // the reply to anything else is lost
			})
			c := redis.NewClient(&redis.Options{Addr: f.addr, Protocol: 2, DisableIdentity: true,
				MaxRetries: 3, MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
			t.Cleanup(func() { _ = c.Close() })
			ctx := context.Background()
			require.Error(t, c.Get(ctx, "k").Err())
			require.Equal(t, 4, f.count("get"), "the client retries a command whose reply was lost")

			store := newValkeyStore(c, true)
			store.WaitReplicas = wait
			_, err := store.PutIfVersion(ctx, "k", []byte("x"), "")
			requireStoreError(t, err, "valkey put", "k")
			assert.NotErrorIs(t, err, writefence.ErrConflict)
			assert.Equal(t, 1, f.count("evalsha"), "the script was sent once")
			assert.Zero(t, f.count("eval"))
		})
	}
}

// A Fence over a standalone Valkey server. The store refuses a
// cluster-enabled server before touching a key.
func ExampleNewValkeyConditionalStore() {
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer client.Close()

	// Script: one round trip per write instead of two.
	store := writefence.NewValkeyConditionalStore(client, &writefence.StoreOptions{Script: true})
	fence := &writefence.Fence{Store: store}

	ctx := context.Background()
	err := fence.Push(ctx, "wal", "shard-7", "node-a", 42, []byte("segment 1138"))
	switch {
	case errors.Is(err, writefence.ErrStaleEpoch):
		log.Print("deposed: a push at epoch 42 or later already landed")
	case errors.Is(err, errors.ErrUnsupported):
		log.Fatal(err) // a cluster: configuration, not a race
	case err != nil:
		log.Print(err)
	}
}
