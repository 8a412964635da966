//go:build !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/faultproxy"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/writefencetest"
)

// ValkeyStore against real servers: the shared server named by
// WRITEFENCE_VALKEY_ADDR, and servers of a test's own (a cluster node, a
// primary and its replica) started with testserver.StartValkey. Sections:
//
//   - helpers: clients, key prefixes, the round-trip tap, raw values
//   - conformance
//   - layout, foreign values, types and limits
//   - damage in place
//   - the brand checked in the write (PutIfBranded)
//   - round trips, and no WATCH left armed
//   - races
//   - cluster: a standalone client of a cluster node refused; the cluster
//     .ci/run starts (three primaries with a replica each): the kit, the
//     probe, a lease, races, WaitReplicas; clusters of a test's own: a slot
//     migrated under pushes, failovers
//   - replication and failover (WaitReplicas)

// ---- helpers ----

// newValkeyClient returns a client of the shared server that never retries
// (a retried write would hide what the tests look at), closed when the
// test ends; opts adjust its options.
func newValkeyClient(t *testing.T, opts ...func(*redis.Options)) *redis.Client {
	t.Helper()
	o := &redis.Options{Addr: testserver.ValkeyAddr(t), MaxRetries: -1}
	for _, f := range opts {
		f(o)
	}
	c := redis.NewClient(o)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// valkeyPrefix returns a key prefix of the test's own on c's server; its
// keys are deleted when the test ends. It never flushes: other tests share
// the server.
func valkeyPrefix(t *testing.T, c *redis.Client) string {
	t.Helper()
	return testserver.ValkeyPrefix(t, c.Options().Addr)
}

// eachValkeyStore runs f as a subtest once per write path, with a client
// of the shared server, a store over it on that path and a key prefix of
// the subtest's own.
func eachValkeyStore(t *testing.T, f func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string)) {
	t.Helper()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		c := newValkeyClient(t)
		f(t, c, newValkeyStore(c, script), valkeyPrefix(t, c))
	})
}

// benchPayload returns n bytes of a pattern: the benchmarks' payloads,
// and data of many sizes here.
func benchPayload(n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*31 + 7)
	}
	return p
}

// valkeyRawValue is a value in the store's layout: "WFV2", the SHA-1 in
// hex of the rest of the value's first 3900 bytes and of its last 100
// past those, the token, the data's length and CRC-32C in hex, the data.
func valkeyRawValue(token, data string) string {
	rest := token + fmt.Sprintf("%016x%08x", len(data), crc32.Checksum([]byte(data), crc32.MakeTable(crc32.Castagnoli))) + data
	head := rest[:min(len(rest), 3900-44)]
	tail := rest[max(len(head), len(rest)-100):]
	sum := sha1.Sum([]byte(head + tail))
	return "WFV2" + hex.EncodeToString(sum[:]) + rest
}

// valkeyFirstValue is a value in the store's first layout: the SHA-1 of
// token and data in hex, the token, the data.
func valkeyFirstValue(token, data string) string {
	sum := sha1.Sum([]byte(token + data))
	return hex.EncodeToString(sum[:]) + token + data
}

// valkeyBrandValue is what a brand holding identity looks like in the
// store's layout, with version token n.
func valkeyBrandValue(n int, identity string) string {
	return valkeyRawValue(fmt.Sprintf("%032x", n), identity)
}

// valkeyRaw returns the value at key as the server holds it, "" when
// absent.
func valkeyRaw(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	require.NoError(t, err)
	return v
}

// requireValkeyContent asserts that Get of key returns data and version.
func requireValkeyContent(t *testing.T, store writefence.ConditionalStore, key, data, version string) {
	t.Helper()
	got, v, err := store.Get(context.Background(), key)
	require.NoError(t, err)
	assert.Equal(t, data, string(got))
	assert.Equal(t, version, v)
}

// requireOtherFailure asserts err is a failure that is neither a refusal
// nor a store outcome the fence acts on.
func requireOtherFailure(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.Error(t, err, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrWire, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrNotFound, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrConflict, msgAndArgs...)
}

// requireCorrupt asserts err is a *CorruptError for key and returns it.
func requireCorrupt(t *testing.T, err error, key string, msgAndArgs ...any) *writefence.CorruptError {
	t.Helper()
	var ce *writefence.CorruptError
	require.ErrorAs(t, err, &ce, msgAndArgs...)
	require.ErrorIs(t, err, writefence.ErrCorrupt, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrConflict, msgAndArgs...)
	assert.NotErrorIs(t, err, writefence.ErrNotFound, msgAndArgs...)
	assert.Equal(t, key, ce.Key, msgAndArgs...)
	assert.NotEmpty(t, ce.Check, msgAndArgs...)
	require.NotEmpty(t, ce.Version, msgAndArgs...)
	return ce
}

func valkeyWantConflict(err error) error {
	if errors.Is(err, writefence.ErrConflict) {
		return nil
	}
	return fmt.Errorf("want a conflict, got %v", err)
}

// valkeyTap is a go-redis hook that counts round trips: one per command or
// pipeline the client sends (the clients it is put on have MaxRetries -1,
// so no call hides a retry). It records the command names of each, and runs
// before, when set, ahead of every command or pipeline (an error from before
// is returned instead of sending) and after, when set, once the reply is in.
type valkeyTap struct {
	mu     sync.Mutex // guards the fields below
	trips  [][]string
	total  int64          // round trips since the tap was made, never reset
	codes  map[string]int // cluster redirections answered (MOVED, ASK, TRYAGAIN), never reset
	before func(ctx context.Context, cmds []redis.Cmder) error
	after  func(cmds []redis.Cmder)
}

func (h *valkeyTap) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *valkeyTap) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		cmds := []redis.Cmder{cmd}
		if err := h.observe(ctx, cmds); err != nil {
			return err
		}
		// The client sets a single command's error once the hooks
		// returned: the reply's error is what next returns.
		err := next(ctx, cmd)
		h.runAfter(cmds, err)
		return err
	}
}

func (h *valkeyTap) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := h.observe(ctx, cmds); err != nil {
			return err
		}
		err := next(ctx, cmds)
		h.runAfter(cmds, nil)
		return err
	}
}

func (h *valkeyTap) observe(ctx context.Context, cmds []redis.Cmder) error {
	names := make([]string, len(cmds))
	for i, c := range cmds {
		names[i] = c.Name()
	}
	h.mu.Lock()
	h.trips = append(h.trips, names)
	h.total++
	before := h.before
	h.mu.Unlock()
	if before != nil {
		return before(ctx, cmds)
	}
	return nil
}

// runAfter counts the redirections among the replies to cmds, each
// command's error or, for a single command, err.
func (h *valkeyTap) runAfter(cmds []redis.Cmder, err error) {
	h.mu.Lock()
	for _, c := range cmds {
		cerr := c.Err()
		if cerr == nil {
			cerr = err
		}
		var reply redis.Error
		if !errors.As(cerr, &reply) {
			continue
		}
		if code, _, _ := strings.Cut(reply.Error(), " "); code == "MOVED" || code == "ASK" || code == "TRYAGAIN" {
			if h.codes == nil {
				h.codes = map[string]int{}
			}
			h.codes[code]++
		}
	}
	after := h.after
	h.mu.Unlock()
	if after != nil {
		after(cmds)
	}
}

// setAfter installs f (nil removes it).
func (h *valkeyTap) setAfter(f func(cmds []redis.Cmder)) {
	h.mu.Lock()
	h.after = f
	h.mu.Unlock()
}

// setBefore installs f (nil removes it).
func (h *valkeyTap) setBefore(f func(ctx context.Context, cmds []redis.Cmder) error) {
	h.mu.Lock()
	h.before = f
	h.mu.Unlock()
}

// onMulti runs f once, just before the next MULTI/EXEC round trip.
func (h *valkeyTap) onMulti(f func(ctx context.Context)) {
	h.setBefore(func(ctx context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "multi" {
			h.setBefore(nil)
			f(ctx)
		}
		return nil
	})
}

// take returns the round trips recorded since the last take.
func (h *valkeyTap) take() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := h.trips
	h.trips = nil
	return t
}

// redirected returns how many replies carried each cluster redirection.
func (h *valkeyTap) redirected() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.codes)
}

// rounds returns the round trips made since the tap was made.
func (h *valkeyTap) rounds() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

func formatValkeyTrips(trips [][]string) string {
	s := make([]string, len(trips))
	for i, t := range trips {
		s[i] = "[" + strings.Join(t, " ") + "]"
	}
	return strings.Join(s, " ")
}

// newTappedValkeyClient returns a client of the shared server with a
// valkeyTap.
func newTappedValkeyClient(t *testing.T, opts ...func(*redis.Options)) (*redis.Client, *valkeyTap) {
	t.Helper()
	c := newValkeyClient(t, opts...)
	tap := &valkeyTap{}
	c.AddHook(tap)
	return c, tap
}

// valkeyByteCounter is a go-redis hook that counts the bytes read from the
// server.
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

// ---- conformance ----

// TestValkeyConformance runs the conformance suite on both write paths,
// the store's traffic counted and the adapter embedded in a valkeyWrapper.
// The suite works under random key prefixes of its own and deletes its
// keys through the store's Deleter.
func TestValkeyConformance(t *testing.T) {
	t.Parallel()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		c, tap := newTappedValkeyClient(t)
		read := &valkeyByteCounter{}
		c.AddHook(read)
		store := newValkeyStore(c, script)
		store.MaxObjectSize = kitReadLimit
		opts := kitOptions(testserver.DamageValkey(c))
		// A write is a round trip on the script path, two on the WATCH
		// path (the check of the head, then the transaction). The slack
		// covers the RESP framing and the other replies of a push, and on
		// the WATCH path the head and tail its write reads (at most 4 KiB).
		opts.Wire = &writefencetest.Wire{
			Count:      func() (int64, int64) { return tap.rounds(), read.n.Load() },
			WriteTrips: map[bool]int64{false: 2, true: 1}[script],
			Slack:      map[bool]int64{false: 4096, true: 384}[script],
		}
		opts.Wrap = func(s writefence.ConditionalStore, o *writefencetest.Overrides) writefence.ConditionalStore {
			return valkeyWrapper{s.(*writefence.ValkeyStore), o}
		}
		writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return store }, opts)
	})
}

// ---- layout, foreign values, types and limits ----

func TestValkeyLayout(t *testing.T) {
	ctx := context.Background()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		key := prefix + "k"

		v1, err := store.PutIfVersion(ctx, key, []byte("same"), "")
		require.NoError(t, err)
		assert.Equal(t, valkeyRawValue(v1, "same"), valkeyRaw(t, c, key), "the value is the header, then the data")
		assert.Len(t, v1, 32)
		_, err = hex.DecodeString(v1)
		assert.NoError(t, err, "the token is hex")

		v2, err := store.PutIfVersion(ctx, key, []byte("same"), v1)
		require.NoError(t, err)
		assert.NotEqual(t, v1, v2, "rewriting the same bytes still draws a new token")

		requireValkeyContent(t, store, key, "same", v2)

		_, err = store.PutIfVersion(ctx, key, []byte("x"), v1)
		require.ErrorIs(t, err, writefence.ErrConflict, "an older token no longer matches")
		var se *writefence.StoreError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, writefence.StoreError{Op: "valkey put", Key: key, Err: writefence.ErrConflict}, *se)

		_, err = store.PutIfVersion(ctx, prefix+"absent", []byte("x"), v2)
		require.ErrorIs(t, err, writefence.ErrConflict, "an update of an absent key")

		require.NoError(t, store.Delete(ctx, key))
		require.NoError(t, store.Delete(ctx, key), "deleting an absent key is not an error")
		_, _, err = store.Get(ctx, key)
		require.ErrorIs(t, err, writefence.ErrNotFound)
		require.ErrorAs(t, err, &se)
		assert.Equal(t, writefence.StoreError{Op: "valkey get", Key: key, Err: writefence.ErrNotFound}, *se)
	})
}

// TestValkeyPutParts: PutPartsIfVersion has PutIfVersion's contract on
// both paths: the value is the parts joined, in the same layout; the same
// preconditions hold; each method accepts the versions of the other; over
// damaged bytes it refuses unless it names them; writefence.PutParts uses
// it.
func TestValkeyPutParts(t *testing.T) {
	ctx := context.Background()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		key := prefix + "k"
		parts := [][]byte{[]byte("header|"), {}, []byte("payload")}
		v1, err := store.PutPartsIfVersion(ctx, key, parts, "")
		require.NoError(t, err)
		assert.Equal(t, valkeyRawValue(v1, "header|payload"), valkeyRaw(t, c, key), "the header, the parts joined")
		requireValkeyContent(t, store, key, "header|payload", v1)

		_, err = store.PutPartsIfVersion(ctx, key, parts, "")
		require.ErrorIs(t, err, writefence.ErrConflict, "create-only on an existing key")
		var se *writefence.StoreError
		require.ErrorAs(t, err, &se)
		assert.Equal(t, writefence.StoreError{Op: "valkey put", Key: key, Err: writefence.ErrConflict}, *se)

		v2, err := store.PutIfVersion(ctx, key, []byte("whole"), v1)
		require.NoError(t, err, "PutIfVersion on the version of PutPartsIfVersion")
		_, err = store.PutPartsIfVersion(ctx, key, parts, v1)
		require.ErrorIs(t, err, writefence.ErrConflict, "a stale version")
		v3, err := store.PutPartsIfVersion(ctx, key, [][]byte{[]byte("a"), []byte("b")}, v2)
		require.NoError(t, err, "PutPartsIfVersion on the version of PutIfVersion")
		requireValkeyContent(t, store, key, "ab", v3)
		v4, err := writefence.PutParts(ctx, store, key, [][]byte{[]byte("c"), []byte("d")}, v3)
		require.NoError(t, err)
		requireValkeyContent(t, store, key, "cd", v4)
		v5, err := store.PutPartsIfVersion(ctx, key, nil, v4)
		require.NoError(t, err, "no parts: empty data")
		requireValkeyContent(t, store, key, "", v5)

		_, err = store.PutPartsIfVersion(ctx, prefix+"absent", parts, v5)
		require.ErrorIs(t, err, writefence.ErrConflict, "an update of an absent key")
		n, err := c.Exists(ctx, prefix+"absent").Result()
		require.NoError(t, err)
		assert.Zero(t, n, "an update of an absent key does not create it")

		require.NoError(t, c.SetRange(ctx, key, 0, "Z").Err())
		damaged := valkeyRaw(t, c, key)
		_, _, err = store.Get(ctx, key)
		dv := requireCorrupt(t, err, key).Version
		for _, expect := range []string{v5, ""} {
			_, err = store.PutPartsIfVersion(ctx, key, parts, expect)
			assert.Equal(t, dv, requireCorrupt(t, err, key, "expecting %q", expect).Version)
			assert.Equal(t, damaged, valkeyRaw(t, c, key), "nothing was written")
		}
		v6, err := store.PutPartsIfVersion(ctx, key, parts, dv)
		require.NoError(t, err, "the damaged version replaces exactly those bytes")
		requireValkeyContent(t, store, key, "header|payload", v6)
	})
}

// TestValkeyForeignValues: keys the store did not write are never taken for
// absent, and never overwritten by a create-only put: they are damaged
// values, with a version of their own.
func TestValkeyForeignValues(t *testing.T) {
	ctx := context.Background()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		for name, value := range map[string]string{"empty": "", "short": "abc", "no token": strings.Repeat("z", 40)} {
			key := prefix + name
			require.NoError(t, c.Set(ctx, key, value, 0).Err())
			_, _, err := store.Get(ctx, key)
			ce := requireCorrupt(t, err, key, name)
			assert.True(t, strings.HasPrefix(ce.Version, "damaged-"), "%s: %s", name, ce.Version)

			_, err = store.PutIfVersion(ctx, key, []byte("x"), "")
			require.ErrorIs(t, err, writefence.ErrCorrupt, name)
			assert.Equal(t, value, valkeyRaw(t, c, key), "%s: untouched", name)
		}
	})
}

func TestValkeyWrongType(t *testing.T) {
	ctx := context.Background()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		list, hash := prefix+"list", prefix+"hash"
		require.NoError(t, c.RPush(ctx, list, "a").Err())
		require.NoError(t, c.HSet(ctx, hash, "data", "a", "version", strings.Repeat("0", 32)).Err())

		for _, key := range []string{list, hash} {
			_, _, getErr := store.Get(ctx, key)
			_, createErr := store.PutIfVersion(ctx, key, []byte("x"), "")
			_, updateErr := store.PutIfVersion(ctx, key, []byte("x"), strings.Repeat("0", 32))
			for _, tc := range []struct {
				name, op string
				err      error
			}{{"get", "valkey get", getErr}, {"create", "valkey put", createErr}, {"update", "valkey put", updateErr}} {
				requireStoreError(t, tc.err, tc.op, key, tc.name)
				assert.True(t, redis.HasErrorPrefix(tc.err, "WRONGTYPE"), "%s %s: %v", tc.name, key, tc.err)
				assert.ErrorIs(t, tc.err, errors.ErrUnsupported, "%s %s: final", tc.name, key)
				assert.Contains(t, tc.err.Error(), ": the key holds a value of another type: ", "%s %s", tc.name, key)
				assert.NotErrorIs(t, tc.err, fs.ErrPermission, "%s %s", tc.name, key)
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

// TestValkeyPushRefusalIsFinal: a Push the server refuses for good (the
// ACL's NOPERM, NOAUTH or WRONGPASS; WRONGTYPE for a shard key holding a
// list) returns, after one attempt, the server's error wrapped so that it
// matches fs.ErrPermission or errors.ErrUnsupported, never an unknown
// outcome: a refused read is not retried, and a refused write wrote
// nothing. Refused writes come from a user who may read the key but not
// write it: the write on a version the Fence remembers (no read first),
// and a cold push's write after its read.
func TestValkeyPushRefusalIsFinal(t *testing.T) {
	ctx := context.Background()
	admin := newValkeyClient(t)
	const noAuthPassword = "pw-noauth-must-not-leak"
	noAuthAddr := testserver.StartValkey(t, noAuthPassword, "--requirepass", noAuthPassword)

	eachValkeyPath(t, func(t *testing.T, script bool) {
		prefix := valkeyPrefix(t, admin)
		key, err := keys.Shard(prefix, "wal", "0")
		require.NoError(t, err)
		user, password := strings.TrimSuffix(prefix, "/")+"-refused", "pw-"+testserver.UniqueName(t)
		acl := func(t *testing.T, rules ...string) {
			t.Helper()
			args := append([]any{"acl", "setuser", user, "reset", "on", ">" + password, "+@all"}, anySlice(strings.Fields(strings.Join(rules, " ")))...)
			require.NoError(t, admin.Do(ctx, args...).Err())
		}
		// The user may touch its prefix alone, and the staging keys of
		// the script path: without WaitReplicas neither path touches
		// another key.
		all := "~" + prefix + "* ~writefence/_put/*"
		acl(t, all)
		t.Cleanup(func() { assert.NoError(t, admin.Do(context.Background(), "acl", "deluser", user).Err()) })
		limited := newValkeyStore(newValkeyClient(t, func(o *redis.Options) { o.Username, o.Password = user, password }), script)
		warm := &writefence.Fence{Store: limited, Prefix: prefix}
		require.NoError(t, warm.Push(ctx, "wal", "0", "w", 1, []byte("landed")))
		landed := valkeyRaw(t, admin, key)

		type refusal struct {
			name          string
			rules         string // the user's ACL key rules; "" leaves them
			store         *writefence.ValkeyStore
			cached        bool // the Fence remembers the version: it writes first
			reads, writes int64
			code          string
			is            error
		}
		cold := func(s *writefence.ValkeyStore) *writefence.Fence {
			return &writefence.Fence{Store: s, Prefix: prefix}
		}
		readOnly := "%R~" + prefix + "* ~writefence/_put/*"
		for _, tc := range []refusal{
			{"read only, remembered version", readOnly, limited, true, 0, 1, "NOPERM", fs.ErrPermission},
			{"read only, cold", readOnly, limited, false, 1, 1, "NOPERM", fs.ErrPermission},
			{"no access", "~" + prefix + "other/*", limited, false, 1, 0, "NOPERM", fs.ErrPermission},
			{"wrong password", "", newValkeyStore(newValkeyClient(t, func(o *redis.Options) { o.Username, o.Password = user, "wrong" }), script), false, 1, 0, "WRONGPASS", fs.ErrPermission},
			{"no password", "", newValkeyStore(testserver.ValkeyClient(t, noAuthAddr, ""), script), false, 1, 0, "NOAUTH", fs.ErrPermission},
		} {
			t.Run(tc.name, func(t *testing.T) {
				if tc.rules != "" {
					acl(t, tc.rules)
					defer acl(t, all)
				}
				f := cold(tc.store)
				if tc.cached {
					f = warm
				}
				tctx, trace := testserver.Traced(ctx)
				err := f.Push(tctx, "wal", "0", "w", 2, []byte("refused"))
				t.Logf("%v", err)
				require.ErrorIs(t, err, tc.is)
				assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, "a refused write wrote nothing")
				assert.True(t, redis.HasErrorPrefix(err, tc.code), "the server's error stays reachable: %v", err)
				assert.Equal(t, [3]int64{tc.reads, tc.writes, 0}, trace.Counts(), "reads, writes, back-offs: one attempt")
				assert.NotContains(t, err.Error(), password)
				assert.NotContains(t, err.Error(), noAuthPassword)
				assert.Equal(t, landed, valkeyRaw(t, admin, key), "nothing was written")
			})
		}

		t.Run("key of another type", func(t *testing.T) {
			listKey, err := keys.Shard(prefix, "wal", "list")
			require.NoError(t, err)
			require.NoError(t, admin.RPush(ctx, listKey, "a").Err())
			tctx, trace := testserver.Traced(ctx)
			f := cold(limited)
			push := f.Push(tctx, "wal", "list", "w", 1, []byte("x")) // reads a prefix
			assert.Equal(t, [3]int64{1, 0, 0}, trace.Counts(), "reads, writes, back-offs: one read")
			_, _, _, latest := f.Latest(ctx, "wal", "list") // reads it whole
			for _, err := range []error{push, latest} {
				t.Logf("%v", err)
				require.ErrorIs(t, err, errors.ErrUnsupported)
				assert.NotErrorIs(t, err, fs.ErrPermission)
				assert.Contains(t, err.Error(), "the key holds a value of another type")
				assert.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "%v", err)
			}
			n, err := admin.LLen(ctx, listKey).Result()
			require.NoError(t, err)
			assert.EqualValues(t, 1, n, "the list is untouched")
		})
	})
}

// anySlice returns ss as a []any, for a command's arguments.
func anySlice(ss []string) []any {
	a := make([]any, len(ss))
	for i, s := range ss {
		a[i] = s
	}
	return a
}

// TestValkeyTooLarge: a value over the limit is refused, by Get and
// GetPrefix on both paths, having transferred no more than the limit, not
// the value.
func TestValkeyTooLarge(t *testing.T) {
	ctx := context.Background()
	c := newValkeyClient(t)
	counter := &valkeyByteCounter{}
	c.AddHook(counter)
	prefix := valkeyPrefix(t, c)
	writer := newValkeyStore(c, false)
	_, err := writer.PutIfVersion(ctx, prefix+"fits", make([]byte, 1<<10), "")
	require.NoError(t, err)
	_, err = writer.PutIfVersion(ctx, prefix+"big", make([]byte, 4<<20), "")
	require.NoError(t, err)

	eachValkeyPath(t, func(t *testing.T, script bool) {
		store := newValkeyStore(c, script)
		store.MaxObjectSize = 1 << 10
		data, _, err := store.Get(ctx, prefix+"fits")
		require.NoError(t, err)
		assert.Len(t, data, 1<<10, "exactly the limit is allowed")
		_, size, _, err := store.GetPrefix(ctx, prefix+"fits", 10)
		require.NoError(t, err)
		assert.EqualValues(t, 1<<10, size)

		for name, read := range map[string]func() error{
			"get":    func() error { _, _, err := store.Get(ctx, prefix+"big"); return err },
			"prefix": func() error { _, _, _, err := store.GetPrefix(ctx, prefix+"big", 10); return err },
			"put": func() error {
				_, err := store.PutIfVersion(ctx, prefix+"big", []byte("x"), strings.Repeat("0", 32))
				return err
			},
		} {
			before := counter.n.Load()
			err := read()
			bytesRead := counter.n.Load() - before
			require.ErrorIs(t, err, writefence.ErrTooLarge, name)
			op := map[bool]string{true: "valkey put", false: "valkey get"}[name == "put"]
			requireStoreError(t, err, op, prefix+"big", name)
			assert.Contains(t, err.Error(), "more than 1024 bytes", name)
			t.Logf("%s of a 4 MiB value with a 1 KiB limit read %d bytes from the server", name, bytesRead)
			assert.Less(t, bytesRead, int64(2<<10), "%s: the value was not downloaded", name)
		}
	})
	assert.Len(t, valkeyRaw(t, c, prefix+"big"), 100+4<<20, "the refused put wrote nothing")
}

// TestValkeyGetPrefix: GetPrefix of a value not in the store's layout is
// damage, on either path.
func TestValkeyGetPrefix(t *testing.T) {
	t.Parallel()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		key := prefix + "plain"
		require.NoError(t, c.Set(t.Context(), key, "plain", 0).Err())
		_, _, _, err := store.GetPrefix(t.Context(), key, 10)
		requireCorrupt(t, err, key)
	})
}

// ---- damage in place ----

// Damage in place: a value edited by hand keeps the token a fence may
// remember, so the store checks every value it reads or overwrites.

// valkeyDamages edit a value in place the ways an operator could.
var valkeyDamages = []struct {
	name string
	edit func(ctx context.Context, c *redis.Client, key string) error
}{
	{"setrange inside the data", func(ctx context.Context, c *redis.Client, key string) error {
		return c.SetRange(ctx, key, 100+3, "X").Err()
	}},
	{"setrange in the token", func(ctx context.Context, c *redis.Client, key string) error {
		b, err := c.GetRange(ctx, key, 45, 45).Result()
		if err != nil {
			return err
		}
		// Another hex digit: the token keeps its form, the digest breaks.
		return c.SetRange(ctx, key, 45, map[bool]string{true: "1", false: "0"}[b == "0"]).Err()
	}},
	{"append", func(ctx context.Context, c *redis.Client, key string) error {
		return c.Append(ctx, key, "tail").Err()
	}},
	{"truncation", func(ctx context.Context, c *redis.Client, key string) error {
		raw, err := c.Get(ctx, key).Result()
		if err != nil {
			return err
		}
		return c.Set(ctx, key, raw[:len(raw)-2], 0).Err()
	}},
	{"set of garbage", func(ctx context.Context, c *redis.Client, key string) error {
		return c.Set(ctx, key, "garbage set by hand", 0).Err()
	}},
}

func TestValkeyDamageInPlace(t *testing.T) {
	ctx := context.Background()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		for _, d := range valkeyDamages {
			t.Run(d.name, func(t *testing.T) {
				key := prefix + d.name
				v1, err := store.PutIfVersion(ctx, key, []byte("payload 0123456789"), "")
				require.NoError(t, err)
				require.NoError(t, d.edit(ctx, c, key))
				damaged := valkeyRaw(t, c, key)

				_, _, err = store.Get(ctx, key)
				ce := requireCorrupt(t, err, key, "get")
				dv := ce.Version
				assert.NotEqual(t, v1, dv, "the damaged bytes have a version of their own")
				t.Logf("%s: %v", d.name, err)
				_, _, err = store.Get(ctx, key)
				assert.Equal(t, dv, requireCorrupt(t, err, key).Version, "the same bytes, the same version")
				_, _, _, err = store.GetPrefix(ctx, key, 4)
				pce := requireCorrupt(t, err, key, "a prefix read sees the damage too")
				assert.Equal(t, *ce, *pce, "GetPrefix gives Get's verdict")

				for _, expect := range []string{v1, ""} {
					_, err = store.PutIfVersion(ctx, key, []byte("new"), expect)
					assert.Equal(t, dv, requireCorrupt(t, err, key, "put expecting %q", expect).Version)
					assert.Equal(t, damaged, valkeyRaw(t, c, key), "nothing was written")
				}

				// A second edit: the version read before no longer names
				// the bytes, so it replaces nothing.
				require.NoError(t, c.SetRange(ctx, key, 0, "Z").Err())
				twice := valkeyRaw(t, c, key)
				require.NotEqual(t, damaged, twice)
				_, _, err = store.Get(ctx, key)
				dv2 := requireCorrupt(t, err, key).Version
				assert.NotEqual(t, dv, dv2)
				_, err = store.PutIfVersion(ctx, key, []byte("new"), dv)
				assert.Equal(t, dv2, requireCorrupt(t, err, key, "the first damaged version").Version)
				assert.Equal(t, twice, valkeyRaw(t, c, key), "nothing was written")

				nv, err := store.PutIfVersion(ctx, key, []byte("new"), dv2)
				require.NoError(t, err, "the damaged version replaces exactly those bytes")
				requireValkeyContent(t, store, key, "new", nv)
				_, err = store.PutIfVersion(ctx, key, []byte("again"), dv2)
				require.ErrorIs(t, err, writefence.ErrConflict, "a damaged version over intact bytes")
			})
		}
	})
}

// TestValkeyDamagedVersionIsAtomic: on the WATCH path, bytes edited again
// between the check and EXEC abort the replacement.
func TestValkeyDamagedVersionIsAtomic(t *testing.T) {
	ctx := context.Background()
	c, tap := newTappedValkeyClient(t)
	other := newValkeyClient(t)
	store := newValkeyStore(c, false)
	key := valkeyPrefix(t, c) + "k"
	_, err := store.PutIfVersion(ctx, key, []byte("payload"), "")
	require.NoError(t, err)
	require.NoError(t, c.SetRange(ctx, key, 100, "P").Err())
	_, _, err = store.Get(ctx, key)
	dv := requireCorrupt(t, err, key).Version

	tap.onMulti(func(ctx context.Context) {
		assert.NoError(t, other.SetRange(ctx, key, 100, "Q").Err())
	})
	_, err = store.PutIfVersion(ctx, key, []byte("settled"), dv)
	require.ErrorIs(t, err, writefence.ErrConflict)
	require.ErrorIs(t, err, redis.TxFailedErr, "the check passed and EXEC aborted")
	got, err := c.GetRange(ctx, key, 100, -1).Result()
	require.NoError(t, err)
	assert.Equal(t, "Qayload", got, "the second edit stands")
}

// TestValkeyDamageUnderCachedVersion: a fence that remembers the version it
// wrote conditions its next push on it without reading; the store sees the
// damage in that very write and refuses, and an operator settles it.
func TestValkeyDamageUnderCachedVersion(t *testing.T) {
	ctx := context.Background()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		c, tap := newTappedValkeyClient(t)
		store := newValkeyStore(c, script)
		prefix := valkeyPrefix(t, c)
		key, err := keys.Shard(prefix, "wal", "0")
		require.NoError(t, err)
		f := &writefence.Fence{Store: store, Prefix: prefix}
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("segment one")))

		// One byte of the payload, as valkey-cli SETRANGE would.
		n, err := c.StrLen(ctx, key).Result()
		require.NoError(t, err)
		require.NoError(t, c.SetRange(ctx, key, n-1, "!").Err())
		damaged := valkeyRaw(t, c, key)

		tap.take()
		err = f.Push(ctx, "wal", "0", "a", 2, []byte("segment two"))
		trips := tap.take()
		ce := requireCorrupt(t, err, key, "push over damaged bytes")
		assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, "a refusal, not an unknown outcome")
		require.NotEmpty(t, trips)
		first := map[bool][]string{false: {"watch", "strlen", "exists", "getrange", "getrange"}, true: {"evalsha"}}[script]
		assert.Equal(t, first, trips[0], "the push wrote on its remembered version without reading: %s", formatValkeyTrips(trips))
		assert.Equal(t, damaged, valkeyRaw(t, c, key), "nothing was overwritten")

		_, _, _, err = f.Latest(ctx, "wal", "0")
		assert.Equal(t, ce.Version, requireCorrupt(t, err, key, "latest").Version)

		require.NoError(t, f.Settle(ctx, "wal", "0", writefence.Settlement{Version: ce.Version, Writer: "operator", Epoch: 3, Payload: []byte("restored")}))
		epoch, writer, payload, err := f.Latest(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, uint64(3), epoch)
		assert.Equal(t, "operator", writer)
		assert.Equal(t, "restored", string(payload))
	})
}

// TestValkeyDamagedHead: a *CorruptError of a value damaged in place holds,
// in Head, the data as found where the layout still places it (after the
// header): the whole data from Get, the start of it that GetPrefix read
// from GetPrefix, with Get's version and check; a value too short for the
// layout holds none. A flip in the head
// (the data's first 3800 bytes) or in the tail (the value's last 100)
// fails the head digest, for Get and GetPrefix; one in between fails the
// data's checksum, which Get reads, and GetPrefix when it reads the value
// whole: a GetPrefix of less returns the bytes as they are and the version
// from before the damage (TestValkeyDamageInMiddle).
func TestValkeyDamagedHead(t *testing.T) {
	ctx := context.Background()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		long := make([]byte, 10<<10)
		for i := range long {
			long[i] = byte(i*7 + 1)
		}
		const head, middle = "valkey head digest", "valkey data checksum"
		for _, tc := range []struct {
			name  string
			data  []byte
			at    int    // the byte of the data flipped
			check string // the check Get reports
		}{
			{"short data", long[:100], 50, head},
			{"flip inside the head", long, 10, head},
			{"flip at the head's last byte", long, 3799, head},
			{"flip just past the head", long, 3800, middle},
			{"flip in the middle", long, 5000, middle},
			{"flip just before the tail", long, len(long) - 101, middle},
			{"flip in the tail", long, len(long) - 100, head},
			{"flip at the last byte", long, len(long) - 1, head},
			{"data exactly 4 KiB, in the middle", long[:4096], 3900, middle},
			{"data exactly 4 KiB, in the tail", long[:4096], 4095, head},
		} {
			t.Run(tc.name, func(t *testing.T) {
				key := prefix + tc.name
				v, err := store.PutIfVersion(ctx, key, tc.data, "")
				require.NoError(t, err)
				damaged := testserver.Flipped(tc.data, tc.at)
				require.NoError(t, c.SetRange(ctx, key, 100+int64(tc.at), string(damaged[tc.at:tc.at+1])).Err())
				_, _, err = store.Get(ctx, key)
				ce := requireCorrupt(t, err, key, "get")
				assert.Equal(t, tc.check, ce.Check)
				assert.Equal(t, damaged, ce.Head, "get: the data as read, whole")
				for _, n := range []int64{1, 100, defaults.MaxHeaderSize} {
					prefix, size, pv, err := store.GetPrefix(ctx, key, n)
					if tc.check == head || n >= int64(len(tc.data)) {
						pce := requireCorrupt(t, err, key, "get prefix %d", n)
						assert.Equal(t, ce.Version, pce.Version, "get prefix %d: Get's version", n)
						assert.Equal(t, ce.Check, pce.Check, "get prefix %d: Get's check", n)
						require.NotEmpty(t, pce.Head, "get prefix %d", n)
						assert.Equal(t, damaged[:len(pce.Head)], pce.Head, "get prefix %d: the start of the data as read", n)
						continue
					}
					require.NoError(t, err, "get prefix %d: the damage is beyond what GetPrefix checks", n)
					assert.Equal(t, v, pv)
					assert.EqualValues(t, len(tc.data), size)
					assert.Equal(t, damaged[:min(int64(len(damaged)), n)], prefix, "get prefix %d: the bytes as they are", n)
				}
			})
		}
		for name, value := range map[string]string{"empty": "", "shorter than the layout": "garbage", "the header alone": valkeyRawValue(strings.Repeat("0", 32), "")[:99] + "x"} {
			t.Run(name, func(t *testing.T) {
				key := prefix + name
				require.NoError(t, c.Set(ctx, key, value, 0).Err())
				_, _, err := store.Get(ctx, key)
				assert.Nil(t, requireCorrupt(t, err, key).Head, "get: no data to locate")
				_, _, _, err = store.GetPrefix(ctx, key, 10)
				assert.Nil(t, requireCorrupt(t, err, key).Head, "get prefix: no data to locate")
			})
		}
	})
}

// TestValkeyDamageInMiddle: damage between the head and the tail that
// keeps the value's length is found by Get alone, on both paths, as the
// adapter documents: a write conditioned on the version from before the
// damage (a Fence's cached version) replaces the damaged value, and a
// write conditioned on the damage's version (a settle) replaces exactly
// those bytes. Damage to the tail, and damage that changes the length, is
// refused by every write.
func TestValkeyDamageInMiddle(t *testing.T) {
	ctx := context.Background()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		data := benchPayload(64 << 10)
		damage := func(t *testing.T, key string, at int64, check string) (string, string) {
			t.Helper()
			v, err := store.PutIfVersion(ctx, key, data, "")
			require.NoError(t, err)
			b, err := c.GetRange(ctx, key, at, at).Result()
			require.NoError(t, err)
			require.NoError(t, c.SetRange(ctx, key, at, string(testserver.Flipped([]byte(b), 0))).Err())
			_, _, err = store.Get(ctx, key)
			ce := requireCorrupt(t, err, key, "get reads it all")
			assert.Equal(t, check, ce.Check)
			return v, ce.Version
		}
		middle := int64(100 + 40<<10)

		t.Run("remembered version", func(t *testing.T) {
			key := prefix + "remembered"
			v, _ := damage(t, key, middle, "valkey data checksum")
			nv, err := store.PutIfVersion(ctx, key, []byte("replaced"), v)
			require.NoError(t, err, "the write checks the head and the tail, which are intact")
			requireValkeyContent(t, store, key, "replaced", nv)
		})
		t.Run("settled", func(t *testing.T) {
			key := prefix + "settled"
			v, dv := damage(t, key, middle, "valkey data checksum")
			_, err := store.PutIfVersion(ctx, key, []byte("x"), "")
			require.ErrorIs(t, err, writefence.ErrConflict, "create-only over an existing key")
			damaged := valkeyRaw(t, c, key)
			_, err = store.PutIfVersion(ctx, key, []byte("x"), "damaged-"+strings.Repeat("0", 40))
			require.ErrorIs(t, err, writefence.ErrConflict, "another damage's version")
			assert.Equal(t, damaged, valkeyRaw(t, c, key), "nothing was written")
			nv, err := store.PutIfVersion(ctx, key, []byte("settled"), dv)
			require.NoError(t, err, "the damage's version replaces exactly those bytes")
			requireValkeyContent(t, store, key, "settled", nv)
			_, err = store.PutIfVersion(ctx, key, []byte("again"), v)
			require.ErrorIs(t, err, writefence.ErrConflict)
		})
		t.Run("tail", func(t *testing.T) {
			key := prefix + "tail"
			v, dv := damage(t, key, int64(100+len(data)-2), "valkey head digest")
			damaged := valkeyRaw(t, c, key)
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			assert.Equal(t, dv, requireCorrupt(t, err, key, "a write over a damaged tail").Version)
			_, _, _, err = store.GetPrefix(ctx, key, 10)
			assert.Equal(t, dv, requireCorrupt(t, err, key, "get prefix").Version)
			assert.Equal(t, damaged, valkeyRaw(t, c, key), "nothing was written")
		})
		t.Run("length changed", func(t *testing.T) {
			key := prefix + "appended"
			v, err := store.PutIfVersion(ctx, key, data, "")
			require.NoError(t, err)
			require.NoError(t, c.Append(ctx, key, "!").Err())
			_, _, err = store.Get(ctx, key)
			dv := requireCorrupt(t, err, key).Version
			_, _, _, err = store.GetPrefix(ctx, key, 10)
			assert.Equal(t, dv, requireCorrupt(t, err, key, "get prefix").Version)
			_, err = store.PutIfVersion(ctx, key, []byte("x"), v)
			pce := requireCorrupt(t, err, key, "a write over a changed length")
			assert.Equal(t, dv, pce.Version)
		})
	})
}

// TestValkeyFirstLayout: values of the store's first layout (digest, token,
// data), as earlier releases wrote them, are read and checked whole, and
// the first write conditioned on one replaces it with a value of the
// current layout; damage to one is found as before.
func TestValkeyFirstLayout(t *testing.T) {
	ctx := context.Background()
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		token := strings.Repeat("ab", 16)
		for _, size := range []int{10, 10 << 10} {
			t.Run(fmt.Sprint(size), func(t *testing.T) {
				key := fmt.Sprintf("%sfirst-%d", prefix, size)
				data := string(benchPayload(size))
				require.NoError(t, c.Set(ctx, key, valkeyFirstValue(token, data), 0).Err())
				requireValkeyContent(t, store, key, data, token)
				p, n, v, err := store.GetPrefix(ctx, key, 4)
				require.NoError(t, err)
				assert.Equal(t, data[:4], string(p))
				assert.EqualValues(t, size, n)
				assert.Equal(t, token, v)

				_, err = store.PutIfVersion(ctx, key, []byte("x"), strings.Repeat("cd", 16))
				require.ErrorIs(t, err, writefence.ErrConflict)
				nv, err := store.PutIfVersion(ctx, key, []byte("migrated"), token)
				require.NoError(t, err)
				assert.Equal(t, valkeyRawValue(nv, "migrated"), valkeyRaw(t, c, key), "now in the current layout")

				require.NoError(t, c.Set(ctx, key, valkeyFirstValue(token, data), 0).Err())
				require.NoError(t, c.SetRange(ctx, key, int64(72+size-1), "!").Err())
				_, _, err = store.Get(ctx, key)
				ce := requireCorrupt(t, err, key)
				assert.Equal(t, "valkey value digest", ce.Check)
				_, err = store.PutIfVersion(ctx, key, []byte("x"), token)
				assert.Equal(t, ce.Version, requireCorrupt(t, err, key, "a write checks a first-layout value whole").Version)
				_, err = store.PutIfVersion(ctx, key, []byte("settled"), ce.Version)
				require.NoError(t, err)
			})
		}
	})
}

// valkeyWrapper is a store that embeds the Valkey adapter and overrides Get
// and PutIfVersion, as a quota or an audit log would. It inherits
// GetPrefix, PutPartsIfVersion and PutIfBranded, none of which may be used
// through it.
type valkeyWrapper struct {
	*writefence.ValkeyStore
	o *writefencetest.Overrides
}

func (w valkeyWrapper) Get(ctx context.Context, key string) ([]byte, string, error) {
	return w.o.Get(ctx, key, w.ValkeyStore.Get)
}

func (w valkeyWrapper) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	return w.o.PutIfVersion(ctx, key, data, expect, w.ValkeyStore.PutIfVersion)
}

// ---- the brand: checked in the write (PutIfBranded), damaged, unreadable ----

func TestValkeyBrandPerWrite(t *testing.T) {
	ctx := context.Background()
	const identity = defaults.Identity
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		brand, data := keys.Brand(prefix), prefix+"data"
		put := func(data []byte, expect string) (string, error) {
			return store.PutIfBranded(ctx, brand, identity, prefix+"data", [][]byte{data}, expect)
		}
		unwritten := func() {
			t.Helper()
			n, err := c.Exists(ctx, data).Result()
			require.NoError(t, err)
			require.Zero(t, n, "nothing was written")
		}
		unchanged := func(want string) {
			t.Helper()
			got, _, err := store.Get(ctx, data)
			require.NoError(t, err)
			assert.Equal(t, want, string(got), "nothing was written")
		}

		_, err := put([]byte("x"), "")
		requireWire(t, err, writefence.WireError{Key: brand, Expected: identity, Absent: true})
		unwritten()

		installed, err := (&writefence.Fence{Store: store, Prefix: prefix}).ClaimBrand(ctx)
		require.NoError(t, err)
		require.True(t, installed)
		v1, err := put([]byte("x"), "")
		require.NoError(t, err)
		_, err = put([]byte("y"), "")
		require.ErrorIs(t, err, writefence.ErrConflict, "the version precondition holds as well")

		_, bv, err := store.Get(ctx, brand)
		require.NoError(t, err)
		_, err = store.PutIfVersion(ctx, brand, []byte("other/v1"), bv)
		require.NoError(t, err)
		_, err = put([]byte("y"), v1)
		requireWire(t, err, writefence.WireError{Key: brand, Expected: identity, Found: "other/v1"})
		unchanged("x")
		v2, err := store.PutIfVersion(ctx, data, []byte("unbranded"), v1)
		require.NoError(t, err, "PutIfVersion checks no brand")

		hostile := "\x1b[31m\n\x00\xff" + strings.Repeat("A", 10<<10)
		require.NoError(t, c.Set(ctx, brand, valkeyBrandValue(1, hostile), 0).Err())
		_, err = put([]byte("y"), v2)
		require.ErrorIs(t, err, writefence.ErrWire)
		msg := err.Error()
		assert.Less(t, len(msg), 400, "bounded")
		assert.True(t, strings.HasPrefix(msg, `writefence: wire: expected writefence/v1 found \x1b[31m\n\x00\xffAAA`), msg)

		require.NoError(t, c.Set(ctx, brand, identity, 0).Err())
		_, err = put([]byte("y"), v2)
		requireStoreError(t, err, "valkey put", data, "a brand key not in the store's layout")
		requireOtherFailure(t, err)
		assert.Equal(t, brand, requireCorrupt(t, err, brand).Key, "damage of the brand key is final, as a Get of it reports it")
		assert.Contains(t, err.Error(), "brand key: valkey value shorter than its header")

		damaged := []byte(valkeyBrandValue(3, identity))
		damaged[len(damaged)-1] ^= 1
		require.NoError(t, c.Set(ctx, brand, damaged, 0).Err())
		_, err = put([]byte("y"), v2)
		requireStoreError(t, err, "valkey put", data, "a brand value damaged in place")
		requireOtherFailure(t, err)
		requireCorrupt(t, err, brand)
		assert.Contains(t, err.Error(), "brand key: valkey head digest")

		require.NoError(t, c.Del(ctx, brand).Err())
		require.NoError(t, c.RPush(ctx, brand, identity).Err())
		_, err = put([]byte("y"), v2)
		requireStoreError(t, err, "valkey put", data, "WRONGTYPE")
		requireOtherFailure(t, err)
		assert.True(t, redis.HasErrorPrefix(err, "WRONGTYPE"), "%v", err)
		assert.ErrorIs(t, err, errors.ErrUnsupported)
		// The WATCH path tells which key it was; the script cannot.
		assert.Contains(t, err.Error(), map[bool]string{false: ": brand key ", true: ": the key or brand key "}[store.Script]+brand+" holds a value of another type: ")
		unchanged("unbranded")
	})
}

// TestValkeyBrandNoPerm: a user who may write the data but not read the
// brand key gets the server's NOPERM, and writes nothing.
func TestValkeyBrandNoPerm(t *testing.T) {
	ctx := context.Background()
	admin := newValkeyClient(t)
	prefix := valkeyPrefix(t, admin)
	brand, data := keys.Brand(prefix), prefix+"data"
	_, err := (&writefence.Fence{Store: newValkeyStore(admin, false), Prefix: prefix}).ClaimBrand(ctx)
	require.NoError(t, err)
	user, password := strings.TrimSuffix(prefix, "/")+"-noperm", "pw-"+testserver.UniqueName(t)
	require.NoError(t, admin.Do(ctx, "acl", "setuser", user, "on", ">"+password, "+@all", "~"+data).Err())
	t.Cleanup(func() { assert.NoError(t, admin.Do(context.Background(), "acl", "deluser", user).Err()) })
	limited := newValkeyClient(t, func(o *redis.Options) { o.Username, o.Password = user, password })

	eachValkeyPath(t, func(t *testing.T, script bool) {
		store := newValkeyStore(limited, script)
		_, err := store.PutIfBranded(ctx, brand, defaults.Identity, data, [][]byte{[]byte("x")}, "")
		requireOtherFailure(t, err)
		assert.True(t, redis.HasErrorPrefix(err, "NOPERM"), "%v", err)
		assert.ErrorIs(t, err, fs.ErrPermission)
		assert.NotContains(t, err.Error(), password)
		t.Logf("%v", err)
		n, err := admin.Exists(ctx, data).Result()
		require.NoError(t, err)
		require.Zero(t, n, "nothing was written")
	})
}

// TestValkeyBrandChangedBeforeExec: a brand changed by another client after
// the WATCH path read it and before EXEC aborts the write, at no round trip
// of its own; the retry then sees the new brand and refuses, and sees it
// again once changed back. A Fence with BrandVerifyAlways gets the same.
func TestValkeyBrandChangedBeforeExec(t *testing.T) {
	ctx := context.Background()
	const identity = defaults.Identity
	c, tap := newTappedValkeyClient(t)
	prefix := valkeyPrefix(t, c)
	brand, key := keys.Brand(prefix), prefix+"data"
	store := newValkeyStore(c, false)
	other := newValkeyStore(newValkeyClient(t), false)
	_, err := (&writefence.Fence{Store: store, Prefix: prefix}).ClaimBrand(ctx)
	require.NoError(t, err)
	v, err := store.PutIfBranded(ctx, brand, identity, key, [][]byte{[]byte("under the brand")}, "")
	require.NoError(t, err)

	rebrand := func(to string) {
		t.Helper()
		_, bv, err := other.Get(ctx, brand)
		require.NoError(t, err)
		_, err = other.PutIfVersion(ctx, brand, []byte(to), bv)
		require.NoError(t, err)
	}
	tap.take()
	tap.onMulti(func(context.Context) { rebrand("other/v1") })
	_, err = store.PutIfBranded(ctx, brand, identity, key, [][]byte{[]byte("junk")}, v)
	trips := tap.take()
	require.ErrorIs(t, err, writefence.ErrConflict, "EXEC aborted")
	assert.ErrorIs(t, err, redis.TxFailedErr)
	assert.Len(t, trips, 2, "the brand costs no round trip: %s", formatValkeyTrips(trips))
	assert.Equal(t, []string{"watch", "strlen", "exists", "getrange", "getrange", "exists", "getrange"}, trips[0], "the brand key is watched and read with the data key")

	requireValkeyContent(t, store, key, "under the brand", v) // nothing landed under the foreign brand
	_, err = store.PutIfBranded(ctx, brand, identity, key, [][]byte{[]byte("junk")}, v)
	requireWire(t, err, writefence.WireError{Key: brand, Expected: identity, Found: "other/v1"})

	rebrand(identity)
	_, err = store.PutIfBranded(ctx, brand, identity, key, [][]byte{[]byte("under the brand again")}, v)
	require.NoError(t, err, "and the next write sees the brand restored")

	// The same through a Fence that checks the brand at every write, which
	// writes with PutIfBranded: its first attempt is aborted by the
	// re-brand, its retry refused.
	f := &writefence.Fence{Store: store, Prefix: prefix, Brand: writefence.BrandVerifyAlways}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("under the brand")))
	tap.onMulti(func(context.Context) { rebrand("other/v1") })
	err = f.Push(ctx, "wal", "0", "w", 2, []byte("under another brand"))
	requireWire(t, err, writefence.WireError{Key: brand, Expected: identity, Found: "other/v1"})
	epoch, _, payload, err := (&writefence.Fence{Store: other, Prefix: prefix}).Latest(ctx, "wal", "0")
	require.NoError(t, err)
	assert.Equal(t, uint64(1), epoch)
	assert.Equal(t, "under the brand", string(payload), "nothing landed under the foreign brand")
}

// TestValkeyBrandConcurrentFlips: writers loop on their keys while another
// client flips the brand between ours and a foreign one. Each flip to the
// foreign brand and back is one MULTI/EXEC that also reads every data key,
// so the two snapshots bracket exactly the time the brand was foreign: they
// must be equal. Each phase lasts until every writer has made two more
// attempts, so at least one attempt of each began and ended inside it: under
// our brand writes land, under the foreign one PutIfBranded refuses, and
// the same loop with PutIfVersion shows that the snapshots catch writes.
func TestValkeyBrandConcurrentFlips(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		script, brand bool
	}{
		{"watch", false, true},
		{"script", true, true},
		{"unbranded control", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			const writers, flips = 4, 50
			c := newValkeyClient(t, func(o *redis.Options) { o.PoolSize = 16 })
			prefix := valkeyPrefix(t, c)
			brand := keys.Brand(prefix)
			store := newValkeyStore(c, tc.script)
			put := func(key string, data []byte, expect string) (string, error) {
				if tc.brand {
					return store.PutIfBranded(ctx, brand, defaults.Identity, key, [][]byte{data}, expect)
				}
				return store.PutIfVersion(ctx, key, data, expect)
			}
			require.NoError(t, c.Set(ctx, brand, valkeyBrandValue(0, defaults.Identity), 0).Err())
			keys := make([]string, writers)
			for i := range keys {
				keys[i] = fmt.Sprintf("%sdata-%d", prefix, i)
				_, err := store.PutIfVersion(ctx, keys[i], []byte("initial"), "")
				require.NoError(t, err)
			}

			progress := newValkeyProgress(writers)
			var stop atomic.Bool
			var landed, refused, conflicts atomic.Int64
			var wg sync.WaitGroup
			for i, key := range keys {
				wg.Go(func() {
					defer progress.quit()
					for n := 0; !stop.Load(); n++ {
						_, v, err := store.Get(ctx, key)
						if !assert.NoError(t, err) {
							return
						}
						_, err = put(key, fmt.Appendf(nil, "w%d-%d", i, n), v)
						switch {
						case err == nil:
							landed.Add(1)
						case errors.Is(err, writefence.ErrWire):
							refused.Add(1)
						case errors.Is(err, writefence.ErrConflict):
							conflicts.Add(1)
						default:
							assert.NoError(t, err)
							return
						}
						progress.add(i)
					}
				})
			}

			// snapshot runs set, then reads every data key, in one MULTI/EXEC
			// (or reads, then sets: the order inside EXEC is the order here).
			snapshot := func(setFirst bool, value string) []string {
				gets := make([]*redis.StringCmd, len(keys))
				_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
					if setFirst {
						p.Set(ctx, brand, value, 0)
					}
					for i, k := range keys {
						gets[i] = p.Get(ctx, k)
					}
					if !setFirst {
						p.Set(ctx, brand, value, 0)
					}
					return nil
				})
				require.NoError(t, err)
				vals := make([]string, len(gets))
				for i, g := range gets {
					vals[i] = g.Val()
				}
				return vals
			}
			violations := 0
			for n := range flips {
				progress.await(2) // our brand: writes land
				before := snapshot(true, valkeyBrandValue(2*n+1, "other/v1"))
				progress.await(2) // the foreign brand
				after := snapshot(false, valkeyBrandValue(2*n+2, defaults.Identity))
				if fmt.Sprint(before) != fmt.Sprint(after) {
					violations++
				}
			}
			stop.Store(true)
			wg.Wait()
			t.Logf("%s: %d flips, %d with a write landed under the foreign brand; writes: %d landed, %d refused with ErrWire, %d conflicts",
				tc.name, flips, violations, landed.Load(), refused.Load(), conflicts.Load())
			require.Positive(t, landed.Load(), "writes landed under our brand")
			if !tc.brand {
				require.Equal(t, flips, violations, "the snapshots catch every write under the foreign brand")
				return
			}
			require.Zero(t, violations, "no write landed under the foreign brand")
			require.GreaterOrEqual(t, refused.Load(), int64(flips*writers), "every writer was refused under every foreign brand")
		})
	}
}

// valkeyProgress counts each writer's attempts, so a test can wait until
// every writer has made some more.
type valkeyProgress struct {
	mu    sync.Mutex // guards the fields below
	cond  *sync.Cond // broadcast on every change
	done  []int      // attempts per writer
	quits int        // writers that returned
}

func newValkeyProgress(writers int) *valkeyProgress {
	p := &valkeyProgress{done: make([]int, writers)}
	p.cond = sync.NewCond(&p.mu)
	return p
}

func (p *valkeyProgress) add(writer int) {
	p.mu.Lock()
	p.done[writer]++
	p.mu.Unlock()
	p.cond.Broadcast()
}

// quit records that a writer returned: a failed one never makes progress
// again, and await must not wait for it.
func (p *valkeyProgress) quit() {
	p.mu.Lock()
	p.quits++
	p.mu.Unlock()
	p.cond.Broadcast()
}

// await returns once every writer has made n more attempts, or one has
// returned.
func (p *valkeyProgress) await(n int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	target := make([]int, len(p.done))
	for i, d := range p.done {
		target[i] = d + n
	}
	for p.quits == 0 && !p.reached(target) {
		p.cond.Wait()
	}
}

func (p *valkeyProgress) reached(target []int) bool {
	for i, d := range p.done {
		if d < target[i] {
			return false
		}
	}
	return true
}

// TestValkeyDamagedBrandIsFinal: under BrandVerifyAlways the Valkey store
// reads the brand key inside the write's own step; a brand key that is not
// an intact value of the store (damaged in place, as by a SETRANGE) is a
// refusal in that step, reported as damage of the brand key (ErrCorrupt,
// final), as every other store reports it: one write attempt, not a write
// whose outcome is unknown, and the record unchanged.
func TestValkeyDamagedBrandIsFinal(t *testing.T) {
	eachValkeyStore(t, func(t *testing.T, c *redis.Client, store *writefence.ValkeyStore, prefix string) {
		ctx := context.Background()
		admin := &writefence.Fence{Store: store, Prefix: prefix}
		_, err := admin.ClaimBrand(ctx)
		require.NoError(t, err)
		f := &writefence.Fence{Store: store, Prefix: prefix, Brand: writefence.BrandVerifyAlways, MaxAttempts: 4}
		require.NoError(t, f.Push(ctx, "wal", "0", "a", 1, []byte("one")))

		require.NoError(t, testserver.DamageValkey(c)(ctx, keys.Brand(prefix), testserver.Fault{Flip: 0}))

		var writes atomic.Int64
		hctx := hook.With(ctx, &hook.Hooks{
			Write: func(_ context.Context, _ string, write func() (string, error)) (string, error) {
				writes.Add(1)
				return write()
			},
			Wait: func(context.Context, int, time.Duration) error { return nil },
		})
		err = (&writefence.Fence{Store: store, Prefix: prefix, Brand: writefence.BrandVerifyAlways, MaxAttempts: 4}).
			Push(hctx, "wal", "0", "a", 2, []byte("two"))
		require.ErrorIs(t, err, writefence.ErrCorrupt)
		var ce *writefence.CorruptError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, keys.Brand(prefix), ce.Key)
		assert.NotErrorIs(t, err, writefence.ErrOutcomeUnknown, "the store refused the write in its atomic step: nothing landed, and the outcome is known")
		assert.Equal(t, int64(1), writes.Load(), "a refusal in the write's own step is final: one attempt")
		requireLatest(t, admin, 1, "a", "one")
	})
}

// TestBrandValkeyOtherFailures: on Valkey, a brand key of the wrong type and
// one the ACL user may not read fail with the server's error, which is
// never a refusal of the brand and never "absent". Both are final (the
// server will answer the same again), so each is read once, not retried:
// WRONGTYPE matches errors.ErrUnsupported, NOPERM fs.ErrPermission.
func TestBrandValkeyOtherFailures(t *testing.T) {
	ctx := context.Background()
	admin := newValkeyClient(t)
	prefix := valkeyPrefix(t, admin)
	list, hidden := prefix+"list/_brand", prefix+"hidden/_brand"
	require.NoError(t, admin.RPush(ctx, list, "writefence/v1").Err())
	_, err := writefence.NewValkeyStore(admin).PutIfVersion(ctx, hidden, []byte(defaults.Identity), "")
	require.NoError(t, err)

	user, password := strings.TrimSuffix(prefix, "/")+"-brand", "pw-"+testserver.UniqueName(t)
	require.NoError(t, admin.Do(ctx, "acl", "setuser", user, "on", ">"+password, "+@all", "~"+prefix+"list/*").Err())
	t.Cleanup(func() { assert.NoError(t, admin.Do(context.Background(), "acl", "deluser", user).Err()) })
	limited := newValkeyClient(t, func(o *redis.Options) { o.Username, o.Password = user, password })

	for _, tc := range []struct {
		key, code string
		is        error
	}{{list, "WRONGTYPE", errors.ErrUnsupported}, {hidden, "NOPERM", fs.ErrPermission}} {
		s := countedByKey(writefence.NewValkeyStore(limited))
		b := &writefence.Fence{Store: s, Prefix: strings.TrimSuffix(tc.key, "_brand")}
		_, installErr := b.ClaimBrand(ctx)
		for op, err := range map[string]error{"claim": claimBrand(ctx, b), "verify": b.VerifyBrand(ctx), "install": installErr} {
			require.Error(t, err, "%s %s", tc.code, op)
			assert.True(t, redis.HasErrorPrefix(err, tc.code), "%s %s: %v", tc.code, op, err)
			assert.ErrorIs(t, err, tc.is, "%s %s", tc.code, op)
			assert.NotErrorIs(t, err, writefence.ErrWire, "%s %s", tc.code, op)
			assert.NotErrorIs(t, err, writefence.ErrNotFound, "%s %s", tc.code, op)
			assert.NotErrorIs(t, err, writefence.ErrConflict, "%s %s", tc.code, op)
			assert.NotContains(t, err.Error(), password)
			t.Logf("%s %s: %v", tc.code, op, err)
		}
		gets, puts, _ := callsOf(s, tc.key)
		assert.Equal(t, [2]int{3, 0}, [2]int{gets, puts}, "%s: one read each, never retried, nothing written", tc.code)
	}
	n, err := admin.LLen(ctx, list).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the list is untouched")
	require.NoError(t, (&writefence.Fence{Store: writefence.NewValkeyStore(admin), Prefix: strings.TrimSuffix(hidden, "_brand")}).VerifyBrand(ctx), "the hidden brand is intact")
}

// ---- round trips, and no WATCH left armed ----

func TestValkeyRoundTrips(t *testing.T) {
	eachValkeyPath(t, func(t *testing.T, script bool) {
		c, tap := newTappedValkeyClient(t)
		store := newValkeyStore(c, script)
		prefix := valkeyPrefix(t, c)
		steps := valkeyTripSteps(t, store, prefix, 0)
		t.Logf("first calls: %s", formatValkeyTrips(tap.take()))
		checkValkeyTrips(t, tap, steps)
	})
}

// TestValkeyScriptValueSizes: the Script path sends a value of up to
// 2 KiB of data in the script's call, and a larger one staged beside it
// in the same round trip; on a server that does not hold the script yet,
// either way, the script follows in an EVAL. Every write lands whole and
// checked, and a stale one on either way writes nothing.
func TestValkeyScriptValueSizes(t *testing.T) {
	ctx := context.Background()
	addr := testserver.StartValkey(t, "")
	c, tap := newTappedValkeyClient(t, func(o *redis.Options) { o.Addr = addr })
	store := newValkeyStore(c, true)
	require.NoError(t, store.Delete(ctx, "warm-up"), "the standalone check")
	for _, tc := range []struct {
		size   int
		staged bool
	}{
		{1, false}, {1 << 10, false}, {2 << 10, false}, {2<<10 + 1, true}, {16 << 10, true},
	} {
		t.Run(fmt.Sprintf("size=%d", tc.size), func(t *testing.T) {
			key := fmt.Sprintf("k%d", tc.size)
			write := []string{"evalsha"}
			if tc.staged {
				write = []string{"set", "evalsha"}
			}
			require.NoError(t, c.ScriptFlush(ctx).Err())
			tap.take()
			data := benchPayload(tc.size)
			version, err := store.PutIfVersion(ctx, key, data, "")
			require.NoError(t, err)
			assert.Equal(t, [][]string{write, {"eval"}}, tap.take(), "the first write, on an empty script cache")
			requireValkeyContent(t, store, key, string(data), version)

			tap.take()
			data[0]++
			next, err := store.PutIfVersion(ctx, key, data, version)
			require.NoError(t, err)
			assert.Equal(t, [][]string{write}, tap.take())
			requireValkeyContent(t, store, key, string(data), next)

			raw := valkeyRaw(t, c, key)
			_, err = store.PutIfVersion(ctx, key, data[1:], version)
			require.ErrorIs(t, err, writefence.ErrConflict, "conditioned on the version it replaced")
			assert.Equal(t, raw, valkeyRaw(t, c, key), "nothing was written")
			staged, err := c.Keys(ctx, keys.Staging+"*").Result()
			require.NoError(t, err)
			assert.Empty(t, staged, "no staged value is left behind")
		})
	}
}

// valkeyTripStep is a call and the round trips it is to take; with wait
// set the last of them is a WAIT.
type valkeyTripStep struct {
	name string
	want int
	wait bool
	run  func() error
}

// valkeyTripSteps returns the calls the round-trip tests count, under
// prefix: a create, an update, a branded update, a stale update, a create
// on an existing key and a branded refusal, then a Get and a GetPrefix.
// Each write takes the round trips of store's path, and wait more (the
// WAIT) when it lands; each read one round trip, and wait more. It warms
// the store up first: the standalone check, the scripts' first runs (which
// may need EVAL after EVALSHA), the client's first pipeline outside a
// transaction (which dials a connection of the client's pipeline pool),
// and the brand the branded writes depend on.
func valkeyTripSteps(t *testing.T, store *writefence.ValkeyStore, prefix string, wait int) []valkeyTripStep {
	ctx := context.Background()
	brand, key := keys.Brand(prefix), prefix+"k"
	const identity = defaults.Identity
	_, err := store.PutIfVersion(ctx, brand, []byte(identity), "")
	require.NoError(t, err)
	_, _, err = store.Get(ctx, brand)
	require.NoError(t, err)
	_, _, _, err = store.GetPrefix(ctx, brand, 1)
	require.NoError(t, err)

	put := map[bool]int{false: 2, true: 1}[store.Script]
	landed := wait > 0
	wire := func(err error) error {
		if errors.Is(err, writefence.ErrWire) {
			return nil
		}
		return fmt.Errorf("want a wire refusal, got %v", err)
	}
	var version string
	return []valkeyTripStep{
		{"create", put + wait, landed, func() (err error) {
			version, err = store.PutIfVersion(ctx, key, []byte("a"), "")
			return err
		}},
		{"update", put + wait, landed, func() (err error) {
			version, err = store.PutIfVersion(ctx, key, []byte("b"), version)
			return err
		}},
		{"branded update", put + wait, landed, func() (err error) {
			version, err = store.PutIfBranded(ctx, brand, identity, key, [][]byte{[]byte("c")}, version)
			return err
		}},
		{"stale update", put, false, func() error {
			_, err := store.PutIfVersion(ctx, key, []byte("d"), strings.Repeat("0", 32))
			return valkeyWantConflict(err)
		}},
		{"create on existing", put, false, func() error {
			_, err := store.PutIfVersion(ctx, key, []byte("d"), "")
			return valkeyWantConflict(err)
		}},
		{"branded refusal", put, false, func() error {
			_, err := store.PutIfBranded(ctx, prefix+"no-brand", identity, key, [][]byte{[]byte("d")}, version)
			return wire(err)
		}},
		{"get", 1 + wait, landed, func() error {
			_, _, err := store.Get(ctx, key)
			return err
		}},
		{"get prefix", 1 + wait, landed, func() error {
			_, _, _, err := store.GetPrefix(ctx, key, 1)
			return err
		}},
	}
}

// checkValkeyTrips runs each step and asserts the round trips tap saw.
// What a cluster client sends on its own (CLUSTER SLOTS to refresh its
// view, and the HELLO and CLIENT SETINFO of a connection it opens for it)
// is not the step's.
func checkValkeyTrips(t *testing.T, tap *valkeyTap, steps []valkeyTripStep) {
	t.Helper()
	for _, s := range steps {
		require.NoError(t, s.run(), s.name)
		trips := slices.DeleteFunc(tap.take(), func(trip []string) bool {
			return slices.Contains([]string{"cluster", "hello", "client"}, trip[0])
		})
		t.Logf("%s: %d round trips: %s", s.name, len(trips), formatValkeyTrips(trips))
		require.Len(t, trips, s.want, "%s: %s", s.name, formatValkeyTrips(trips))
		last := trips[len(trips)-1]
		assert.Equal(t, s.wait, last[0] == "wait", "%s: %s", s.name, formatValkeyTrips(trips))
	}
}

// TestValkeyCheckIsRemembered: the standalone check costs one INFO on the
// first call, none later; a failed check is not remembered.
func TestValkeyCheckIsRemembered(t *testing.T) {
	ctx := context.Background()
	c, tap := newTappedValkeyClient(t)
	store := newValkeyStore(c, false)
	key := valkeyPrefix(t, c) + "k"

	failure := errors.New("injected transient failure")
	tap.setBefore(func(_ context.Context, cmds []redis.Cmder) error {
		if cmds[0].Name() == "info" {
			return failure
		}
		return nil
	})
	_, _, err := store.Get(ctx, key)
	require.ErrorIs(t, err, failure)
	requireStoreError(t, err, "valkey get", key)
	assert.Equal(t, [][]string{{"info"}}, tap.take(), "no key was read after the failed check")

	tap.setBefore(nil)
	for range 3 {
		_, _, err = store.Get(ctx, key)
		require.ErrorIs(t, err, writefence.ErrNotFound)
	}
	infos := 0
	for _, trip := range tap.take() {
		if trip[0] == "info" {
			infos++
		}
	}
	assert.Equal(t, 1, infos, "checked again after the failure, then remembered")
}

// TestValkeyNoWatchLeftArmed makes the WATCH path fail in every way it can
// and proves, after each, that no WATCH is left on the pooled connection.
// The client has one connection, so the store's transactions and the probe
// share it whenever it survives the failure. The client logs in as a user
// that may only read the keys under "ro-", so a write refused while queued
// (an EXECABORT) is one of the failures; its password must never show.
func TestValkeyNoWatchLeftArmed(t *testing.T) {
	ctx := context.Background()
	other := newValkeyClient(t)
	prefix := valkeyPrefix(t, other)
	user, password := strings.TrimSuffix(prefix, "/"), "pw-"+testserver.UniqueName(t)
	require.NoError(t, other.Do(ctx, "acl", "setuser", user, "on", ">"+password, "+@all",
		"~"+prefix+"rw-*", "%R~"+prefix+"ro-*").Err())
	t.Cleanup(func() { assert.NoError(t, other.Do(context.Background(), "acl", "deluser", user).Err()) })

	c, tap := newTappedValkeyClient(t, func(o *redis.Options) {
		o.PoolSize = 1
		o.Username = user
		o.Password = password
	})
	store := newValkeyStore(c, false)
	otherStore := newValkeyStore(other, false)
	brand := prefix + "rw-brand"

	// armed reports whether a WATCH on key is armed on c's pooled
	// connection: key is changed from another connection, then c runs a
	// transaction, which aborts if and only if a WATCH covers key. The
	// transaction goes through Watch (with no keys) because that takes the
	// connection from the client's main pool, the one the store's
	// transactions use; c.TxPipelined would take one from the separate
	// pipeline pool.
	armed := func(t *testing.T, key string) bool {
		t.Helper()
		require.NoError(t, other.Set(ctx, key, "changed by another client", 0).Err())
		err := c.Watch(ctx, func(tx *redis.Tx) error {
			_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, prefix+"rw-probe")
				return nil
			})
			return err
		})
		if errors.Is(err, redis.TxFailedErr) {
			return true
		}
		require.NoError(t, err)
		return false
	}

	t.Run("detector", func(t *testing.T) {
		key := prefix + "rw-detector"
		require.NoError(t, c.Do(ctx, "watch", key).Err())
		assert.True(t, armed(t, key), "a WATCH left on the pooled connection is detected")
		assert.False(t, armed(t, key), "and released by the EXEC that detected it")
	})

	create := func(t *testing.T, key string) string {
		t.Helper()
		v, err := otherStore.PutIfVersion(ctx, key, []byte("first"), "")
		require.NoError(t, err)
		return v
	}
	conflict := func(t *testing.T, err error) { assert.ErrorIs(t, err, writefence.ErrConflict) }
	cancelled := func(t *testing.T, err error) { assert.ErrorIs(t, err, context.Canceled) }
	otherFailure := func(t *testing.T, err error) {
		require.Error(t, err)
		assert.NotErrorIs(t, err, writefence.ErrConflict)
		assert.NotErrorIs(t, err, writefence.ErrNotFound)
	}

	cases := []struct {
		name    string
		key     string // under prefix
		branded bool   // the brand key was watched too
		want    func(*testing.T, error)
		run     func(t *testing.T, ctx context.Context, cancel context.CancelFunc, key string) error
	}{
		{"stale version", "rw-stale", false, conflict, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			_, err := otherStore.PutIfVersion(ctx, key, []byte("second"), v)
			require.NoError(t, err)
			_, err = store.PutIfVersion(ctx, key, []byte("x"), v)
			return err
		}},
		{"create on existing", "rw-exists", false, conflict, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			create(t, key)
			_, err := store.PutIfVersion(ctx, key, []byte("x"), "")
			return err
		}},
		{"update of absent key", "rw-absent", false, conflict, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			_, err := store.PutIfVersion(ctx, key, []byte("x"), strings.Repeat("a", 32))
			return err
		}},
		{"brand refused", "rw-branded", true, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, writefence.ErrWire)
		}, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			_, err := store.PutIfBranded(ctx, brand, defaults.Identity, key, [][]byte{[]byte("x")}, v)
			return err
		}},
		{"EXEC aborted", "rw-aborted", false, func(t *testing.T, err error) {
			assert.ErrorIs(t, err, writefence.ErrConflict)
			assert.ErrorIs(t, err, redis.TxFailedErr)
		}, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			tap.onMulti(func(context.Context) {
				assert.NoError(t, other.Set(ctx, key, "sneaked in", 0).Err())
			})
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			return err
		}},
		{"WRONGTYPE in the read", "rw-list", false, otherFailure, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			require.NoError(t, other.RPush(ctx, key, "a").Err())
			_, err := store.PutIfVersion(ctx, key, []byte("x"), "")
			return err
		}},
		{"NOPERM while queued", "ro-key", false, otherFailure, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			// The transaction was discarded (EXECABORT); the error is the
			// refusal of the queued SET, which says why.
			assert.True(t, redis.HasErrorPrefix(err, "NOPERM"), "%v", err)
			assert.ErrorIs(t, err, fs.ErrPermission)
			return err
		}},
		{"ctx cancelled after the read", "rw-cancel-exec", false, cancelled, func(t *testing.T, ctx context.Context, cancel context.CancelFunc, key string) error {
			v := create(t, key)
			tap.setAfter(func(cmds []redis.Cmder) {
				if cmds[0].Name() == "watch" {
					tap.setAfter(nil)
					cancel()
				}
			})
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			data, _, gerr := otherStore.Get(context.Background(), key)
			require.NoError(t, gerr)
			assert.Equal(t, "first", string(data), "a cancelled call wrote nothing")
			return err
		}},
		{"ctx cancelled as the read is sent", "rw-cancel-read", false, cancelled, func(t *testing.T, ctx context.Context, cancel context.CancelFunc, key string) error {
			v := create(t, key)
			tap.setBefore(func(_ context.Context, cmds []redis.Cmder) error {
				if cmds[0].Name() == "watch" {
					tap.setBefore(nil)
					cancel()
				}
				return nil
			})
			_, err := store.PutIfVersion(ctx, key, []byte("x"), v)
			return err
		}},
		{"connection killed after the read", "rw-killed", false, otherFailure, func(t *testing.T, ctx context.Context, _ context.CancelFunc, key string) error {
			v := create(t, key)
			id, err := c.ClientID(ctx).Result()
			require.NoError(t, err)
			tap.onMulti(func(context.Context) {
				assert.NoError(t, other.ClientKillByFilter(ctx, "ID", fmt.Sprint(id)).Err())
			})
			_, err = store.PutIfVersion(ctx, key, []byte("x"), v)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			defer tap.setBefore(nil)
			defer tap.setAfter(nil)
			key := prefix + tc.key
			before, err := c.ClientID(ctx).Result()
			require.NoError(t, err)
			opCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			err = tc.run(t, opCtx, cancel, key)
			tc.want(t, err)
			if err != nil {
				assert.NotContains(t, err.Error(), password)
				t.Logf("error: %v", err)
			}

			assert.False(t, armed(t, key), "a WATCH was left armed on the pooled connection")
			if tc.branded {
				assert.False(t, armed(t, brand), "a WATCH of the brand key was left armed")
			}
			assert.LessOrEqual(t, c.PoolStats().TotalConns, uint32(1))
			after, err := c.ClientID(ctx).Result()
			require.NoError(t, err)
			t.Logf("connection kept: %v", before == after)
		})
	}
}

// ---- races ----

// TestValkeyFenceSameEpochRace: 16 writers push the same epoch through one
// Fence each round; the server lets exactly one land and every other push
// is refused as stale.
func TestValkeyFenceSameEpochRace(t *testing.T) {
	t.Parallel()
	const writers, rounds = 16, 50
	ctx := context.Background()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		c := newValkeyClient(t, func(o *redis.Options) { o.PoolSize = writers })
		fence := &writefence.Fence{Store: newValkeyStore(c, script), Prefix: valkeyPrefix(t, c)}

		var landed, stale, other int
		for round := uint64(1); round <= rounds; round++ {
			errs := together(writers, func(w int) error {
				payload := fmt.Appendf(nil, "round %d writer %d", round, w)
				return fence.Push(ctx, "race", "shard", fmt.Sprintf("writer-%d", w), round, payload)
			})

			nils := 0
			for w, err := range errs {
				switch {
				case err == nil:
					nils++
				case errors.Is(err, writefence.ErrStaleEpoch):
					stale++
				default:
					other++
					t.Errorf("round %d writer %d: %v", round, w, err)
				}
			}
			landed += nils
			require.Equal(t, 1, nils, "round %d: exactly one push lands", round)

			epoch, _, _, err := fence.Latest(ctx, "race", "shard")
			require.NoError(t, err)
			require.Equal(t, round, epoch)
		}
		t.Logf("%d rounds of %d writers: %d landed, %d stale, %d other errors", rounds, writers, landed, stale, other)
		assert.Equal(t, rounds, landed)
		assert.Equal(t, rounds*(writers-1), stale)
	})
}

// ---- cluster ----

// keyCommandCalls sums calls, failed and rejected calls of the commands
// that touch keys, from INFO commandstats.
func keyCommandCalls(t *testing.T, c *redis.Client) map[string]int {
	t.Helper()
	stats, err := c.Info(context.Background(), "commandstats").Result()
	require.NoError(t, err)
	calls := map[string]int{}
	for line := range strings.Lines(stats) {
		name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k == "calls" || k == "failed_calls" || k == "rejected_calls" {
				n, err := strconv.Atoi(v)
				require.NoError(t, err, line)
				calls[strings.TrimPrefix(name, "cmdstat_")] += n
			}
		}
	}
	return calls
}

var valkeyKeyCommands = []string{"get", "getrange", "strlen", "exists", "set", "del", "unlink", "rename", "persist", "scan", "watch", "unwatch", "multi", "exec", "eval", "evalsha"}

// TestValkeyRefusesCluster: a standalone client of a cluster-enabled node
// (no slots assigned) is refused after INFO, before any key is read or
// written. (A ring is refused without a server: TestValkeyRefusesRing.)
func TestValkeyRefusesCluster(t *testing.T) {
	addr := testserver.StartValkey(t, "", "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--logfile", "")
	c := testserver.ValkeyClient(t, addr, "")
	eachValkeyPath(t, func(t *testing.T, script bool) {
		requireValkeyUnsupported(t, newValkeyStore(c, script), "INFO cluster reports cluster_enabled:1")
	})

	calls := keyCommandCalls(t, c)
	assert.Positive(t, calls["info"], "the check asked the server")
	for _, cmd := range valkeyKeyCommands {
		assert.Zero(t, calls[cmd], "the server saw %s", cmd)
	}

	// The count above would see a key command: one sent now shows up.
	_ = c.GetRange(context.Background(), "k", 0, 1).Err()
	assert.Positive(t, keyCommandCalls(t, c)["getrange"], "a GETRANGE is counted")
}

// TestValkeyRefusesServerWithoutInfo: a server whose INFO command is
// renamed away answers INFO cluster with "ERR unknown command": the store
// cannot tell whether it is a cluster node, so every call is refused as
// unsupported, having sent nothing but INFO, and a Fence's push does not
// retry the refusal.
func TestValkeyRefusesServerWithoutInfo(t *testing.T) {
	addr := testserver.StartValkey(t, "", "--rename-command", "INFO", "")
	c, tap := newTappedValkeyClient(t, func(o *redis.Options) { o.Addr = addr })
	// sent returns the round trips since the last call, less those that
	// set up a connection (HELLO, CLIENT SETINFO).
	sent := func() [][]string {
		var trips [][]string
		for _, trip := range tap.take() {
			if trip[0] != "hello" && trip[0] != "client" {
				trips = append(trips, trip)
			}
		}
		return trips
	}
	eachValkeyPath(t, func(t *testing.T, script bool) {
		store := newValkeyStore(c, script)
		requireValkeyUnsupported(t, store, "the server answered INFO cluster with an error")
		calls := callValkey(store)
		for _, call := range calls {
			assert.Contains(t, call.err.Error(), "ERR unknown command", call.name)
		}
		trips := sent()
		assert.Len(t, trips, 2*len(calls), "one round trip per call")
		for _, trip := range trips {
			assert.Equal(t, []string{"info"}, trip, "nothing but INFO: %s", formatValkeyTrips(trips))
		}

		fence := &writefence.Fence{Store: newValkeyStore(c, script), MaxAttempts: 3, RetryDelay: time.Millisecond}
		err := fence.Push(context.Background(), "wal", "0", "w", 1, []byte("x"))
		require.ErrorIs(t, err, errors.ErrUnsupported)
		assert.Equal(t, [][]string{{"info"}}, sent(), "the push's round trips: one attempt")
	})
}

// newValkeyCluster returns a client of the shared cluster (see
// testserver.ValkeyClusterClient), a tap on the clients of its nodes, and
// a key prefix of the test's own, a hash tag when tagged.
func newValkeyCluster(t *testing.T, tagged bool) (*redis.ClusterClient, *valkeyTap, string) {
	t.Helper()
	addrs := testserver.ValkeyClusterAddrs(t)
	tap := &valkeyTap{}
	return testserver.ValkeyClusterClient(t, addrs, tap), tap, testserver.ValkeyClusterPrefix(t, addrs, tagged)
}

// TestValkeyClusterConformance runs the conformance suite on the shared
// cluster, on both write paths: with the suite's keys spread over the
// slots (the Branded checks skip: their two keys are in different slots,
// which PutIfBranded refuses as unsupported), with every key under one
// hash tag (every check runs, the branded ones atomic in one slot), and
// spread with WaitReplicas set.
func TestValkeyClusterConformance(t *testing.T) {
	t.Parallel()
	addrs := testserver.ValkeyClusterAddrs(t)
	for _, tc := range []struct {
		name   string
		prefix string
		wait   bool
	}{{"spread", "", false}, {"one slot", "{writefencetest}", false}, {"spread, waiting", "", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			eachValkeyPath(t, func(t *testing.T, script bool) {
				cc := testserver.ValkeyClusterClient(t, addrs)
				store := newValkeyStore(cc, script)
				store.MaxObjectSize = kitReadLimit
				if tc.wait {
					store.WaitReplicas, store.WaitTimeout = 1, testAckTimeout
				}
				opts := kitOptions(testserver.DamageValkey(cc))
				opts.KeyPrefix = tc.prefix
				writefencetest.TestConditionalStore(t, func(*testing.T) writefence.ConditionalStore { return store }, opts)
			})
		})
	}
}

// TestValkeyClusterSlots: a shard's record, its sync key and its staging
// keys are in one slot, as the server computes slots; the records of many
// shards spread over every primary; a record written through the cluster
// is where CLUSTER KEYSLOT says.
func TestValkeyClusterSlots(t *testing.T) {
	ctx := context.Background()
	cc, _, prefix := newValkeyCluster(t, false)
	store := newValkeyStore(cc, false)
	f := &writefence.Fence{Store: store, Prefix: prefix}
	perNode := map[string]int{}
	for i := range 64 {
		shard := strconv.Itoa(i)
		key, err := keys.Shard(prefix, "wal", shard)
		require.NoError(t, err)
		slot := keys.Slot(key)
		for _, k := range []string{key, keys.WaitIn(key), keys.Staged(key, strings.Repeat("a", 32))} {
			n, err := cc.ClusterKeySlot(ctx, k).Result()
			require.NoError(t, err)
			require.EqualValues(t, slot, n, "the server's slot of %q", k)
		}
		require.NoError(t, f.Push(ctx, "wal", shard, "w", 1, []byte("x")))
		m, err := cc.MasterForKey(ctx, key)
		require.NoError(t, err)
		n, err := m.Exists(ctx, key).Result()
		require.NoError(t, err)
		require.EqualValues(t, 1, n, "%q is on the primary of its slot", key)
		perNode[m.Options().Addr]++
	}
	t.Logf("64 shards over the primaries: %v", perNode)
	assert.Len(t, perNode, 3, "the shards spread over every primary")
}

// TestValkeyClusterProbe: the probe trusts the cluster on both paths and
// cleans up after itself.
func TestValkeyClusterProbe(t *testing.T) {
	cc, _, prefix := newValkeyCluster(t, false)
	eachValkeyPath(t, func(t *testing.T, script bool) {
		require.NoError(t, writefence.Probe(t.Context(), newValkeyStore(cc, script), prefix+"probe"))
		// ForEachMaster calls its function on every primary at once.
		var mu sync.Mutex
		var left []string
		require.NoError(t, cc.ForEachMaster(t.Context(), func(ctx context.Context, m *redis.Client) error {
			ks, err := m.Keys(ctx, prefix+"*").Result()
			mu.Lock()
			defer mu.Unlock()
			left = append(left, ks...)
			return err
		}))
		assert.Empty(t, left, "the probe cleans up")
	})
}

// TestValkeyClusterLease: a lease on the cluster hands out rising terms,
// refuses a second holder while held, is taken over once expired, and the
// holder's epochs fence a shard whose record is on another primary.
func TestValkeyClusterLease(t *testing.T) {
	ctx := context.Background()
	cc, _, prefix := newValkeyCluster(t, false)
	eachValkeyPath(t, func(t *testing.T, script bool) {
		fence := &writefence.Fence{Store: newValkeyStore(cc, script), Prefix: prefix + map[bool]string{false: "watch/", true: "script/"}[script]}
		now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
		clock := func() time.Time { return now }
		lease := func(holder string) *writefence.Lease {
			return &writefence.Lease{Fence: fence, Name: "wal/0", Holder: holder, TTL: 10 * time.Second, Clock: clock}
		}
		a, b := lease("a"), lease("b")
		term, err := a.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(1), term)
		_, err = b.Acquire(ctx)
		require.ErrorIs(t, err, writefence.ErrLeaseHeld)
		epoch, err := a.Epoch(ctx, "wal", "0")
		require.NoError(t, err)
		require.NoError(t, fence.Push(ctx, "wal", "0", "a", epoch, []byte("by a")))
		late, err := a.Epoch(ctx, "wal", "0")
		require.NoError(t, err)

		now = now.Add(time.Minute)
		term, err = b.Acquire(ctx)
		require.NoError(t, err)
		assert.Equal(t, uint64(2), term, "a takeover raises the term")
		seal, err := b.Epoch(ctx, "wal", "0")
		require.NoError(t, err)
		require.NoError(t, fence.Seal(ctx, "wal", "0", "b", seal))
		require.ErrorIs(t, fence.Push(ctx, "wal", "0", "a", late, []byte("zombie")), writefence.ErrStaleEpoch)
		require.Error(t, a.Renew(ctx), "the deposed holder cannot renew")
	})
}

// TestValkeyClusterFenceRace: 16 writers push one epoch per round to a
// shard on the cluster: exactly one lands each round, every other is
// refused as stale; shards of different slots race at once.
func TestValkeyClusterFenceRace(t *testing.T) {
	t.Parallel()
	const writers, rounds, shards = 16, 20, 3
	ctx := context.Background()
	cc, _, prefix := newValkeyCluster(t, false)
	eachValkeyPath(t, func(t *testing.T, script bool) {
		fences := make([]*writefence.Fence, writers)
		for w := range fences {
			fences[w] = &writefence.Fence{Store: newValkeyStore(cc, script), Prefix: prefix + map[bool]string{false: "watch/", true: "script/"}[script]}
		}
		for round := uint64(1); round <= rounds; round++ {
			errs := together(writers*shards, func(i int) error {
				w, shard := i%writers, strconv.Itoa(i/writers)
				return fences[w].Push(ctx, "race", shard, fmt.Sprintf("writer-%d", w), round, fmt.Appendf(nil, "round %d writer %d", round, w))
			})
			for shard := range shards {
				nils := 0
				for w := range writers {
					switch err := errs[shard*writers+w]; {
					case err == nil:
						nils++
					case !errors.Is(err, writefence.ErrStaleEpoch):
						t.Errorf("round %d shard %d writer %d: %v", round, shard, w, err)
					}
				}
				require.Equal(t, 1, nils, "round %d shard %d: exactly one push lands", round, shard)
				epoch, _, _, err := fences[0].Latest(ctx, "race", strconv.Itoa(shard))
				require.NoError(t, err)
				require.Equal(t, round, epoch)
			}
		}
	})
}

// TestValkeyClusterBrand: BrandVerifyAlways is offered where it stays
// atomic. Under a prefix with a hash tag (every key in one slot) every
// push checks the brand inside its write and a foreign brand refuses it;
// under a prefix without one the record and the brand key are in
// different slots, and the push is refused as unsupported, naming why,
// with nothing written; BrandVerify (a check of the brand key alone) works
// there.
func TestValkeyClusterBrand(t *testing.T) {
	ctx := context.Background()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		cc, _, tagged := newValkeyCluster(t, true)
		store := newValkeyStore(cc, script)
		f := &writefence.Fence{Store: store, Prefix: tagged, Brand: writefence.BrandVerifyAlways}
		_, err := f.ClaimBrand(ctx)
		require.NoError(t, err)
		require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, []byte("under the brand")))
		_, bv, err := store.Get(ctx, keys.Brand(tagged))
		require.NoError(t, err)
		_, err = store.PutIfVersion(ctx, keys.Brand(tagged), []byte("other/v1"), bv)
		require.NoError(t, err)
		requireWire(t, f.Push(ctx, "wal", "0", "w", 2, []byte("under another brand")), writefence.WireError{Key: keys.Brand(tagged), Expected: defaults.Identity, Found: "other/v1"})

		_, _, spread := newValkeyCluster(t, false)
		key, err := keys.Shard(spread, "wal", "0")
		require.NoError(t, err)
		require.NotEqual(t, keys.Slot(keys.Brand(spread)), keys.Slot(key), "the test needs them apart")
		claim := &writefence.Fence{Store: store, Prefix: spread, Brand: writefence.BrandClaim}
		require.NoError(t, claim.Push(ctx, "wal", "0", "w", 1, []byte("claimed, then pushed")))
		verify := &writefence.Fence{Store: store, Prefix: spread, Brand: writefence.BrandVerify}
		require.NoError(t, verify.Push(ctx, "wal", "0", "w", 2, []byte("verified once")))
		always := &writefence.Fence{Store: store, Prefix: spread, Brand: writefence.BrandVerifyAlways}
		tctx, trace := testserver.Traced(ctx)
		err = always.Push(tctx, "wal", "0", "w", 3, []byte("never"))
		require.ErrorIs(t, err, errors.ErrUnsupported)
		assert.Contains(t, err.Error(), "no atomic step spans two slots")
		assert.Equal(t, int64(1), trace.Writes(), "final: one attempt")
		_, _, payload, err := verify.Latest(ctx, "wal", "0")
		require.NoError(t, err)
		assert.Equal(t, "verified once", string(payload), "nothing was written")
	})
}

// TestValkeyClusterRoundTrips: on the cluster, with no resharding, a call
// costs what it costs on one server: two round trips per write on the
// WATCH path, one on the script path, one per read, and one more, the
// WAIT, with WaitReplicas; the keys share a hash tag so the branded steps
// can run.
func TestValkeyClusterRoundTrips(t *testing.T) {
	for _, wait := range []int{0, 1} {
		t.Run(fmt.Sprintf("wait=%d", wait), func(t *testing.T) {
			eachValkeyPath(t, func(t *testing.T, script bool) {
				cc, tap, prefix := newValkeyCluster(t, true)
				store := newValkeyStore(cc, script)
				if wait > 0 {
					store.WaitReplicas, store.WaitTimeout = wait, testAckTimeout
				}
				steps := valkeyTripSteps(t, store, prefix, wait)
				tap.take()
				checkValkeyTrips(t, tap, steps)
				assert.Empty(t, tap.redirected(), "no redirection")
			})
		})
	}
}

// TestValkeyClusterWaitReplicas: on the cluster, WAIT runs on the primary
// that owns the record's slot, after the write on the same connection: a
// push with WaitReplicas=1 returns once that primary's replica holds the
// record, for shards on every primary; with WaitReplicas=2 (each primary
// has one replica) it does not return nil.
func TestValkeyClusterWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cc, _, prefix := newValkeyCluster(t, false)
	eachValkeyPath(t, func(t *testing.T, script bool) {
		store := newValkeyStore(cc, script)
		store.WaitReplicas, store.WaitTimeout = 1, testAckTimeout
		f := &writefence.Fence{Store: store, Prefix: prefix + map[bool]string{false: "watch/", true: "script/"}[script]}
		for i := range 12 {
			shard := strconv.Itoa(i)
			require.NoError(t, f.Push(ctx, "wal", shard, "w", 1, []byte("acknowledged")))
			key, err := keys.Shard(f.Prefix, "wal", shard)
			require.NoError(t, err)
			primary, err := cc.MasterForKey(ctx, key)
			require.NoError(t, err)
			replica, err := cc.SlaveForKey(ctx, key)
			require.NoError(t, err)
			// A replica serves a read on a connection in READONLY mode.
			conn := replica.Conn()
			require.NoError(t, conn.ReadOnly(ctx).Err())
			got, err := conn.Get(ctx, key).Result()
			require.NoError(t, conn.Close())
			require.NoError(t, err, "the replica of %s holds %q when the push returns", primary.Options().Addr, key)
			assert.Equal(t, valkeyRaw(t, primary, key), got)
		}

		store2 := newValkeyStore(cc, script)
		store2.WaitReplicas, store2.WaitTimeout = 2, testWaitTimeout
		err := (&writefence.Fence{Store: store2, Prefix: f.Prefix}).Push(ctx, "wal", "0", "w", 2, []byte("two replicas"))
		require.ErrorIs(t, err, writefence.ErrOutcomeUnknown)
		assert.Contains(t, err.Error(), "of 2 replicas acknowledged")
	})
}

// newValkeyPair starts a cluster of the test's own: two primaries with the
// slots split between them, and no replicas, and a client of it with tap
// on its nodes.
func newValkeyPair(t *testing.T, tap *valkeyTap) (a, b testserver.ValkeyNode, cc *redis.ClusterClient) {
	t.Helper()
	a, b = testserver.StartValkeyNode(t), testserver.StartValkeyNode(t)
	testserver.FormValkeyCluster(t, []testserver.ValkeyNode{a, b}, nil)
	return a, b, testserver.ValkeyClusterClient(t, []string{a.Addr, b.Addr}, tap)
}

// valkeyShardOn returns a shard name whose record under prefix is in a
// slot of the first primary of a newValkeyPair (slots 0 to 8191), and the
// record's key.
func valkeyShardOn(t *testing.T, prefix string) (shard, key string) {
	t.Helper()
	for i := 0; ; i++ {
		shard = strconv.Itoa(i)
		key, err := keys.Shard(prefix, "wal", shard)
		require.NoError(t, err)
		if keys.Slot(key) < 8192 {
			return shard, key
		}
	}
}

// migrateKey moves key from src to dst with MIGRATE, while its slot is
// MIGRATING on src and IMPORTING on dst.
func migrateKey(t *testing.T, src, dst testserver.ValkeyNode, key string) {
	t.Helper()
	assert.NoError(t, src.Client.Do(context.Background(), "migrate", "127.0.0.1", dst.Port(), key, 0, 5000).Err())
}

// TestValkeyClusterMigration moves a record's slot between two primaries
// step by step, as valkey-cli --cluster reshard does, and writes the record
// with PutIfVersion at each step, conditioned on the version the last write
// returned: while the slot is migrating and the record still on the source
// (the script path cannot stage a value there, and writes one of more than
// 2 KiB on the WATCH path; a smaller one travels in the script's call,
// which runs there); with the record migrated by MIGRATE at the next MULTI
// (between the write's check and its EXEC, where the WATCH aborts and the
// write runs again on the target; for a script, which has no such gap, at
// the read after it); with the record on the target (an ASK); and once the
// slot is assigned to the target (a MOVED to a client that still routes to
// the source). Each write lands, none is reported as a conflict, and the
// record exists on exactly one node; on both paths, with values on both
// sides of the script's 2 KiB.
func TestValkeyClusterMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		for _, pad := range []int{0, 4 << 10} {
			t.Run(fmt.Sprintf("pad=%d", pad), func(t *testing.T) {
				tap := &valkeyTap{}
				a, b, cc := newValkeyPair(t, tap)
				store := newValkeyStore(cc, script)
				_, key := valkeyShardOn(t, "")
				slot := keys.Slot(key)
				v, err := store.PutIfVersion(ctx, key, []byte("step 0"), "")
				require.NoError(t, err)
				write := func(step string, on testserver.ValkeyNode) {
					t.Helper()
					data := step + strings.Repeat("p", pad)
					nv, err := store.PutIfVersion(ctx, key, []byte(data), v)
					require.NoError(t, err, "%s: the write lands (not a conflict, not an error)", step)
					v = nv
					requireValkeyContent(t, store, key, data, v)
					for _, n := range []testserver.ValkeyNode{a, b} {
						count, err := n.Client.ClusterCountKeysInSlot(ctx, slot).Result()
						require.NoError(t, err)
						assert.EqualValues(t, map[bool]int64{true: 1, false: 0}[n.Addr == on.Addr], count, "%s: the record is on %s alone", step, on.Addr)
					}
					t.Logf("%s: redirections so far %v", step, tap.redirected())
				}
				testserver.MigrateValkeySlot(t, slot, a, b, nil, func() {
					write("migrating, the record on the source", a)
					tap.onMulti(func(context.Context) { migrateKey(t, a, b, key) })
					write("the record migrated at the next MULTI", b)
					write("migrating, the record on the target", b)
				})
				write("the slot assigned to the target", b)
				codes := tap.redirected()
				assert.Positive(t, codes["ASK"], "ASK redirections were followed")
				assert.Positive(t, codes["MOVED"], "MOVED redirections were followed")
			})
		}
	})
}

// TestValkeyClusterMigrationRace: writers, each with a Fence of its own,
// push one epoch per round to one shard, all released at once, while its
// slot moves between two primaries and back, one step of the migration
// per round: stable; migrating with the record on the source; migrating,
// the record moved by MIGRATE when the round's first MULTI is sent, so that
// the round's writes meet it on either node; migrating with the record on
// the target; assigned to the target. Every round exactly one push lands
// and every other is refused as stale, the recorded epoch is the round's,
// and the record exists on exactly one node: a migration under racing
// pushes neither doubles a write nor loses one.
func TestValkeyClusterMigrationRace(t *testing.T) {
	t.Parallel()
	const writers, cycles = 8, 2
	ctx := context.Background()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		tap := &valkeyTap{}
		a, b, cc := newValkeyPair(t, tap)
		store := newValkeyStore(cc, script)
		shard, key := valkeyShardOn(t, "")
		slot := keys.Slot(key)
		fences := make([]*writefence.Fence, writers)
		for i := range fences {
			fences[i] = &writefence.Fence{Store: store}
		}
		round := uint64(0)
		race := func(phase string) {
			t.Helper()
			round++
			errs := together(writers, func(w int) error {
				return fences[w].Push(ctx, "wal", shard, fmt.Sprintf("w%d", w), round, fmt.Appendf(nil, "round %d by %d", round, w))
			})
			nils := 0
			for w, err := range errs {
				switch {
				case err == nil:
					nils++
				case !errors.Is(err, writefence.ErrStaleEpoch):
					t.Errorf("round %d (%s) writer %d: %v", round, phase, w, err)
				}
			}
			require.Equal(t, 1, nils, "round %d (%s): exactly one push lands", round, phase)
			epoch, _, _, err := fences[0].Latest(ctx, "wal", shard)
			require.NoError(t, err)
			require.Equal(t, round, epoch, "round %d (%s)", round, phase)
			var total int64
			for _, n := range []testserver.ValkeyNode{a, b} {
				count, err := n.Client.ClusterCountKeysInSlot(ctx, slot).Result()
				require.NoError(t, err)
				total += count
			}
			require.EqualValues(t, 1, total, "round %d (%s): the record exists once", round, phase)
		}
		src, dst := a, b
		for range cycles {
			race("stable")
			testserver.MigrateValkeySlot(t, slot, src, dst, nil, func() {
				race("migrating, the record on the source")
				from, to := src, dst
				tap.onMulti(func(context.Context) { migrateKey(t, from, to, key) })
				race("the record moves during the round")
				tap.setBefore(nil) // in case no MULTI came
				race("migrating, the record on the target")
			})
			race("assigned to the target")
			src, dst = dst, src
		}
		t.Logf("%d rounds of %d writers; redirections: %v", round, writers, tap.redirected())
	})
}

// TestValkeyClusterFailover: a cluster of the test's own, one primary and
// its replica, the replica promoted. The primary announces 127.0.0.2 to
// the cluster (and 127.0.0.1 to clients), where relays listen: its replica
// replicates through one that can hold and cut the stream, the cluster bus
// goes through a plain one.
//
// Coordinated (CLUSTER FAILOVER on the replica): the replica catches up
// before it takes over, and a writer's next push, routed by MOVED to the
// new primary, lands: no push that returned nil is lost, with or without
// WaitReplicas. Forced (CLUSTER FAILOVER FORCE, after the stream was held
// during a push and then cut, as in TestValkeyFailover): without
// WaitReplicas the push held back returned nil and is lost, and a second
// push at its epoch returns nil as well; with WaitReplicas=1 that push and
// its retry report an unknown outcome, and no push that returned nil is
// lost.
func TestValkeyClusterFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, forced := range []bool{false, true} {
		for _, wait := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/wait=%v", map[bool]string{false: "coordinated", true: "forced"}[forced], wait), func(t *testing.T) {
				eachValkeyPath(t, func(t *testing.T, script bool) {
					p := testserver.StartValkeyNode(t, "--cluster-announce-ip", "127.0.0.2", "--cluster-announce-client-ipv4", "127.0.0.1")
					relay := newReplRelayAt(t, net.JoinHostPort("127.0.0.2", p.Port()), p.Addr)
					newReplRelayAt(t, net.JoinHostPort("127.0.0.2", p.BusPort), net.JoinHostPort("127.0.0.1", p.BusPort))
					r := testserver.StartValkeyNode(t)
					testserver.FormValkeyCluster(t, []testserver.ValkeyNode{p}, []testserver.ValkeyNode{r})
					require.Equal(t, "127.0.0.2", infoField(t, r.Client, "replication", "master_host"), "the replica replicates through the relay")

					// newStore returns a store over c that waits for the
					// replica, up to timeout, when the test waits at all.
					newStore := func(c redis.UniversalClient, timeout time.Duration) *writefence.ValkeyStore {
						s := newValkeyStore(c, script)
						if wait {
							s.WaitReplicas, s.WaitTimeout = 1, timeout
						}
						return s
					}
					both := []string{p.Addr, r.Addr}
					aStore := newStore(testserver.ValkeyClusterClient(t, both), testAckTimeout)
					a := &writefence.Fence{Store: aStore}
					pushes := &valkeyPushes{t: t}
					push := pushes.push
					caughtUp := func() bool {
						return infoField(t, r.Client, "replication", "slave_repl_offset") == infoField(t, p.Client, "replication", "master_repl_offset")
					}

					require.NoError(t, push(a, "a", 1))
					var errA, errRetry error
					if forced {
						waitUntil(t, "the replica has epoch 1", caughtUp)
						relay.hold()
						// No acknowledgement can come now: a short WAIT
						// suffices. (No call is in flight.)
						aStore.WaitTimeout = testWaitTimeout
						errA = push(a, "a", 2)
						// The same push retried from another connection, as
						// another process of writer a would: it finds its own
						// record on the primary.
						retry := &writefence.Fence{Store: newStore(testserver.ValkeyClusterClient(t, both), testWaitTimeout)}
						errRetry = push(retry, "a", 2)
						relay.sever()
						waitUntil(t, "the replica's link is down", func() bool {
							return infoField(t, r.Client, "replication", "master_link_status") == "down"
						})
						require.NoError(t, r.Client.Do(ctx, "cluster", "failover", "force").Err())
					} else {
						require.NoError(t, push(a, "a", 2))
						require.NoError(t, r.Client.Do(ctx, "cluster", "failover").Err())
					}
					waitUntil(t, "the replica is promoted and the cluster ok", func() bool {
						info, err := r.Client.ClusterInfo(ctx).Result()
						return err == nil && strings.Contains(info, "cluster_state:ok") &&
							infoField(t, r.Client, "replication", "role") == "master"
					})
					if forced {
						// A writer that reaches only the promoted node.
						// The promoted primary has no replica to wait for.
						b := &writefence.Fence{Store: newValkeyStore(testserver.ValkeyClusterClient(t, []string{r.Addr}), script)}
						require.NoError(t, push(b, "b", 2))
					} else {
						require.NoError(t, push(a, "a", 3), "routed to the new primary")
					}

					reader := &writefence.Fence{Store: newValkeyStore(testserver.ValkeyClusterClient(t, []string{r.Addr}), script)}
					epoch, writer, _, err := reader.Latest(ctx, "wal", "0")
					require.NoError(t, err)
					if !forced {
						lost, _ := pushes.lost(epoch, writer)
						assert.Empty(t, lost, "no push that returned nil is lost")
						assert.Equal(t, uint64(3), epoch)
						return
					}
					pushes.requireOutcome(epoch, writer, wait, errA, errRetry, "the old primary")
				})
			})
		}
	}
}

// ---- replication and failover (WaitReplicas) ----

// Durability across failover, on a primary and a replica of the test's own.

// replRelay is a TCP relay between a replica and its primary. hold stops
// the primary's bytes from reaching the replica while keeping both
// connections open, so the primary still counts the replica (and its
// acknowledgements of what it had before) while it receives nothing new;
// sever closes every connection and refuses new ones.
type replRelay struct {
	ln     net.Listener
	target string

	mu    sync.Mutex // guards everything below
	wake  *sync.Cond // signalled when held or cut change
	held  bool
	cut   bool
	conns []net.Conn

	wg sync.WaitGroup // the accept loop and every connection's pumps
}

// newReplRelay starts a relay to target on a free port in 20000-32000; it
// is closed when the test ends.
func newReplRelay(t *testing.T, target string) *replRelay {
	t.Helper()
	for range 20 {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000))))
		if err == nil {
			return startReplRelay(t, ln, target)
		}
	}
	t.Fatal("no free port for the relay")
	return nil
}

func startReplRelay(t *testing.T, ln net.Listener, target string) *replRelay {
	r := &replRelay{ln: ln, target: target}
	r.wake = sync.NewCond(&r.mu)
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
}

// newReplRelayAt starts a relay to target listening at addr.
func newReplRelayAt(t *testing.T, addr, target string) *replRelay {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	return startReplRelay(t, ln, target)
}

func (r *replRelay) addr() string { return r.ln.Addr().String() }

func (r *replRelay) accept() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		r.mu.Lock()
		if r.cut {
			r.mu.Unlock()
			_ = c.Close()
			continue
		}
		s, err := net.DialTimeout("tcp", r.target, 5*time.Second)
		if err != nil {
			r.mu.Unlock()
			_ = c.Close()
			continue
		}
		r.conns = append(r.conns, c, s)
		r.mu.Unlock()
		r.wg.Add(2)
		go r.pump(c, s, false)
		go r.pump(s, c, true)
	}
}

// pump copies from src to dst; from the primary (fromServer) it forwards
// nothing while the relay holds, and nothing at all once it is cut.
func (r *replRelay) pump(src, dst net.Conn, fromServer bool) {
	defer r.wg.Done()
	defer func() { _ = src.Close(); _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			for fromServer && r.held && !r.cut {
				r.wake.Wait()
			}
			cut := r.cut
			r.mu.Unlock()
			if cut {
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// hold stops forwarding the primary's bytes: nothing the primary sends
// from now on reaches the replica.
func (r *replRelay) hold() {
	r.mu.Lock()
	r.held = true
	r.mu.Unlock()
}

// sever closes every connection and refuses new ones; held bytes are
// dropped.
func (r *replRelay) sever() {
	r.mu.Lock()
	r.cut = true
	conns := r.conns
	r.conns = nil
	r.wake.Broadcast()
	r.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

func (r *replRelay) close() {
	r.sever()
	_ = r.ln.Close()
	r.wg.Wait()
}

// infoField returns one field of INFO section from c.
func infoField(t testing.TB, c *redis.Client, section, name string) string {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	require.NoError(t, err)
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// waitUntil polls cond every 10 ms, failing the test after 15 s. Only the
// servers' replication state is polled: it changes on its own.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// startPrimary starts a server to replicate from and returns its address
// and a client of it. It serves a replica's full sync at once, not after
// the default delay of 5 s.
func startPrimary(t testing.TB) (string, *redis.Client) {
	t.Helper()
	addr := testserver.StartValkey(t, "", "--repl-diskless-sync-delay", "0")
	return addr, testserver.ValkeyClient(t, addr, "")
}

// startReplica starts a replica of primary, through the server at
// upstreamAddr (primary's own address, or a relay to it), and waits until
// the replica's link is up and primary counts it online: only then does
// WAIT count it (after a diskless sync the primary waits for the replica's
// first acknowledgement, sent once a second).
func startReplica(t testing.TB, primary *redis.Client, upstreamAddr string) *redis.Client {
	t.Helper()
	host, port, err := net.SplitHostPort(upstreamAddr)
	require.NoError(t, err)
	replica := testserver.ValkeyClient(t, testserver.StartValkey(t, "", "--replicaof", host, port), "")
	waitUntil(t, "the replica's link is up", func() bool {
		return infoField(t, replica, "replication", "master_link_status") == "up"
	})
	waitUntil(t, "the primary counts the replica online", func() bool {
		return strings.Contains(infoField(t, primary, "replication", "slave0"), "state=online")
	})
	return replica
}

// testWaitTimeout bounds the WAITs that are to fail; testAckTimeout those
// that are to succeed, which return as soon as the replica acknowledged.
const (
	testWaitTimeout = 100 * time.Millisecond
	testAckTimeout  = 10 * time.Second
)

// TestValkeyWaitReplicas: with WaitReplicas set and no replica, a push does
// not return nil, not even when retried over its own record; once a
// replica is linked the same push returns nil and the replica holds it.
func TestValkeyWaitReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	eachValkeyPath(t, func(t *testing.T, script bool) {
		primaryAddr, primary := startPrimary(t)
		store := newValkeyStore(primary, script)
		store.WaitReplicas, store.WaitTimeout = 1, testWaitTimeout
		f := &writefence.Fence{Store: store}
		key, err := keys.Shard("", "wal", "0")
		require.NoError(t, err)
		push := func(epoch uint64) error {
			return f.Push(ctx, "wal", "0", "a", epoch, fmt.Appendf(nil, "segment %d", epoch))
		}

		for i := range 2 {
			err := push(1)
			require.ErrorIs(t, err, writefence.ErrOutcomeUnknown, "push %d without a replica", i+1)
			assert.NotErrorIs(t, err, writefence.ErrConflict)
			t.Logf("push %d: %v", i+1, err)
		}
		// A read no replica confirms decides nothing, absent included:
		// the fence never wrote.
		assert.Empty(t, valkeyRaw(t, primary, key))

		// A write lands on the primary but is not reported as landed,
		// and reading it back is not confirmed either.
		v, err := store.PutIfVersion(ctx, "other", []byte("x"), "")
		require.ErrorIs(t, err, writefence.ErrOutcomeUnknown, "a write no replica acknowledged")
		requireStoreError(t, err, "valkey wait", "other")
		assert.Empty(t, v)
		assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged the write within 100ms")
		require.NotEmpty(t, valkeyRaw(t, primary, "other"), "the write is on the primary all the same")
		for name, read := range map[string]func() error{
			"get":    func() error { _, _, err := store.Get(ctx, "other"); return err },
			"prefix": func() error { _, _, _, err := store.GetPrefix(ctx, "other", 1); return err },
		} {
			err := read()
			require.ErrorIs(t, err, writefence.ErrOutcomeUnknown, "%s: a read no replica confirms", name)
			assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged what was read within 100ms", name)
		}

		replica := startReplica(t, primary, primaryAddr)
		// Acknowledgements take what the machine's load makes them take:
		// a WAIT that is to succeed gets time enough. (No call is in
		// flight, so the field may change here.)
		store.WaitTimeout = testAckTimeout
		require.NoError(t, push(1), "the same push, once a replica is linked")
		assert.Equal(t, valkeyRaw(t, primary, key), valkeyRaw(t, replica, key), "the replica holds the record")

		require.NoError(t, push(2))
		assert.Equal(t, valkeyRaw(t, primary, key), valkeyRaw(t, replica, key), "the replica had the write when the push returned")
		_, _, err = store.Get(ctx, key)
		require.NoError(t, err)

		brand := keys.Brand("")
		_, err = store.PutIfVersion(ctx, brand, []byte(defaults.Identity), "")
		require.NoError(t, err)
		_, err = store.PutIfBranded(ctx, brand, defaults.Identity, "branded", [][]byte{[]byte("x")}, "")
		require.NoError(t, err, "a branded write waits for the replica too")
		assert.Equal(t, valkeyRaw(t, primary, "branded"), valkeyRaw(t, replica, "branded"))
	})
}

// valkeyPush is one push and what it returned.
type valkeyPush struct {
	writer string
	epoch  uint64
	err    error
}

// valkeyPushes records the pushes of a failover test, in order.
type valkeyPushes struct {
	t    *testing.T
	list []valkeyPush
}

// push pushes "writer at epoch" to shard wal/0 through f and records it.
func (ps *valkeyPushes) push(f *writefence.Fence, writer string, epoch uint64) error {
	err := f.Push(context.Background(), "wal", "0", writer, epoch, fmt.Appendf(nil, "%s at %d", writer, epoch))
	ps.list = append(ps.list, valkeyPush{writer, epoch, err})
	ps.t.Logf("push by %s at epoch %d: %v", writer, epoch, err)
	return err
}

// lost returns the pushes that returned nil and that the record read after
// the failover, epoch by writer, does not hold, and how many pushes
// returned nil at each epoch.
func (ps *valkeyPushes) lost(epoch uint64, writer string) (lost []valkeyPush, landed map[uint64]int) {
	landed = map[uint64]int{}
	for _, p := range ps.list {
		if p.err != nil {
			continue
		}
		landed[p.epoch]++
		if p.epoch > epoch || p.epoch == epoch && p.writer != writer {
			lost = append(lost, p)
		}
	}
	ps.t.Logf("after the failover: epoch %d by %s; lost: %v", epoch, writer, lost)
	return lost, landed
}

// requireOutcome checks a failover in which a's push at epoch 2 (errA) and
// its retry from another connection (errRetry) met a replication outage,
// and b pushed at epoch 2 on the promoted replica, which then held the
// record epoch by writer. Without wait, the documented failure of
// asynchronous replication: both returned nil and are lost, and b's push
// returned nil too. With WaitReplicas, both report an unknown outcome (the
// retry reads the record only holder has) and no push that returned nil is
// lost.
func (ps *valkeyPushes) requireOutcome(epoch uint64, writer string, wait bool, errA, errRetry error, holder string) {
	t := ps.t
	t.Helper()
	lost, landed := ps.lost(epoch, writer)
	if !wait {
		require.NoError(t, errA)
		require.NoError(t, errRetry)
		assert.Equal(t, []valkeyPush{{"a", 2, nil}, {"a", 2, nil}}, lost, "the documented failure: an acknowledged push is lost")
		assert.Equal(t, 3, landed[2], "and a second push at epoch 2 returned nil too")
		return
	}
	require.ErrorIs(t, errA, writefence.ErrOutcomeUnknown)
	assert.NotErrorIs(t, errA, writefence.ErrConflict)
	require.ErrorIs(t, errRetry, writefence.ErrOutcomeUnknown, "a retry reading the record only %s holds", holder)
	assert.Empty(t, lost, "no push that returned nil is lost")
	assert.Equal(t, 1, landed[2], "one push at epoch 2 returned nil")
}

// TestValkeyFailover: a push during a replication outage, then the replica
// promoted. Without WaitReplicas the acknowledged push is lost and a second
// push at the same epoch also returns nil: the documented failure of
// asynchronous replication. With WaitReplicas=1 the push (and its retry
// from another connection, which reads its own record on the primary)
// reports an unknown outcome, and no push that returned nil is lost.
//
// The outage first holds the replication stream, the primary still
// counting its replica, so that a read confirmed by a WAIT on a connection
// that wrote nothing would pass; then the link is cut for the promotion.
func TestValkeyFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, wait := range []bool{false, true} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			eachValkeyPath(t, func(t *testing.T, script bool) {
				primaryAddr, primary := startPrimary(t)
				relay := newReplRelay(t, primaryAddr)
				replica := startReplica(t, primary, relay.addr())
				newStore := func(c *redis.Client, wait bool) *writefence.ValkeyStore {
					s := newValkeyStore(c, script)
					if wait {
						s.WaitReplicas, s.WaitTimeout = 1, testWaitTimeout
					}
					return s
				}
				key, err := keys.Shard("", "wal", "0")
				require.NoError(t, err)
				pushes := &valkeyPushes{t: t}
				push := pushes.push

				aStore := newStore(primary, wait)
				aStore.WaitTimeout = testAckTimeout
				a := &writefence.Fence{Store: aStore}
				require.NoError(t, push(a, "a", 1))
				if wait {
					assert.Equal(t, valkeyRaw(t, primary, key), valkeyRaw(t, replica, key), "acknowledged by the replica")
				} else {
					waitUntil(t, "the replica has epoch 1", func() bool {
						return valkeyRaw(t, replica, key) == valkeyRaw(t, primary, key)
					})
				}

				relay.hold()
				// No acknowledgement can come now: a short WAIT suffices.
				// The same fence keeps its cached version, so its push
				// writes without reading first. (No call is in flight.)
				aStore.WaitTimeout = testWaitTimeout
				errA := push(a, "a", 2)
				// The same push retried from another connection, as another
				// process of writer a would: it finds its own record on the
				// primary.
				retry := &writefence.Fence{Store: newStore(testserver.ValkeyClient(t, primaryAddr, ""), wait)}
				errRetry := push(retry, "a", 2)

				relay.sever()
				waitUntil(t, "the replica's link is down", func() bool {
					return infoField(t, replica, "replication", "master_link_status") == "down"
				})
				require.NoError(t, replica.Do(ctx, "replicaof", "no", "one").Err())
				waitUntil(t, "the replica is promoted", func() bool {
					return infoField(t, replica, "replication", "role") == "master"
				})
				// The promoted server has no replica to wait for.
				b := &writefence.Fence{Store: newStore(replica, false)}
				require.NoError(t, push(b, "b", 2))

				epoch, writer, _, err := b.Latest(ctx, "wal", "0")
				require.NoError(t, err)
				pushes.requireOutcome(epoch, writer, wait, errA, errRetry, "the primary")
			})
		})
	}
}

// TestValkeyWaitRoundTrips: WaitReplicas costs one round trip, the WAIT,
// on every call that reports a write or a read; none on a refusal.
func TestValkeyWaitRoundTrips(t *testing.T) {
	primaryAddr, primary := startPrimary(t)
	startReplica(t, primary, primaryAddr)
	eachValkeyPath(t, func(t *testing.T, script bool) {
		c := testserver.ValkeyClient(t, primaryAddr, "")
		tap := &valkeyTap{}
		c.AddHook(tap)
		store := newValkeyStore(c, script)
		store.WaitReplicas, store.WaitTimeout = 1, testAckTimeout
		steps := valkeyTripSteps(t, store, testserver.UniqueName(t)+"/", 1)
		tap.take()
		checkValkeyTrips(t, tap, steps)
	})
}

// TestValkeyScriptValueHasNoTTL: whatever the path of the write and of
// the one before it, and whatever expiry the key held, a value the Script
// path writes has none: a value sent in the script's call replaces a
// staged one, an inline one and one a foreign EXPIRE gave a TTL to, and
// the other way round.
func TestValkeyScriptValueHasNoTTL(t *testing.T) {
	ctx := context.Background()
	c := newValkeyClient(t)
	prefix := valkeyPrefix(t, c)
	store := newValkeyStore(c, true)
	small, large := benchPayload(2<<10), benchPayload(4<<10)
	for _, tc := range []struct {
		name        string
		first, next []byte
		expire      bool
	}{
		{"inline over inline", small, small, false},
		{"inline over staged", large, small, false},
		{"staged over inline", small, large, false},
		{"inline over a key with a TTL", small, small, true},
		{"inline over a staged key with a TTL", large, small, true},
		{"staged over a key with a TTL", small, large, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := prefix + strings.ReplaceAll(tc.name, " ", "-")
			v, err := store.PutIfVersion(ctx, key, tc.first, "")
			require.NoError(t, err)
			if tc.expire {
				require.NoError(t, c.PExpire(ctx, key, time.Hour).Err())
			}
			next := append([]byte(nil), tc.next...)
			next[0]++
			nv, err := store.PutIfVersion(ctx, key, next, v)
			require.NoError(t, err)
			requireValkeyContent(t, store, key, string(next), nv)
			ttl, err := c.PTTL(ctx, key).Result()
			require.NoError(t, err)
			assert.Equal(t, time.Duration(-1), ttl, "the value written has no TTL")
		})
	}
}

// TestValkeyScriptInlineLostReply: the Script path sends a small value in
// one command of its own, on the client's pool; when the reply to it is
// lost after the server ran it, the client, whatever its MaxRetries, never
// sends it again, so a rival's write that lands in between cannot turn
// the write that landed into a reported conflict. A proxy in front of
// the server forwards the first EVALSHA and closes the connection before
// its reply; a rival writes on the proxied server before any later
// connection is let through.
func TestValkeyScriptInlineLostReply(t *testing.T) {
	ctx := context.Background()
	addr := testserver.StartValkey(t, "")
	direct := newValkeyClient(t, func(o *redis.Options) { o.Addr = addr })
	rival := newValkeyStore(direct, true)
	key := "lost-reply"
	v, err := rival.PutIfVersion(ctx, key, []byte("first"), "")
	require.NoError(t, err)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	var dropped atomic.Bool
	var evalshas atomic.Int32
	go func() {
		for {
			cn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer cn.Close()
				up, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer up.Close()
				go io.Copy(cn, &lossyReader{r: up, drop: &dropped})
				buf := make([]byte, 64<<10)
				for {
					n, err := cn.Read(buf)
					if n > 0 {
						if bytes.Contains(bytes.ToLower(buf[:n]), []byte("evalsha")) {
							evalshas.Add(1)
							if dropped.CompareAndSwap(false, true) {
								up.Write(buf[:n])
								// Let the script run, then lose its reply.
								time.Sleep(200 * time.Millisecond)
								direct.Set(ctx, key, valkeyRawValue(strings.Repeat("ab", 16), "rival"), 0)
								cn.Close()
								return
							}
						}
						if _, err := up.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()

	c := redis.NewClient(&redis.Options{Addr: ln.Addr().String(), MaxRetries: 3})
	t.Cleanup(func() { c.Close() })
	store := newValkeyStore(c, true)
	require.NoError(t, store.Delete(ctx, "warm-up"), "the standalone check")
	_, err = store.PutIfVersion(ctx, key, []byte("mine"), v)
	t.Logf("put: %v; EVALSHAs through the proxy: %d", err, evalshas.Load())
	assert.EqualValues(t, 1, evalshas.Load(), "the script was sent once")
	assert.NotErrorIs(t, err, writefence.ErrConflict, "a write that landed is not reported as a conflict")
}

// lossyReader passes r's bytes on until drop is set.
type lossyReader struct {
	r    io.Reader
	drop *atomic.Bool
}

func (l *lossyReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	if l.drop.Load() {
		return 0, io.EOF
	}
	return n, err
}

// Writes against a real server under interleavings the server allows but a
// quiet test never meets.

// valkeySplit is a go-redis hook that sends the next pipeline starting with
// WATCH in two parts, its first at commands and then the rest, and runs
// between, once the server answered the first part, a function that writes
// on another connection. The server runs the commands of one connection in
// order but interleaves other connections' commands between any two of
// them, whenever the bytes of a pipeline reach it in more than one read (a
// split TCP segment, a slow link): the hook makes that interleaving certain.
type valkeySplit struct {
	mu      sync.Mutex // guards the fields below
	at      int
	between func()
}

// arm makes the next WATCH pipeline run between after its first at
// commands.
func (s *valkeySplit) arm(at int, between func()) {
	s.mu.Lock()
	s.at, s.between = at, between
	s.mu.Unlock()
}

func (s *valkeySplit) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *valkeySplit) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (s *valkeySplit) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		s.mu.Lock()
		at, between := s.at, s.between
		split := between != nil && len(cmds) > at && cmds[0].Name() == "watch"
		if split {
			s.between = nil
		}
		s.mu.Unlock()
		if !split {
			return next(ctx, cmds)
		}
		if err := next(ctx, cmds[:at]); err != nil {
			return err
		}
		between()
		return next(ctx, cmds[at:])
	}
}

// newSplitValkeyClient returns a client of the shared server with a
// valkeySplit.
func newSplitValkeyClient(t *testing.T) (*redis.Client, *valkeySplit) {
	t.Helper()
	c := newValkeyClient(t)
	split := &valkeySplit{}
	c.AddHook(split)
	return c, split
}

// TestValkeyWatchTornReadIsNoDamage: the WATCH path reads the length, the
// head and the tail of the value in one pipeline after its WATCH, not in
// one atomic step, so a rival's write can land between two of those reads.
// The write's own EXEC would then abort: the call must report a conflict,
// as the Script path does, and never damage in an intact value (a
// *CorruptError is final, and its version would name intact bytes).
func TestValkeyWatchTornReadIsNoDamage(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name         string
		at           int // the commands of the WATCH pipeline sent before the rival's write
		first, rival int // the sizes of the data replaced and of the rival's
	}{
		{"the length before the rival's write, the head after", 2, 5, 40},
		{"the head before the rival's write, the tail after", 4, 8000, 8000},
	} {
		t.Run(strings.ReplaceAll(tc.name, "'", ""), func(t *testing.T) {
			c, split := newSplitValkeyClient(t)
			store := newValkeyStore(c, false)
			rival := newValkeyStore(newValkeyClient(t), false)
			key := valkeyPrefix(t, c) + "torn"

			v, err := store.PutIfVersion(ctx, key, benchPayload(tc.first), "")
			require.NoError(t, err)
			rivalData := benchPayload(tc.rival)
			rivalData[0]++
			rivalData[len(rivalData)-1]++
			var rivalVersion string
			var rivalErr error
			split.arm(tc.at, func() { rivalVersion, rivalErr = rival.PutIfVersion(ctx, key, rivalData, v) })

			_, err = store.PutIfVersion(ctx, key, []byte("mine"), v)
			require.NoError(t, rivalErr, "the rival's write lands between the reads")
			assert.NotErrorIs(t, err, writefence.ErrCorrupt, "the value is intact")
			require.ErrorIs(t, err, writefence.ErrConflict, "the rival's write landed first")
			requireValkeyContent(t, store, key, string(rivalData), rivalVersion)
		})
	}
}

// TestValkeyWatchTornReadSameEpoch: two Fences push one epoch, the second
// on the WATCH path, and the first lands between the second's reads of the
// record's length and head. Promise 2: the second is refused as stale;
// promise 18: its Deposed context ends with the *StaleEpochError.
func TestValkeyWatchTornReadSameEpoch(t *testing.T) {
	ctx := context.Background()
	c, split := newSplitValkeyClient(t)
	prefix := valkeyPrefix(t, c)
	a := &writefence.Fence{Store: newValkeyStore(newValkeyClient(t), false), Prefix: prefix}
	b := &writefence.Fence{Store: newValkeyStore(c, false), Prefix: prefix}

	require.NoError(t, a.Push(ctx, "p", "s", "a", 1, []byte("one")))
	_, _, _, err := b.Latest(ctx, "p", "s")
	require.NoError(t, err)
	deposed, stop := b.Deposed(ctx, "p", "s")
	defer stop()

	var aErr error
	split.arm(2, func() { aErr = a.Push(ctx, "p", "s", "a", 2, []byte("a payload longer than b's")) })
	err = b.Push(ctx, "p", "s", "b", 2, []byte("b's"))
	require.NoError(t, aErr, "a's push lands between b's reads")
	require.ErrorIs(t, err, writefence.ErrStaleEpoch, "promise 2: b is refused as stale")
	var stale *writefence.StaleEpochError
	require.ErrorAs(t, context.Cause(deposed), &stale, "promise 18: b is deposed")
	assert.False(t, errors.Is(err, writefence.ErrCorrupt), "the record is intact: %v", err)

	requireLatestIn(t, b, "p", "s", 2, "a", "a payload longer than b's")
}

// TestValkeyWatchTornBrandRead: the WATCH path reads whether the brand key
// exists and then its value, in the pipeline after its WATCH; a brand
// deleted between the two reads is absent, never a damaged brand (a
// *CorruptError is final). The write refuses as the Script path does (the
// brand is absent) or as a conflict (its EXEC would abort), and writes
// nothing.
func TestValkeyWatchTornBrandRead(t *testing.T) {
	ctx := context.Background()
	c, split := newSplitValkeyClient(t)
	other := newValkeyClient(t)
	store := newValkeyStore(c, false)
	prefix := valkeyPrefix(t, c)
	brand, key := keys.Brand(prefix), prefix+"data"
	_, err := store.PutIfVersion(ctx, brand, []byte(defaults.Identity), "")
	require.NoError(t, err)
	v, err := store.PutIfBranded(ctx, brand, defaults.Identity, key, [][]byte{[]byte("one")}, "")
	require.NoError(t, err)
	raw := valkeyRaw(t, c, key)

	var delErr error
	// WATCH, STRLEN, EXISTS, GETRANGE and GETRANGE of the key, EXISTS of
	// the brand key: then the brand key goes.
	split.arm(6, func() { delErr = other.Del(ctx, brand).Err() })
	_, err = store.PutIfBranded(ctx, brand, defaults.Identity, key, [][]byte{[]byte("two")}, v)
	require.NoError(t, delErr)
	assert.NotErrorIs(t, err, writefence.ErrCorrupt, "the brand was never damaged")
	assert.True(t, errors.Is(err, writefence.ErrWire) || errors.Is(err, writefence.ErrConflict),
		"the brand is absent, or changed under the write: %v", err)
	assert.Equal(t, raw, valkeyRaw(t, c, key), "nothing was written")
}

// TestValkeyMixedPathsOneWinner: writers on both paths race one version of
// one key, with values at the Script path's boundary (2 KiB of data, sent
// in the script's call, and one byte more, staged). Exactly one write
// lands, whichever path it took; the others are conflicts and write
// nothing; Get pairs the winner's bytes with the winner's version; no
// staged value is left behind.
func TestValkeyMixedPathsOneWinner(t *testing.T) {
	const writers, rounds = 8, 20
	ctx := context.Background()
	addr := testserver.StartValkey(t, "") // a server of its own: no other test stages values on it
	c := newValkeyClient(t, func(o *redis.Options) { o.Addr, o.PoolSize = addr, writers })
	stores := []*writefence.ValkeyStore{newValkeyStore(c, false), newValkeyStore(c, true)}
	key := "mixed"
	version, err := stores[0].PutIfVersion(ctx, key, []byte("start"), "")
	require.NoError(t, err)
	for round := range rounds {
		datas, versions := make([][]byte, writers), make([]string, writers)
		errs := together(writers, func(w int) error {
			datas[w] = benchPayload(2<<10 + w%2)
			datas[w][0], datas[w][1] = byte(round), byte(w)
			var err error
			versions[w], err = stores[w/2%2].PutIfVersion(ctx, key, datas[w], version)
			return err
		})
		winner := oneWinner(t, round, errs, writefence.ErrConflict)
		requireValkeyContent(t, stores[0], key, string(datas[winner]), versions[winner])
		version = versions[winner]
	}
	staged, err := c.Keys(ctx, keys.Staging+"*").Result()
	require.NoError(t, err)
	assert.Empty(t, staged, "no staged value is left behind")
}

// Lost replies of the Valkey store's writes, each at a chosen point,
// through the fault proxy (internal/faultproxy): a write reaches the server
// and runs whole, and its reply is dropped once the server has answered
// every command of it (a rival may write in between); or the write is held
// back, its client reset, and delivered late. On both write paths; for a
// value sent in the script's call (or the transaction) and one staged
// beside it; with go-redis's retries off and on; on a standalone server, a
// cluster, and a server whose replica the store waits for. Promise 5: the
// call that lost the reply, or the same call made again, returns nil if
// the write landed and a refusal only if another write did; an outcome it
// cannot learn is ErrOutcomeUnknown, never also ErrConflict or a refusal.

// lossyValkey is a Valkey store reached through fault proxies (one per
// node), and the same keys reached directly.
type lossyValkey struct {
	client redis.UniversalClient   // through the proxies
	store  *writefence.ValkeyStore // through the proxies
	direct *writefence.ValkeyStore // not through them
	raw    redis.UniversalClient   // a client of the same server, not through them
	prefix string
	// replica is a client of the server's replica, onReplicated; the
	// store then waits for it (WaitReplicas 1).
	replica *redis.Client
	script  bool

	mu      sync.Mutex // guards proxies
	proxies []*faultproxy.Proxy
	arm     func(p *faultproxy.Proxy) // what every proxy, also one made later, drops
}

// replyWhere is where a lossyValkey's server runs.
type replyWhere int

const (
	onStandalone replyWhere = iota
	onCluster
	onReplicated // a server of the test's own with a replica, WaitReplicas 1
	onOwn        // a server of the test's own
)

// openLossyValkey opens a store on the path script through proxies in
// front of the shared server (or every node of the shared cluster, the
// prefix a hash tag of the test's own), its client's MaxRetries
// maxRetries (-1 none).
func openLossyValkey(t *testing.T, where replyWhere, script bool, maxRetries int) *lossyValkey {
	t.Helper()
	l := &lossyValkey{script: script}
	// Each node's connections go through a proxy of that node's own.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		l.mu.Lock()
		var p *faultproxy.Proxy
		for _, q := range l.proxies {
			if q.Target() == addr {
				p = q
			}
		}
		if p == nil {
			p = faultproxy.New(t, addr, faultproxy.Rates{})
			if l.arm != nil {
				l.arm(p)
			}
			l.proxies = append(l.proxies, p)
		}
		l.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, p.Addr())
	}
	var c redis.UniversalClient
	switch where {
	case onStandalone:
		addr := testserver.ValkeyAddr(t)
		c = redis.NewClient(&redis.Options{Addr: addr, Dialer: dial, MaxRetries: maxRetries,
			MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
		l.raw = testserver.ValkeyClient(t, addr, "")
		l.prefix = testserver.ValkeyPrefix(t, addr)
	case onOwn:
		addr := testserver.StartValkey(t, "")
		c = redis.NewClient(&redis.Options{Addr: addr, Dialer: dial, MaxRetries: maxRetries,
			MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
		l.raw = testserver.ValkeyClient(t, addr, "")
		l.prefix = testserver.ValkeyPrefix(t, addr)
	case onReplicated:
		addr, primary := startPrimary(t)
		l.replica = startReplica(t, primary, addr)
		c = redis.NewClient(&redis.Options{Addr: addr, Dialer: dial, MaxRetries: maxRetries,
			MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
		l.raw = primary
		l.prefix = testserver.ValkeyPrefix(t, addr)
	case onCluster:
		addrs := testserver.ValkeyClusterAddrs(t)
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, Dialer: dial, MaxRetries: maxRetries,
			MinRetryBackoff: time.Millisecond, MaxRetryBackoff: time.Millisecond})
		l.raw = testserver.ValkeyClusterClient(t, addrs)
		l.prefix = testserver.ValkeyClusterPrefix(t, addrs, true)
	}
	t.Cleanup(func() { _ = c.Close() })
	l.client = c
	l.store = writefence.NewValkeyStore(c)
	l.store.Script = script
	l.direct = writefence.NewValkeyStore(l.raw)
	l.direct.Script = script
	if l.replica != nil {
		l.store.WaitReplicas, l.store.WaitTimeout = 1, testAckTimeout
		l.direct.WaitReplicas, l.direct.WaitTimeout = 1, testAckTimeout
	}
	return l
}

// lostWrite is the write of one key whose reply a lossyValkey drops, or
// which it holds back to deliver late.
type lostWrite struct {
	key    string
	writes atomic.Int32 // the write requests of key seen, dropped, held or not

	mu     sync.Mutex // guards staged and deliver
	staged []string   // the staging keys the writes of key named

	armed   atomic.Bool
	between func() // run once the server answered the dropped write
	ran     chan struct{}
	deliver func() error // sends the write held back; nil until one is
}

// dropWrite drops the reply of the next write of key, of whatever value,
// once the server has answered every command of it, running between first
// (when not nil); and counts the writes of key. What the reply of another
// write of key, or of a read, is, is left alone.
func (l *lossyValkey) dropWrite(key string, between func()) *lostWrite {
	return l.lose(key, l.writeOf(key), between, false)
}

// holdWrite holds the next write of key back from the server and resets
// its connection at once; w.deliverLate sends it.
func (l *lossyValkey) holdWrite(key string) *lostWrite {
	return l.lose(key, l.writeOf(key), nil, true)
}

// dropWait drops the reply of the WAIT that follows the next write of
// key, once the server has answered it; the writes of key are counted.
func (l *lossyValkey) dropWait(key string) *lostWrite {
	isWrite := l.writeOf(key)
	var wrote atomic.Bool
	return l.lose(key, func(req []byte) int {
		if isWrite(req) > 0 {
			wrote.Store(true)
		}
		if wrote.Load() && bytes.HasPrefix(req, []byte("*3\r\n$4\r\nwait\r\n")) {
			return 1
		}
		return 0
	}, nil, false)
}

// lose drops (or, with hold, holds back) the first request isWrite picks,
// a request of as many commands as it says.
func (l *lossyValkey) lose(key string, isWrite func(req []byte) int, between func(), hold bool) *lostWrite {
	w := &lostWrite{key: key, between: between, ran: make(chan struct{})}
	w.armed.Store(true)
	var commands atomic.Int32 // of the request picked: its reply holds as many values
	d := faultproxy.Drop{
		Whole: wholeRequest,
		Match: func(req []byte) bool {
			n := isWrite(req)
			if n == 0 {
				return false
			}
			w.writes.Add(1)
			w.mu.Lock()
			if staged := stagedKeyIn.Find(req); staged != nil {
				w.staged = append(w.staged, string(staged))
			}
			w.mu.Unlock()
			if !w.armed.CompareAndSwap(true, false) {
				return false
			}
			commands.Store(int32(n))
			return true
		},
		End: func(reply []byte) bool { return respValues(reply) >= int(commands.Load()) },
	}
	if hold {
		d.Hold = func(deliver func() error) {
			w.mu.Lock()
			w.deliver = deliver
			w.mu.Unlock()
			close(w.ran)
		}
	} else {
		d.Then = func() {
			defer close(w.ran)
			if w.between != nil {
				w.between()
			}
		}
	}
	l.mu.Lock()
	l.arm = func(p *faultproxy.Proxy) { p.DropReplies(d) }
	for _, p := range l.proxies {
		l.arm(p)
	}
	l.mu.Unlock()
	return w
}

// dropped fails the test unless the write's reply was dropped, or the
// write held back.
func (w *lostWrite) dropped(t *testing.T) {
	t.Helper()
	select {
	case <-w.ran:
	default:
		t.Fatalf("no write of %s had its reply dropped (%d writes of it seen)", w.key, w.writes.Load())
	}
}

// deliverLate sends the write held back, and returns once the server
// answered it.
func (w *lostWrite) deliverLate() error {
	w.mu.Lock()
	deliver := w.deliver
	w.mu.Unlock()
	if deliver == nil {
		return fmt.Errorf("no write of %s was held back", w.key)
	}
	return deliver()
}

// requireLateWriteWroteNothing delivers w's write, held back, and requires
// that it changed nothing at key.
func requireLateWriteWroteNothing(t *testing.T, l *lossyValkey, key string, w *lostWrite) {
	t.Helper()
	ctx := context.Background()
	_, before, err := l.direct.Get(ctx, key)
	require.NoError(t, err)
	require.NoError(t, w.deliverLate())
	_, now, err := l.direct.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, before, now, "the held write, delivered late, wrote nothing")
}

// stagedKeys returns the staging keys the writes of key named.
func (w *lostWrite) stagedKeys() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.staged)
}

// wholeRequest reports whether req, the start of a request, holds all of
// it that a write's match needs, and that a write held back must carry:
// whole commands, and of a transaction its EXEC, and after a staging SET
// the script that names its key.
func wholeRequest(req []byte) bool {
	n, rest := respValues(req), req
	for range n {
		rest = rest[respValue(rest):]
	}
	switch {
	case n == 0 || len(rest) > 0:
		return false
	case bytes.HasPrefix(req, []byte("*1\r\n$5\r\nmulti\r\n")):
		return bytes.HasSuffix(req, []byte("*1\r\n$4\r\nexec\r\n"))
	case stagingSet(req):
		return n >= 2
	}
	return true
}

// stagedKeyIn finds the staging key a write of the Script path names.
var stagedKeyIn = regexp.MustCompile(regexp.QuoteMeta(keys.Staging) + `\{[^}]*\}[0-9a-f]{32}`)

// writeOf returns a function that tells, from a request (whole, if it
// starts with a staging SET), whether it is a write of key, and of how
// many commands: on the Script path the script (its EVALSHA, or the EVAL
// after a NOSCRIPT), after a staging SET or alone; on the WATCH path
// MULTI, SET and EXEC. go-redis sends command names as the caller spells
// them, lower case.
func (l *lossyValkey) writeOf(key string) func(req []byte) int {
	arg := []byte(fmt.Sprintf("\r\n$%d\r\n%s\r\n", len(key), key))
	script := func(req []byte) bool {
		return (bytes.Contains(req, []byte("\r\nevalsha\r\n")) || bytes.Contains(req, []byte("\r\neval\r\n"))) && bytes.Contains(req, arg)
	}
	return func(req []byte) int {
		switch {
		case !l.script && bytes.Contains(req, []byte("\r\nmulti\r\n")) && bytes.Contains(req, append([]byte("\r\nset"), arg...)):
			return 3
		case l.script && stagingSet(req) && script(req):
			return 2
		case l.script && script(req):
			return 1
		}
		return 0
	}
}

// stagingSet reports whether req starts with the SET of a staged value.
func stagingSet(req []byte) bool {
	return bytes.HasPrefix(req, []byte("*5\r\n$3\r\nset\r\n")) && bytes.Contains(req[:min(len(req), 64)], []byte(keys.Staging))
}

// respValues counts the whole RESP values b begins with.
func respValues(b []byte) int {
	n := 0
	for {
		m := respValue(b)
		if m < 0 {
			return n
		}
		b, n = b[m:], n+1
	}
}

// respValue returns the length of the RESP value b begins with, or -1
// when b does not hold all of it.
func respValue(b []byte) int {
	line := bytes.Index(b, []byte("\r\n"))
	if line < 1 {
		return -1
	}
	switch b[0] {
	case '$', '!', '=': // a string: its length, then its bytes
		n, err := strconv.Atoi(string(b[1:line]))
		switch {
		case err != nil:
			return -1
		case n < 0:
			return line + 2
		case len(b) < line+2+n+2:
			return -1
		}
		return line + 2 + n + 2
	case '*', '~', '>', '%', '|': // an aggregate: its count, then its values
		n, err := strconv.Atoi(string(b[1:line]))
		if err != nil {
			return -1
		}
		if b[0] == '%' || b[0] == '|' {
			n *= 2
		}
		at := line + 2
		for range max(n, 0) {
			m := respValue(b[at:])
			if m < 0 {
				return -1
			}
			at += m
		}
		return at
	}
	return line + 2 // a line of its own: a status, an error, a number
}

// requireUnknownOnly asserts err matches ErrOutcomeUnknown and neither
// ErrConflict nor any refusal (promise 5).
func requireUnknownOnly(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	require.ErrorIs(t, err, writefence.ErrOutcomeUnknown, msgAndArgs...)
	for _, not := range []error{writefence.ErrConflict, writefence.ErrStaleEpoch, writefence.ErrEpochRegressed,
		writefence.ErrCorrupt, writefence.ErrWire, writefence.ErrInvalidArgument, writefence.ErrTooLarge,
		writefence.ErrNotFound, fs.ErrPermission, errors.ErrUnsupported} {
		require.NotErrorIs(t, err, not, msgAndArgs...)
	}
}

// requireNoStagedKey asserts the staging keys the writes of w's key
// named, if any, are gone: each moved onto the key or deleted by its
// script.
func requireNoStagedKey(t *testing.T, l *lossyValkey, w *lostWrite) {
	t.Helper()
	for _, staged := range w.stagedKeys() {
		n, err := l.raw.Exists(context.Background(), staged).Result()
		require.NoError(t, err)
		assert.Zero(t, n, "the staged value %s is left behind", staged)
	}
}

// replyCases are the write paths, where the server runs, the values'
// sizes and the client's retries the lost-reply tests run on.
type replyCase struct {
	where      replyWhere
	script     bool
	size       int // of a payload: 100 bytes travel in the script's call, 64 KiB are staged
	maxRetries int
}

func (c replyCase) String() string {
	return fmt.Sprintf("%s/%s/%s/retries=%d", map[replyWhere]string{onStandalone: "standalone", onCluster: "cluster"}[c.where],
		map[bool]string{false: "watch", true: "script"}[c.script], map[bool]string{false: "small", true: "large"}[c.size > 4<<10], c.maxRetries)
}

func replyCases() []replyCase {
	var cases []replyCase
	for _, where := range []replyWhere{onStandalone, onCluster} {
		for _, script := range []bool{false, true} {
			for _, size := range []int{100, 64 << 10} {
				for _, retries := range []int{-1, 3} {
					cases = append(cases, replyCase{where, script, size, retries})
				}
			}
		}
	}
	return cases
}

// forEachReplyCase runs test, in parallel, on each reply case that keep
// admits (every case when keep is nil), over a lossyValkey of its own.
func forEachReplyCase(t *testing.T, keep func(replyCase) bool, test func(t *testing.T, tc replyCase, l *lossyValkey)) {
	t.Helper()
	for _, tc := range replyCases() {
		if keep != nil && !keep(tc) {
			continue
		}
		t.Run(tc.String(), func(t *testing.T) {
			t.Parallel()
			test(t, tc, openLossyValkey(t, tc.where, tc.script, tc.maxRetries))
		})
	}
}

// replyPayload is a payload of n bytes, distinct by tag.
func replyPayload(tag string, n int) []byte {
	p := benchPayload(n)
	copy(p, tag)
	return p
}

// TestValkeyLostReplyOfAPush: a push's write lands and its reply is lost.
//
//   - Retried within the call (MaxAttempts left), the push reads its own
//     record and returns nil, without writing again.
//   - With one attempt, the push returns ErrOutcomeUnknown only; the same
//     push made again returns nil, without writing again.
//   - When a rival lands a higher epoch before the retry, the push returns
//     ErrOutcomeUnknown only and deposes nobody (promise 18); the same
//     push made again is refused as stale, naming the rival's epoch.
//   - Under BrandVerifyAlways (the brand read in the write's atomic step),
//     as the first.
//
// Every time the store holds what the calls said, and a staged value is
// moved onto the key. go-redis's retries, when on, send no write twice.
func TestValkeyLostReplyOfAPush(t *testing.T) {
	t.Parallel()
	forEachReplyCase(t, nil, func(t *testing.T, tc replyCase, l *lossyValkey) {
		ctx := context.Background()
		const plugin = "wal"
		mine, rival := replyPayload("mine", tc.size), replyPayload("rival", tc.size)
		fence := func(attempts int, brand writefence.BrandMode) *writefence.Fence {
			return &writefence.Fence{Store: l.store, Prefix: l.prefix, MaxAttempts: attempts, RetryDelay: time.Millisecond, Brand: brand}
		}
		direct := &writefence.Fence{Store: l.direct, Prefix: l.prefix}
		for _, sc := range []struct {
			name     string
			attempts int
			brand    writefence.BrandMode
			rival    bool // a rival lands epoch 3 before the retry
		}{
			{"retried within the call", 0, 0, false},
			{"one attempt then the same call again", 1, 0, false},
			{"overwritten before the retry", 0, 0, true},
			{"retried within the call under BrandVerifyAlways", 0, writefence.BrandVerifyAlways, false},
		} {
			t.Run(sc.name, func(t *testing.T) {
				shard := strings.ReplaceAll(sc.name, " ", "-")
				key, err := keys.Shard(l.prefix, plugin, shard)
				require.NoError(t, err)
				f := fence(sc.attempts, sc.brand)
				if sc.brand != 0 {
					_, err := (&writefence.Fence{Store: l.direct, Prefix: l.prefix}).ClaimBrand(ctx)
					require.NoError(t, err)
				}
				// Epoch 1 lands unharmed: it loads the script, and the
				// Fence remembers the version its next push expects.
				require.NoError(t, f.Push(ctx, plugin, shard, "w", 1, []byte("one")))
				deposed, stop := f.Deposed(ctx, plugin, shard)
				defer stop()

				// What the write left, read before its reply was lost, and
				// the rival's push; checked once w.ran is closed.
				var (
					seenEpoch         uint64
					seenWriter        string
					seenPayload       []byte
					seenErr, rivalErr error
				)
				w := l.dropWrite(key, func() {
					seenEpoch, seenWriter, seenPayload, seenErr = direct.Latest(ctx, plugin, shard)
					if sc.rival {
						rivalErr = direct.Push(ctx, plugin, shard, "rival", 3, rival)
					}
				})
				err = f.Push(ctx, plugin, shard, "w", 2, mine)
				w.dropped(t)
				require.NoError(t, seenErr)
				require.Equal(t, uint64(2), seenEpoch, "the write landed, whole, before its reply was lost")
				require.Equal(t, "w", seenWriter)
				require.Equal(t, mine, seenPayload)
				require.NoError(t, rivalErr, "the rival's push")
				switch {
				case sc.rival:
					requireUnknownOnly(t, err, "the push landed, then a rival's: %v", err)
					assert.NoError(t, deposed.Err(), "an unknown outcome deposes nobody")
					requireLatestIn(t, direct, plugin, shard, 3, "rival", string(rival))
					err = f.Push(ctx, plugin, shard, "w", 2, mine)
					var se *writefence.StaleEpochError
					require.ErrorAs(t, err, &se, "called again, the push meets the rival's write")
					assert.Equal(t, uint64(3), se.RecordedEpoch)
					assert.Equal(t, "rival", se.RecordedWriter)
					requireLatestIn(t, direct, plugin, shard, 3, "rival", string(rival))
				case sc.attempts == 1:
					requireUnknownOnly(t, err, "one attempt, its reply lost: %v", err)
					requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
					require.NoError(t, f.Push(ctx, plugin, shard, "w", 2, mine), "called again, the push finds it landed")
					requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
				default:
					require.NoError(t, err, "the retry finds the push landed")
					requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
				}
				assert.EqualValues(t, 1, w.writes.Load(), "the write was sent once, by the client and by the Fence")
				requireNoStagedKey(t, l, w)
				if !sc.rival {
					ttl, err := l.raw.PTTL(ctx, key).Result()
					require.NoError(t, err)
					assert.Equal(t, time.Duration(-1), ttl, "the record has no TTL")
				}
			})
		}
		// Promise 28: under the prefix, the pushes wrote their shards'
		// records and the brand, and nothing else.
		require.NoError(t, l.direct.List(ctx, l.prefix, func(key string) error {
			if _, _, ok := keys.ParseShard(l.prefix, key); !ok {
				assert.Equal(t, keys.Brand(l.prefix), key, "a key that is no record")
			}
			return nil
		}))
	})
}

// TestValkeyLostReplyOfAPut: PutIfVersion, create-only and conditioned on
// a version, whose write lands and whose reply is lost returns a failure
// that is neither a conflict nor a refusal, and the key holds the new data
// under a new version; the same call made again is a conflict (the store
// cannot tell its own write from another), and writes nothing.
func TestValkeyLostReplyOfAPut(t *testing.T) {
	t.Parallel()
	forEachReplyCase(t, nil, func(t *testing.T, tc replyCase, l *lossyValkey) {
		ctx := context.Background()
		for _, create := range []bool{true, false} {
			t.Run(map[bool]string{true: "create", false: "update"}[create], func(t *testing.T) {
				key := l.prefix + "put-" + strconv.FormatBool(create)
				// Through the proxies, in the key's slot: the server
				// then holds the script.
				expect, err := l.store.PutIfVersion(ctx, key, []byte("first"), "")
				require.NoError(t, err)
				if create {
					require.NoError(t, l.store.Delete(ctx, key))
					expect = ""
				}
				data := replyPayload("second", tc.size)
				w := l.dropWrite(key, nil)
				_, err = l.store.PutIfVersion(ctx, key, data, expect)
				w.dropped(t)
				require.Error(t, err)
				var se *writefence.StoreError
				require.ErrorAs(t, err, &se)
				for _, not := range []error{writefence.ErrConflict, writefence.ErrNotFound, writefence.ErrCorrupt,
					writefence.ErrTooLarge, fs.ErrPermission, errors.ErrUnsupported} {
					require.NotErrorIs(t, err, not)
				}
				got, version, err := l.direct.Get(ctx, key)
				require.NoError(t, err)
				require.Equal(t, data, got, "the write landed")
				require.NotEqual(t, expect, version)
				requireNoStagedKey(t, l, w)

				_, err = l.store.PutIfVersion(ctx, key, data, expect)
				require.ErrorIs(t, err, writefence.ErrConflict, "called again")
				requireValkeyContent(t, l.direct, key, string(data), version)
			})
		}
	})
}

// TestValkeyLostReplyOfACommitAndASettle: a commit's write, a settle's
// write of its log and its write of the record land and their replies are
// lost. Retried within the call, each reads what it wrote and returns nil.
// With one attempt, each returns ErrOutcomeUnknown only, and made again,
// returns nil; but a settle whose log landed and whose record was never
// written is refused as stale, writing nothing, as Settle says (promise 5).
// The store holds what the calls said, written once.
func TestValkeyLostReplyOfACommitAndASettle(t *testing.T) {
	t.Parallel()
	forEachReplyCase(t, func(tc replyCase) bool { return tc.maxRetries == -1 }, func(t *testing.T, tc replyCase, l *lossyValkey) {
		ctx := context.Background()
		const plugin = "wal"
		blobs := &writefence.MemStore{}
		direct := &writefence.Fence{Store: l.direct, Blobs: blobs, Prefix: l.prefix}
		payload := replyPayload("manifest", tc.size)
		for _, attempts := range []int{0, 1} {
			f := &writefence.Fence{Store: l.store, Blobs: blobs, Prefix: l.prefix, MaxAttempts: attempts, RetryDelay: time.Millisecond}
			// again checks what a call whose reply was lost returned,
			// err, and makes it again when it had one attempt.
			again := func(t *testing.T, err error, call func() error) {
				t.Helper()
				if attempts == 1 {
					requireUnknownOnly(t, err, "one attempt, its reply lost: %v", err)
					require.NoError(t, call(), "called again, it finds its write landed")
					return
				}
				require.NoError(t, err, "the retry finds the write landed")
			}

			t.Run(fmt.Sprintf("commit/attempts=%d", attempts), func(t *testing.T) {
				shard := fmt.Sprintf("commit-%d", attempts)
				key, err := keys.Shard(l.prefix, plugin, shard)
				require.NoError(t, err)
				add := func(ref writefence.BlobRef) func(writefence.Manifest) (writefence.Manifest, error) {
					return func(m writefence.Manifest) (writefence.Manifest, error) {
						if slices.Contains(m.Blobs, ref) {
							return writefence.Manifest{Payload: payload, Blobs: m.Blobs}, nil
						}
						return writefence.Manifest{Payload: payload, Blobs: append(m.Blobs, ref)}, nil
					}
				}
				one, err := f.PutBlob(ctx, plugin, shard, "w", 1, strings.NewReader("one"))
				require.NoError(t, err)
				require.NoError(t, f.Commit(ctx, plugin, shard, "w", 1, add(one)))
				two, err := f.PutBlob(ctx, plugin, shard, "w", 2, strings.NewReader("two"))
				require.NoError(t, err)

				w := l.dropWrite(key, nil)
				commit := func() error { return f.Commit(ctx, plugin, shard, "w", 2, add(two)) }
				again(t, commit(), commit)
				w.dropped(t)
				info, err := direct.Inspect(ctx, plugin, shard)
				require.NoError(t, err)
				assert.Equal(t, uint64(2), info.Epoch)
				assert.Equal(t, []writefence.BlobRef{one, two}, info.Blobs)
				assert.Equal(t, payload, info.Payload)
				assert.EqualValues(t, 1, w.writes.Load(), "written once")
				requireNoStagedKey(t, l, w)
			})

			for _, lost := range []string{"log", "record"} {
				t.Run(fmt.Sprintf("settle, the reply of its %s lost/attempts=%d", lost, attempts), func(t *testing.T) {
					shard := fmt.Sprintf("settle-%s-%d", lost, attempts)
					key, err := keys.Shard(l.prefix, plugin, shard)
					require.NoError(t, err)
					logKey, err := keys.SettleLog(l.prefix, plugin, shard)
					require.NoError(t, err)
					require.NoError(t, f.Push(ctx, plugin, shard, "w", 1, []byte("one")))
					require.NoError(t, testserver.DamageValkey(l.raw)(ctx, key, testserver.Fault{Flip: 0}))
					_, err = direct.Inspect(ctx, plugin, shard)
					var ce *writefence.CorruptError
					require.ErrorAs(t, err, &ce)
					damaged, err := l.raw.Get(ctx, key).Result()
					require.NoError(t, err)

					w := l.dropWrite(map[string]string{"log": logKey, "record": key}[lost], nil)
					settle := func() error {
						return f.Settle(ctx, plugin, shard, writefence.Settlement{Version: ce.Version, Writer: "op", Epoch: 5, Payload: payload, Floor: 1})
					}
					err = settle()
					w.dropped(t)
					if attempts == 1 && lost == "log" {
						requireUnknownOnly(t, err, "one attempt, its log's reply lost: %v", err)
						var se *writefence.StaleEpochError
						require.ErrorAs(t, settle(), &se, "called again, it finds itself logged and the record still damaged")
						now, err := l.raw.Get(ctx, key).Result()
						require.NoError(t, err)
						assert.Equal(t, damaged, now, "the record is left as it was")
					} else {
						again(t, err, settle)
						requireLatestIn(t, direct, plugin, shard, 5, "op", string(payload))
					}
					assert.EqualValues(t, 1, w.writes.Load(), "written once")
					requireNoStagedKey(t, l, w)
				})
			}
		}
	})
}

// beforeWrite is a go-redis hook that runs fn once, right before the
// client sends a write of key (the Script path's script, or the
// transaction that SETs key) after skip others.
type beforeWrite struct {
	key  string
	mu   sync.Mutex // guards skip and fn
	skip int
	fn   func()
}

func (b *beforeWrite) run(cmds []redis.Cmder) {
	for _, cmd := range cmds {
		args := cmd.Args()
		name := strings.ToLower(cmd.Name())
		script := (name == "evalsha" || name == "eval") && slices.Contains(args, any(b.key))
		set := name == "set" && len(args) > 1 && args[1] == any(b.key)
		if !script && !set {
			continue
		}
		b.mu.Lock()
		var fn func()
		if b.skip--; b.skip < 0 {
			fn, b.fn = b.fn, nil
		}
		b.mu.Unlock()
		if fn != nil {
			fn()
		}
		return
	}
}

func (b *beforeWrite) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b *beforeWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		b.run([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (b *beforeWrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		b.run(cmds)
		return next(ctx, cmds)
	}
}

// TestValkeyLateWrite: a push's write is held back on its way to the
// server and its connection reset, so the client cannot tell whether it
// arrived; the write reaches the server later, as a network that delayed
// it past the client's giving up would deliver it.
//
//   - Delivered right before the push's retry writes, it lands, and the
//     retry meets the version it made (a conflict): the push reads again
//     and returns nil; with only two attempts, ErrOutcomeUnknown only, and
//     the same push made again returns nil.
//   - Delivered once the retry has landed, or once a rival has, it
//     writes nothing: the store keeps what the retry or the rival wrote
//     (promise 4), and no staged value is left.
func TestValkeyLateWrite(t *testing.T) {
	t.Parallel()
	forEachReplyCase(t, func(tc replyCase) bool { return tc.where == onStandalone }, func(t *testing.T, tc replyCase, l *lossyValkey) {
		ctx := context.Background()
		const plugin = "wal"
		mine, rival := replyPayload("mine", tc.size), replyPayload("rival", tc.size)
		direct := &writefence.Fence{Store: l.direct, Prefix: l.prefix}
		for _, sc := range []struct {
			name     string
			attempts int
			when     string // when the held write arrives: "retry" (before the retry's write), "after", "rival"
		}{
			{"delivered before the retry writes", 0, "retry"},
			{"delivered before the retry writes, two attempts", 2, "retry"},
			{"delivered after the retry landed", 0, "after"},
			{"delivered after a rival landed", 1, "rival"},
		} {
			t.Run(sc.name, func(t *testing.T) {
				shard := strings.ReplaceAll(sc.name, " ", "-")
				shard = strings.ReplaceAll(shard, ",", "")
				key, err := keys.Shard(l.prefix, plugin, shard)
				require.NoError(t, err)
				f := &writefence.Fence{Store: l.store, Prefix: l.prefix, MaxAttempts: sc.attempts, RetryDelay: time.Millisecond}
				require.NoError(t, f.Push(ctx, plugin, shard, "w", 1, []byte("one")))

				w := l.holdWrite(key)
				var lateErr error
				late := make(chan struct{})
				if sc.when == "retry" {
					// After the write held back: before the retry's.
					hook := &beforeWrite{key: key, skip: 1, fn: func() {
						defer close(late)
						lateErr = w.deliverLate()
					}}
					l.client.(*redis.Client).AddHook(hook)
				}
				err = f.Push(ctx, plugin, shard, "w", 2, mine)
				w.dropped(t)

				switch sc.when {
				case "retry":
					select {
					case <-late:
					default:
						t.Fatal("the push never wrote again")
					}
					require.NoError(t, lateErr, "the held write, delivered")
					if sc.attempts == 2 {
						requireUnknownOnly(t, err, "its retry met its own write: %v", err)
						requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
						require.NoError(t, f.Push(ctx, plugin, shard, "w", 2, mine), "called again, the push finds it landed")
					} else {
						require.NoError(t, err, "the retry met the held write's version, and read it")
					}
					requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
					assert.EqualValues(t, 2, w.writes.Load(), "the held write and the retry's")
				case "after":
					require.NoError(t, err, "the retry landed")
					requireLateWriteWroteNothing(t, l, key, w)
					requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
				case "rival":
					requireUnknownOnly(t, err, "one attempt, its write held: %v", err)
					require.NoError(t, direct.Push(ctx, plugin, shard, "rival", 3, rival))
					requireLateWriteWroteNothing(t, l, key, w)
					err = f.Push(ctx, plugin, shard, "w", 2, mine)
					var se *writefence.StaleEpochError
					require.ErrorAs(t, err, &se, "called again, the push meets the rival's write")
					assert.Equal(t, uint64(3), se.RecordedEpoch)
					requireLatestIn(t, direct, plugin, shard, 3, "rival", string(rival))
				}
				requireNoStagedKey(t, l, w)
			})
		}
	})
}

// TestValkeyLostReplyWaitingForReplicas: with WaitReplicas, a push's write
// lands and its reply is lost, or the reply of the WAIT that follows it;
// the push, retried within the call, reads its own record, waits for the
// replica to confirm it, and returns nil, and the replica holds it
// (promise 4, as far as the replica is promoted).
func TestValkeyLostReplyWaitingForReplicas(t *testing.T) {
	t.Parallel()
	for _, script := range []bool{false, true} {
		t.Run(map[bool]string{false: "watch", true: "script"}[script], func(t *testing.T) {
			t.Parallel()
			l := openLossyValkey(t, onReplicated, script, -1)
			ctx := context.Background()
			const plugin = "wal"
			f := &writefence.Fence{Store: l.store, Prefix: l.prefix, RetryDelay: time.Millisecond}
			direct := &writefence.Fence{Store: l.direct, Prefix: l.prefix}
			for _, size := range []int{100, 64 << 10} {
				for _, lost := range []string{"write", "wait"} {
					t.Run(fmt.Sprintf("size=%d/%s", size, lost), func(t *testing.T) {
						shard := fmt.Sprintf("%s-%d", lost, size)
						key, err := keys.Shard(l.prefix, plugin, shard)
						require.NoError(t, err)
						require.NoError(t, f.Push(ctx, plugin, shard, "w", 1, []byte("one")))
						mine := replyPayload("mine", size)
						var w *lostWrite
						if lost == "write" {
							w = l.dropWrite(key, nil)
						} else {
							w = l.dropWait(key)
						}
						require.NoError(t, f.Push(ctx, plugin, shard, "w", 2, mine), "the retry finds the push landed, and the replica holding it")
						w.dropped(t)
						requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
						primary, err := l.raw.Get(ctx, key).Result()
						require.NoError(t, err)
						replica, err := l.replica.Get(ctx, key).Result()
						require.NoError(t, err)
						assert.Equal(t, primary, replica, "the replica holds what the primary holds")
						requireNoStagedKey(t, l, w)
					})
				}
			}
		})
	}
}

// TestValkeyLostReplyOfTheEvalAfterNoscript: on a server that does not
// hold the script (NOSCRIPT), the Script path sends it in an EVAL, the
// staged value still in place; the EVAL lands and its reply is lost. The
// push, retried within the call, reads its own record and returns nil;
// go-redis, when it retries, does not send the EVAL again.
func TestValkeyLostReplyOfTheEvalAfterNoscript(t *testing.T) {
	t.Parallel()
	for _, retries := range []int{-1, 3} {
		t.Run(fmt.Sprintf("retries=%d", retries), func(t *testing.T) {
			t.Parallel()
			l := openLossyValkey(t, onOwn, true, retries)
			ctx := context.Background()
			const plugin = "wal"
			f := &writefence.Fence{Store: l.store, Prefix: l.prefix, RetryDelay: time.Millisecond}
			direct := &writefence.Fence{Store: l.direct, Prefix: l.prefix}
			for _, size := range []int{100, 64 << 10} {
				t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
					shard := fmt.Sprintf("noscript-%d", size)
					key, err := keys.Shard(l.prefix, plugin, shard)
					require.NoError(t, err)
					require.NoError(t, f.Push(ctx, plugin, shard, "w", 1, []byte("one")))
					require.NoError(t, l.raw.ScriptFlush(ctx).Err())
					mine := replyPayload("mine", size)
					isWrite := l.writeOf(key)
					var evalshas atomic.Int32
					w := l.lose(key, func(req []byte) int {
						switch {
						case isWrite(req) == 0:
							return 0
						case bytes.Contains(req, []byte("\r\nevalsha\r\n")):
							evalshas.Add(1)
							return 0
						}
						return 1 // the EVAL
					}, nil, false)
					require.NoError(t, f.Push(ctx, plugin, shard, "w", 2, mine), "the retry finds the push landed")
					w.dropped(t)
					requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
					assert.EqualValues(t, 1, evalshas.Load(), "one EVALSHA, answered NOSCRIPT")
					assert.EqualValues(t, 1, w.writes.Load(), "one EVAL, landed")
					requireNoStagedKey(t, l, w)
				})
			}
		})
	}
}
