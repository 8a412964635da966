//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// The engine's resolution of lost replies (engine.go) on every adapter's
// real server, through the fault proxy (faultproxy_test.go). The faulty
// stores serve linearizability_test.go too.

// faultyStore is one adapter on a real server reached through a fault
// proxy, and the same records reached directly, to check what the store
// really holds.
type faultyStore struct {
	proxy  *faultProxy
	store  writefence.ConditionalStore // through the proxy
	direct writefence.ConditionalStore // the same bucket or database, not through it
	prefix string                      // the Fence.Prefix to use with both
	// isWrite tells a conditional write from the first bytes of a request.
	isWrite func(req []byte) bool
}

// faultyAdapters are the adapters the fault tests run on. The SDK clients
// behind the proxy are set not to retry, so faults reach the adapter and the
// fence, except in the Valkey variants that keep go-redis's default retries:
// a retried script or transaction must not turn a landed write into a
// conflict. minio-go does not retry a conditional PUT (its body cannot be
// rewound) and the GCS adapter's uploads are not retried either.
var faultyAdapters = []struct {
	name string
	open func(t *testing.T, rates faultRates) faultyStore
}{
	{"minio", openFaultyMinio},
	{"gcs", openFaultyGCS},
	{"valkey-watch", func(t *testing.T, r faultRates) faultyStore { return openFaultyValkey(t, r, false, -1) }},
	{"valkey-script", func(t *testing.T, r faultRates) faultyStore { return openFaultyValkey(t, r, true, -1) }},
	{"valkey-watch-sdk-retries", func(t *testing.T, r faultRates) faultyStore { return openFaultyValkey(t, r, false, 0) }},
	{"valkey-script-sdk-retries", func(t *testing.T, r faultRates) faultyStore { return openFaultyValkey(t, r, true, 0) }},
}

func openFaultyMinio(t *testing.T, rates faultRates) faultyStore {
	s3 := testserver.S3Server(t)
	direct := s3.Client(t, nil)
	bucket := testserver.MinioBucket(t, direct)
	p := newFaultProxy(t, s3.Endpoint, rates)
	s3.Endpoint, s3.MaxRetries = p.addr(), 1 // one attempt
	c := s3.Client(t, testserver.HTTPTransport(t))
	return faultyStore{
		proxy:   p,
		store:   writefence.NewMinioStore(c, bucket),
		direct:  writefence.NewMinioStore(direct, bucket),
		isWrite: func(req []byte) bool { return bytes.HasPrefix(req, []byte("PUT ")) },
	}
}

func openFaultyGCS(t *testing.T, rates faultRates) faultyStore {
	endpoint := testserver.GCSEndpoint(t)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	direct := testserver.GCSClient(t, endpoint, nil)
	bucket := testserver.GCSBucket(t, direct)
	p := newFaultProxy(t, u.Host, rates)
	// The client addresses the server itself and its transport dials the
	// proxy: the emulator serves the client's XML reads only to requests
	// whose Host is its -public-host.
	tr := testserver.HTTPTransport(t)
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", p.addr())
	}
	c := testserver.GCSClient(t, endpoint, tr)
	c.SetRetry(storage.WithPolicy(storage.RetryNever))
	return faultyStore{
		proxy:  p,
		store:  writefence.NewGCSStore(c, bucket),
		direct: writefence.NewGCSStore(direct, bucket),
		isWrite: func(req []byte) bool {
			return bytes.HasPrefix(req, []byte("POST ")) && bytes.Contains(req, []byte("/upload/"))
		},
	}
}

// openFaultyValkey: maxRetries is go-redis's MaxRetries (-1 none, 0 the
// default of three).
func openFaultyValkey(t *testing.T, rates faultRates, script bool, maxRetries int) faultyStore {
	addr := testserver.ValkeyAddr(t)
	direct := testserver.ValkeyClient(t, addr, "")
	prefix := testserver.ValkeyPrefix(t, addr)
	p := newFaultProxy(t, addr, rates)
	c := redis.NewClient(&redis.Options{
		Addr:                  p.addr(),
		MaxRetries:            maxRetries,
		ContextTimeoutEnabled: true,
		DialerRetries:         1, // a refused connection fails the command at once
		// No back-off: the retries happen as by default, but at once. A
		// wait between them proves nothing more (a reply lost is of a
		// request the server ran, a reset one of a request it never
		// saw, and a blackout ends when the test heals it or its outage
		// ends, whatever the client does), and even 1 to 10 ms a retry
		// was most of a TestLostReplies run on the SDK's retries: the
		// proxy refuses thousands of connections.
		MinRetryBackoff: -1,
		MaxRetryBackoff: -1,
		// After PoolSize failed dials in all, the pool stops dialing and
		// fails every call until a probe, once a second, reaches the
		// server: each outage would cost a second after it ended. The
		// proxy refuses thousands of connections in a run.
		PoolSize: 1 << 14,
	})
	t.Cleanup(func() { _ = c.Close() })
	s := writefence.NewValkeyStore(c)
	s.Script = script
	d := writefence.NewValkeyStore(direct)
	d.Script = script
	// go-redis sends command names as the caller spells them, lower case.
	write := []byte("\r\n$3\r\nset\r\n")
	if script {
		write = []byte("\r\nevalsha\r\n")
	}
	return faultyStore{proxy: p, store: s, direct: d, prefix: prefix, isWrite: func(req []byte) bool {
		return bytes.Contains(req, write) || script && bytes.Contains(req, []byte("\r\neval\r\n"))
	}}
}

// lostReplyRates: about one push in three meets a fault on one of its
// requests; a blackout hides a write's outcome until the test heals it.
var lostReplyRates = faultRates{Delay: 0.10, MaxDelay: 20 * time.Millisecond, Reset: 0.08, DropReply: 0.10, Blackout: 0.03}

// shardRecord is what a shard's record holds, as read directly.
type shardRecord struct {
	present bool
	epoch   uint64
	writer  string
	payload string
}

func (r shardRecord) String() string {
	if !r.present {
		return "absent"
	}
	return fmt.Sprintf("epoch %d by %s (%q)", r.epoch, r.writer, r.payload)
}

func readRecord(t *testing.T, f *writefence.Fence, plugin, shard string) shardRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	epoch, writer, payload, err := f.Latest(ctx, plugin, shard)
	if errors.Is(err, writefence.ErrNotFound) {
		return shardRecord{}
	}
	require.NoError(t, err, "reading the record directly")
	return shardRecord{present: true, epoch: epoch, writer: writer, payload: string(payload)}
}

// TestLostReplies pushes 500 times through the fault proxy on each adapter
// and compares every result with the record read directly afterwards. One
// writer climbs epochs; now and then a rival lands the writer's next epoch
// first (directly), and the writer repeats a landed push or pushes an old
// epoch. The pushes are sequential, so each result can be checked exactly:
//
//   - nil: the record is exactly this push;
//   - ErrStaleEpoch: the record did not change and is not this push, and
//     the error names the recorded epoch;
//   - ErrOutcomeUnknown: the record is unchanged or is this push; a retry
//     while the store is still unreachable fails again without changing
//     it, and a retry once it is healthy returns nil with the record
//     exactly this push;
//   - any other error: the record did not change.
func TestLostReplies(t *testing.T) {
	t.Parallel()
	for _, a := range faultyAdapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			runLostReplies(t, a.open(t, lostReplyRates), 500)
		})
	}
}

type pushCall struct {
	epoch   uint64
	payload string
}

func runLostReplies(t *testing.T, fs faultyStore, pushes int) {
	const plugin, shard, me, rival = "wal", "lost-replies", "writer", "rival"
	// The pushes are sequential, so no attempt is lost to a rival's
	// write: every retry follows a fault. Three attempts still retry
	// after a lost reply and read afresh; more would only lengthen each
	// outage, which costs every attempt a failed connection (and
	// minio-go sleeps up to 200 ms after each, go-redis stops dialing for
	// a second once its pool has seen enough of them).
	writer := &writefence.Fence{Store: fs.store, Prefix: fs.prefix, RetryDelay: time.Millisecond, MaxAttempts: 3}
	direct := &writefence.Fence{Store: fs.direct, Prefix: fs.prefix}
	rng := rand.New(rand.NewPCG(fs.proxy.seed, 1))
	push := func(c pushCall) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return writer.Push(ctx, plugin, shard, me, c.epoch, []byte(c.payload))
	}

	var (
		nils, replays, stale, failed, unknownLanded, unknownNot, unreachableRetries, resolvedStale int
		lastLanded                                                                                 *pushCall
	)
	start := time.Now()
	current := readRecord(t, direct, plugin, shard)
	for i := range pushes {
		before := current
		c := pushCall{epoch: before.epoch + 1, payload: fmt.Sprintf("push %d", i)}
		switch r := rng.Float64(); {
		case r < 0.10 && lastLanded != nil && before.epoch == lastLanded.epoch:
			c = *lastLanded // the same push again: the replay rule must answer nil
		case r < 0.20:
			require.NoError(t, direct.Push(context.Background(), plugin, shard, rival, c.epoch, []byte("rival")),
				"the rival's direct push")
			before = readRecord(t, direct, plugin, shard)
		case r < 0.25 && before.epoch > 1:
			c.epoch = before.epoch - uint64(rng.IntN(2)) // an epoch already recorded or passed
		}
		mine := shardRecord{present: true, epoch: c.epoch, writer: me, payload: c.payload}

		err := push(c)
		after := readRecord(t, direct, plugin, shard)
		switch {
		case err == nil:
			nils++
			if before == mine {
				replays++
			}
			require.Equal(t, mine, after, "push %d returned nil but the store holds %v", i, after)
		case errors.Is(err, writefence.ErrStaleEpoch):
			stale++
			require.NotEqual(t, mine, before, "push %d: a landed push of the writer's own was reported stale: %v", i, err)
			require.Equal(t, before, after, "push %d was reported stale but changed the record: %v", i, err)
			var se *writefence.StaleEpochError
			require.ErrorAs(t, err, &se)
			require.Equal(t, before.epoch, se.RecordedEpoch, "push %d: %v", i, err)
			require.LessOrEqual(t, c.epoch, before.epoch, "push %d: %v", i, err)
		case errors.Is(err, writefence.ErrOutcomeUnknown):
			require.True(t, after == before || after == mine, "push %d (%v): the record became %v", i, err, after)
			if after == mine && before != mine {
				unknownLanded++
			} else {
				unknownNot++
			}
			if fs.proxy.isDown() {
				// While the store stays unreachable nothing can be learned.
				unreachableRetries++
				err := push(c)
				require.Error(t, err, "push %d retried while the store is unreachable", i)
				require.NotErrorIs(t, err, writefence.ErrStaleEpoch, "push %d", i)
				require.Equal(t, after, readRecord(t, direct, plugin, shard), "push %d: a retry against an unreachable store changed the record", i)
			}
			rates := fs.proxy.setRates(faultRates{})
			fs.proxy.heal()
			// A client may take a moment to notice the store is back
			// (go-redis's pool answers with its last dial error for up
			// to a second): retry until the answer is definite.
			for range 100 {
				if err = push(c); err == nil || errors.Is(err, writefence.ErrStaleEpoch) {
					break
				}
				require.Contains(t, []shardRecord{after, mine}, readRecord(t, direct, plugin, shard), "push %d: a failed retry wrote another record", i)
				time.Sleep(50 * time.Millisecond)
			}
			fs.proxy.setRates(rates)
			resolved := readRecord(t, direct, plugin, shard)
			switch {
			case err == nil:
				require.Equal(t, mine, resolved, "push %d: the retry returned nil", i)
			case after == mine:
				require.NoError(t, err, "push %d had landed: the retry with the store healthy must say so", i)
			default:
				// It had not landed, and the rival's record refuses it.
				require.ErrorIs(t, err, writefence.ErrStaleEpoch, "push %d: the retry with the store healthy must resolve the outcome", i)
				require.Equal(t, after, resolved, "push %d: a retry reported stale changed the record", i)
				resolvedStale++
			}
			after = resolved
		default:
			failed++
			require.Equal(t, before, after, "push %d failed (%v) but changed the record", i, err)
		}
		if current = after; current == mine {
			lastLanded = &c
		}
		fs.proxy.heal()
	}
	t.Logf("%d pushes in %v: %d nil (%d of them replays), %d stale, %d outcome unknown (%d had landed, %d had not; %d retried while unreachable; all resolved by a healthy retry, %d of them as stale), %d failed without writing; proxy: %s",
		pushes, time.Since(start).Round(time.Millisecond), nils, replays, stale, unknownLanded+unknownNot, unknownLanded, unknownNot, unreachableRetries, resolvedStale, failed, fs.proxy.stats())
	require.Positive(t, fs.proxy.count(faultDropReply), "no reply was dropped: the test proved nothing")
	require.Positive(t, unknownLanded+unknownNot, "no outcome was ever hidden: the test proved nothing")
}

// TestLostReplyThenOverwritten: a push's write lands, its reply is lost,
// and before the writer can retry or read, a rival lands a higher epoch. The
// push did land, so it must not be reported as stale: nil or
// ErrOutcomeUnknown are the honest answers. A store whose SDK retries the
// write, sees the rival's record and answers ErrConflict would turn it into
// ErrStaleEpoch.
func TestLostReplyThenOverwritten(t *testing.T) {
	for _, a := range faultyAdapters {
		t.Run(a.name, func(t *testing.T) {
			fs := a.open(t, faultRates{})
			const plugin, shard = "wal", "overwritten"
			writer := &writefence.Fence{Store: fs.store, Prefix: fs.prefix, RetryDelay: time.Millisecond}
			direct := &writefence.Fence{Store: fs.direct, Prefix: fs.prefix}
			ctx := t.Context()
			require.NoError(t, writer.Push(ctx, plugin, shard, "writer", 1, []byte("one")))

			var (
				armed    atomic.Bool
				done     = make(chan struct{})
				seen     shardRecord
				seenErr  error
				rivalErr error
			)
			armed.Store(true)
			fs.proxy.dropReplyWhen(
				func(req []byte) bool { return fs.isWrite(req) && armed.CompareAndSwap(true, false) },
				func() {
					defer close(done)
					e, w, p, err := direct.Latest(ctx, plugin, shard)
					seen, seenErr = shardRecord{present: true, epoch: e, writer: w, payload: string(p)}, err
					rivalErr = direct.Push(ctx, plugin, shard, "rival", 3, []byte("rival"))
				})
			err := writer.Push(ctx, plugin, shard, "writer", 2, []byte("two"))
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the write's reply was never dropped")
			}
			require.NoError(t, seenErr)
			require.Equal(t, shardRecord{true, 2, "writer", "two"}, seen, "the write landed before its reply was lost")
			require.NoError(t, rivalErr)
			t.Logf("push whose landed write was overwritten before its reply: %v", err)
			require.NotErrorIs(t, err, writefence.ErrStaleEpoch, "a landed push was reported stale")
			if err != nil {
				require.ErrorIs(t, err, writefence.ErrOutcomeUnknown)
			}
		})
	}
}

// TestStreamLostReplies runs a shard's streams through the fault proxy on
// each adapter that holds blobs: blobs put, commits of them (two or more
// of an epoch checked by a listing), seals by new writers, and Collect
// with a grace of an hour or none, 150 steps drawn from the proxy's seed.
// After every step, read directly: every blob the record references
// exists with its size (promise 24), and every blob a Collect reported
// deleted, whatever it returned, is gone; a commit that returned nil is
// recorded. Once the faults stop, a Collect deletes every blob that can
// never be committed (promise 26).
func TestStreamLostReplies(t *testing.T) {
	t.Parallel()
	for _, a := range faultyAdapters {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			fs := a.open(t, lostReplyRates)
			if _, ok := fs.direct.(writefence.BlobStore); !ok {
				t.Skip("the store holds no blobs")
			}
			runStreamLostReplies(t, fs, 150)
		})
	}
}

func runStreamLostReplies(t *testing.T, fs faultyStore, steps int) {
	const plugin, shard = "wal", "stream-lost-replies"
	faulty := &writefence.Fence{Store: fs.store, Prefix: fs.prefix, RetryDelay: time.Millisecond, MaxAttempts: 3}
	direct := &writefence.Fence{Store: fs.direct, Prefix: fs.prefix}
	bs := fs.direct.(writefence.BlobStore)
	space, err := keys.Blobs(fs.prefix, plugin, shard)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(fs.proxy.seed, 2))
	gen, epoch := 0, uint64(1)
	writer := func() string { return fmt.Sprintf("w%d", gen) }
	require.NoError(t, direct.Seal(context.Background(), plugin, shard, writer(), epoch))
	var pending []writefence.BlobRef // the current writer's blobs put, not yet in a commit
	var landed, deleted int
	for i := range steps {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		switch r := rng.Float64(); {
		case r < 0.4:
			ref, err := faulty.PutBlob(ctx, plugin, shard, writer(), epoch, strings.NewReader(strings.Repeat("x", 1+rng.IntN(100))))
			if err == nil {
				pending = append(pending, ref)
			}
		case r < 0.7 && len(pending) > 0:
			add := pending[:min(len(pending), 1+rng.IntN(3))]
			pending = pending[len(add):]
			dropFirst := rng.IntN(2) == 0
			epoch++
			err := faulty.Commit(ctx, plugin, shard, writer(), epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
				refs := m.Blobs
				if dropFirst && len(refs) > 0 {
					refs = refs[1:]
				}
				for _, b := range add {
					if !slices.Contains(refs, b) {
						refs = append(refs, b)
					}
				}
				return writefence.Manifest{Payload: m.Payload, Blobs: refs}, nil
			})
			if err == nil {
				landed++
				info, err := direct.Inspect(context.Background(), plugin, shard)
				require.NoError(t, err)
				for _, b := range add {
					require.Contains(t, info.Blobs, b, "step %d: the commit returned nil", i)
				}
			}
		case r < 0.75:
			gen, epoch, pending = gen+1, epoch+1, nil
			require.NoError(t, direct.Seal(context.Background(), plugin, shard, writer(), epoch))
		default:
			grace := []time.Duration{time.Nanosecond, time.Hour}[rng.IntN(2)]
			report, err := faulty.Collect(ctx, plugin, shard, writefence.GCOptions{Grace: grace})
			deleted += len(report.Deleted)
			for _, d := range report.Deleted {
				_, serr := bs.StatBlob(context.Background(), d.Key)
				require.ErrorIs(t, serr, writefence.ErrNotFound, "step %d: Collect (returning %v) reported %s deleted", i, err, d.Key)
			}
		}
		cancel()
		fs.proxy.heal()
		info, err := direct.Inspect(context.Background(), plugin, shard)
		require.NoError(t, err)
		for _, r := range info.Blobs {
			b, err := bs.StatBlob(context.Background(), space+r.Name)
			require.NoError(t, err, "step %d: a referenced blob", i)
			require.Equal(t, r.Size, b.Size, "step %d: the size of %s", i, r.Name)
		}
	}
	fs.proxy.setRates(faultRates{})
	fs.proxy.heal()
	_, err = faulty.Collect(context.Background(), plugin, shard, writefence.GCOptions{Grace: time.Hour})
	require.NoError(t, err, "a Collect without faults")
	info, err := direct.Inspect(context.Background(), plugin, shard)
	require.NoError(t, err)
	require.NoError(t, bs.ListBlobs(context.Background(), space, func(b writefence.BlobInfo) error {
		name := strings.TrimPrefix(b.Key, space)
		e, _, w, ok := keys.ParseBlobName(name)
		require.True(t, ok, b.Key)
		floor := info.Since
		if !info.Stream {
			floor = info.Epoch // a plain record's, as Commit takes it
		}
		committable := w == info.Writer && e >= floor
		require.True(t, committable || slices.ContainsFunc(info.Blobs, func(r writefence.BlobRef) bool { return r.Name == name }),
			"%s is left after a Collect without faults, though it can never be committed", name)
		return nil
	}))
	t.Logf("%d steps: %d commits landed, %d blobs deleted; proxy: %s", steps, landed, deleted, fs.proxy.stats())
	require.Positive(t, fs.proxy.count(faultDropReply), "no reply was dropped: the test proved nothing")
	require.Positive(t, landed, "no commit landed: the test proved nothing")
	require.Positive(t, deleted, "no blob was collected: the test proved nothing")
}
