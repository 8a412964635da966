//go:build !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// Lost replies of the Valkey store's writes, each at a chosen point,
// through the fault proxy (faultproxy_test.go): a write reaches the server
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
	proxies []*faultProxy
	arm     func(p *faultProxy) // what every proxy, also one made later, drops
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
		var p *faultProxy
		for _, q := range l.proxies {
			if q.target == addr {
				p = q
			}
		}
		if p == nil {
			p = newFaultProxy(t, addr, faultRates{})
			if l.arm != nil {
				l.arm(p)
			}
			l.proxies = append(l.proxies, p)
		}
		l.mu.Unlock()
		var d net.Dialer
		return d.DialContext(ctx, network, p.addr())
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
	d := replyDrop{
		whole: wholeRequest,
		match: func(req []byte) bool {
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
		end: func(reply []byte) bool { return respValues(reply) >= int(commands.Load()) },
	}
	if hold {
		d.hold = func(deliver func() error) {
			w.mu.Lock()
			w.deliver = deliver
			w.mu.Unlock()
			close(w.ran)
		}
	} else {
		d.then = func() {
			defer close(w.ran)
			if w.between != nil {
				w.between()
			}
		}
	}
	l.mu.Lock()
	l.arm = func(p *faultProxy) { p.dropReplies(d) }
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
	for _, tc := range replyCases() {
		t.Run(tc.String(), func(t *testing.T) {
			t.Parallel()
			l := openLossyValkey(t, tc.where, tc.script, tc.maxRetries)
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
}

// TestValkeyLostReplyOfAPut: PutIfVersion, create-only and conditioned on
// a version, whose write lands and whose reply is lost returns a failure
// that is neither a conflict nor a refusal, and the key holds the new data
// under a new version; the same call made again is a conflict (the store
// cannot tell its own write from another), and writes nothing.
func TestValkeyLostReplyOfAPut(t *testing.T) {
	t.Parallel()
	for _, tc := range replyCases() {
		t.Run(tc.String(), func(t *testing.T) {
			t.Parallel()
			l := openLossyValkey(t, tc.where, tc.script, tc.maxRetries)
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
	for _, tc := range replyCases() {
		if tc.maxRetries != -1 {
			continue
		}
		t.Run(tc.String(), func(t *testing.T) {
			t.Parallel()
			l := openLossyValkey(t, tc.where, tc.script, tc.maxRetries)
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
	for _, tc := range replyCases() {
		if tc.where != onStandalone {
			continue
		}
		t.Run(tc.String(), func(t *testing.T) {
			t.Parallel()
			l := openLossyValkey(t, tc.where, tc.script, tc.maxRetries)
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
						_, before, err := l.direct.Get(ctx, key)
						require.NoError(t, err)
						require.NoError(t, w.deliverLate())
						_, now, err := l.direct.Get(ctx, key)
						require.NoError(t, err)
						assert.Equal(t, before, now, "the held write, delivered late, wrote nothing")
						requireLatestIn(t, direct, plugin, shard, 2, "w", string(mine))
					case "rival":
						requireUnknownOnly(t, err, "one attempt, its write held: %v", err)
						require.NoError(t, direct.Push(ctx, plugin, shard, "rival", 3, rival))
						_, before, err := l.direct.Get(ctx, key)
						require.NoError(t, err)
						require.NoError(t, w.deliverLate())
						_, now, err := l.direct.Get(ctx, key)
						require.NoError(t, err)
						assert.Equal(t, before, now, "the held write, delivered late, wrote nothing")
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
