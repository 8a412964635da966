//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/anishathalye/porcupine"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/faultproxy"
	"github.com/writefence/writefence/internal/hook"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/record"
	"github.com/writefence/writefence/internal/testserver"
)

// The engine's resolution of lost replies (engine.go) on every adapter's
// real server, through the fault proxy (internal/faultproxy). The faulty
// stores serve the linearizability test below too.

// faultyStore is one adapter on a real server reached through a fault
// proxy, and the same records reached directly, to check what the store
// really holds.
type faultyStore struct {
	proxy  *faultproxy.Proxy
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
	open func(t *testing.T, rates faultproxy.Rates) faultyStore
}{
	{"minio", openFaultyMinio},
	{"gcs", openFaultyGCS},
	{"valkey-watch", func(t *testing.T, r faultproxy.Rates) faultyStore { return openFaultyValkey(t, r, false, -1) }},
	{"valkey-script", func(t *testing.T, r faultproxy.Rates) faultyStore { return openFaultyValkey(t, r, true, -1) }},
	{"valkey-watch-sdk-retries", func(t *testing.T, r faultproxy.Rates) faultyStore { return openFaultyValkey(t, r, false, 0) }},
	{"valkey-script-sdk-retries", func(t *testing.T, r faultproxy.Rates) faultyStore { return openFaultyValkey(t, r, true, 0) }},
}

func openFaultyMinio(t *testing.T, rates faultproxy.Rates) faultyStore {
	s3 := testserver.S3Server(t)
	direct := s3.Client(t, nil)
	bucket := testserver.MinioBucket(t, direct)
	p := faultproxy.New(t, s3.Endpoint, rates)
	s3.Endpoint, s3.MaxRetries = p.Addr(), 1 // one attempt
	c := s3.Client(t, testserver.HTTPTransport(t))
	return faultyStore{
		proxy:   p,
		store:   writefence.NewMinioStore(c, bucket),
		direct:  writefence.NewMinioStore(direct, bucket),
		isWrite: func(req []byte) bool { return bytes.HasPrefix(req, []byte("PUT ")) },
	}
}

func openFaultyGCS(t *testing.T, rates faultproxy.Rates) faultyStore {
	endpoint := testserver.GCSEndpoint(t)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	direct := testserver.GCSClient(t, endpoint, nil)
	bucket := testserver.GCSBucket(t, direct)
	p := faultproxy.New(t, u.Host, rates)
	// The client addresses the server itself and its transport dials the
	// proxy: the emulator serves the client's XML reads only to requests
	// whose Host is its -public-host.
	tr := testserver.HTTPTransport(t)
	var d net.Dialer
	tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", p.Addr())
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
func openFaultyValkey(t *testing.T, rates faultproxy.Rates, script bool, maxRetries int) faultyStore {
	addr := testserver.ValkeyAddr(t)
	direct := testserver.ValkeyClient(t, addr, "")
	prefix := testserver.ValkeyPrefix(t, addr)
	p := faultproxy.New(t, addr, rates)
	c := redis.NewClient(&redis.Options{
		Addr:                  p.Addr(),
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
var lostReplyRates = faultproxy.Rates{Delay: 0.10, MaxDelay: 20 * time.Millisecond, Reset: 0.08, DropReply: 0.10, Blackout: 0.03}

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
	rng := rand.New(rand.NewPCG(fs.proxy.Seed(), 1))
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
			if fs.proxy.IsDown() {
				// While the store stays unreachable nothing can be learned.
				unreachableRetries++
				err := push(c)
				require.Error(t, err, "push %d retried while the store is unreachable", i)
				require.NotErrorIs(t, err, writefence.ErrStaleEpoch, "push %d", i)
				require.Equal(t, after, readRecord(t, direct, plugin, shard), "push %d: a retry against an unreachable store changed the record", i)
			}
			rates := fs.proxy.SetRates(faultproxy.Rates{})
			fs.proxy.Heal()
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
			fs.proxy.SetRates(rates)
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
		fs.proxy.Heal()
	}
	t.Logf("%d pushes in %v: %d nil (%d of them replays), %d stale, %d outcome unknown (%d had landed, %d had not; %d retried while unreachable; all resolved by a healthy retry, %d of them as stale), %d failed without writing; proxy: %s",
		pushes, time.Since(start).Round(time.Millisecond), nils, replays, stale, unknownLanded+unknownNot, unknownLanded, unknownNot, unreachableRetries, resolvedStale, failed, fs.proxy.Stats())
	require.Positive(t, fs.proxy.Count(faultproxy.DropReply), "no reply was dropped: the test proved nothing")
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
			fs := a.open(t, faultproxy.Rates{})
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
			fs.proxy.DropReplyWhen(
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
	rng := rand.New(rand.NewPCG(fs.proxy.Seed(), 2))
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
		fs.proxy.Heal()
		info, err := direct.Inspect(context.Background(), plugin, shard)
		require.NoError(t, err)
		for _, r := range info.Blobs {
			b, err := bs.StatBlob(context.Background(), space+r.Name)
			require.NoError(t, err, "step %d: a referenced blob", i)
			require.Equal(t, r.Size, b.Size, "step %d: the size of %s", i, r.Name)
		}
	}
	fs.proxy.SetRates(faultproxy.Rates{})
	fs.proxy.Heal()
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
	t.Logf("%d steps: %d commits landed, %d blobs deleted; proxy: %s", steps, landed, deleted, fs.proxy.Stats())
	require.Positive(t, fs.proxy.Count(faultproxy.DropReply), "no reply was dropped: the test proved nothing")
	require.Positive(t, landed, "no commit landed: the test proved nothing")
	require.Positive(t, deleted, "no blob was collected: the test proved nothing")
}

// The fence's sequential specification, for porcupine. One shard's record
// is the state; Push(e, w, p) lands when e is greater than the recorded
// epoch, returns nil without a change when the record is already exactly
// (e, w, p) (the replay rule), and is otherwise refused as stale, naming
// the recorded epoch and writer; Latest returns the record.

// fenceState is the recorded (epoch, writer, payload); epoch 0 is absent.
type fenceState struct {
	epoch           uint64
	writer, payload string
}

type fenceInput struct {
	shard   int  // which shard; each is checked on its own
	latest  bool // Latest; otherwise Push with the fields below
	epoch   uint64
	writer  string
	payload string
}

// outcome is how an operation ended.
type outcome int

const (
	outOK       outcome = iota // Push returned nil
	outStale                   // Push returned ErrStaleEpoch
	outUnknown                 // Push returned ErrOutcomeUnknown: it may or may not land, at any later time
	outFailed                  // any other error: nothing happened
	outFound                   // Latest returned a record
	outNotFound                // Latest returned ErrNotFound
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"ok", "stale", "unknown", "failed", "found", "not found"}

type fenceOutput struct {
	outcome outcome
	// The record Latest returned, or for outStale the recorded epoch and
	// writer the refusal named.
	epoch           uint64
	writer, payload string
}

// fenceModel: an operation whose outcome is unknown is given a return time
// after every other operation, and its step lands whenever the epoch allows.
// Porcupine may then place it at the point where it really landed, or at
// the very end, where it changes nothing anyone observed.
var fenceModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byShard := make(map[int][]porcupine.Operation)
		for _, op := range history {
			s := op.Input.(fenceInput).shard
			byShard[s] = append(byShard[s], op)
		}
		parts := make([][]porcupine.Operation, 0, len(byShard))
		for _, ops := range byShard {
			parts = append(parts, ops)
		}
		return parts
	},
	Init: func() any { return fenceState{} },
	Step: func(state, input, output any) (bool, any) {
		st, in, out := state.(fenceState), input.(fenceInput), output.(fenceOutput)
		if in.latest {
			switch out.outcome {
			case outFailed:
				return true, st
			case outNotFound:
				return st.epoch == 0, st
			case outFound:
				return st == fenceState{out.epoch, out.writer, out.payload}, st
			}
			return false, st
		}
		mine := fenceState{in.epoch, in.writer, in.payload}
		lands := in.epoch > st.epoch
		switch out.outcome {
		case outFailed:
			return true, st
		case outUnknown:
			if lands {
				return true, mine
			}
			return true, st
		case outOK:
			if st == mine {
				return true, st
			}
			return lands, mine
		case outStale:
			return !lands && st != mine && out.epoch == st.epoch && out.writer == st.writer, st
		}
		return false, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(fenceInput), output.(fenceOutput)
		if in.latest {
			if out.outcome == outFound {
				return fmt.Sprintf("Latest(s%d) -> %d %s %q", in.shard, out.epoch, out.writer, out.payload)
			}
			return fmt.Sprintf("Latest(s%d) -> %s", in.shard, outcomeNames[out.outcome])
		}
		s := fmt.Sprintf("Push(s%d, %d, %s, %q) -> %s", in.shard, in.epoch, in.writer, in.payload, outcomeNames[out.outcome])
		if out.outcome == outStale {
			s += fmt.Sprintf(" (recorded %d by %s)", out.epoch, out.writer)
		}
		return s
	},
	DescribeState: func(state any) string {
		st := state.(fenceState)
		if st.epoch == 0 {
			return "absent"
		}
		return fmt.Sprintf("%d %s %q", st.epoch, st.writer, st.payload)
	},
}

// checkLinearizable checks a history against fenceModel. On a violation it
// writes porcupine's visualisation to a file and fails the test naming it.
func checkLinearizable(t *testing.T, history []porcupine.Operation) time.Duration {
	t.Helper()
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(fenceModel, history, 2*time.Minute)
	took := time.Since(start)
	if res == porcupine.Ok {
		return took
	}
	f, err := os.CreateTemp("", "writefence-linearizability-*.html")
	require.NoError(t, err)
	path := f.Name()
	require.NoError(t, f.Close())
	require.NoError(t, porcupine.VisualizePath(fenceModel, info, path))
	require.NoError(t, os.WriteFile(path+".txt", describeHistory(history), 0o644))
	if res == porcupine.Unknown {
		t.Fatalf("the checker gave up after %v on %d operations; history visualised in %s (as text in %[3]s.txt)", took, len(history), path)
	}
	t.Fatalf("history of %d operations is not linearizable: visualisation in %s, the history as text in %[2]s.txt", len(history), path)
	return took
}

// describeHistory lists a history by call time, one operation a line.
func describeHistory(history []porcupine.Operation) []byte {
	ops := append([]porcupine.Operation(nil), history...)
	slices.SortFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var b []byte
	for _, op := range ops {
		b = fmt.Appendf(b, "%12d %12d client %d: %s\n", op.Call, op.Return, op.ClientId, fenceModel.DescribeOperation(op.Input, op.Output))
	}
	return b
}

// pruneUnobserved leaves out the pushes of unknown outcome that nothing in
// the history observed: no Latest returned their record, no stale refusal
// named their epoch and writer, and no push with the same arguments
// returned anything but unknown. Leaving them out is exact: with one
// included, the history is linearizable if and only if it is without it
// (an unobserved landing is either overwritten before anyone looks, by a
// push that lands without it as well, or can be placed at the end). It
// keeps the checker's search from growing with every outcome an outage
// hid. It returns the operations kept and how many it left out.
func pruneUnobserved(ops []porcupine.Operation) ([]porcupine.Operation, int) {
	type pushKey struct {
		shard           int
		epoch           uint64
		writer, payload string
	}
	type namedKey struct {
		shard  int
		epoch  uint64
		writer string
	}
	seen := make(map[pushKey]bool)
	named := make(map[namedKey]bool)
	for _, op := range ops {
		in, out := op.Input.(fenceInput), op.Output.(fenceOutput)
		switch {
		case out.outcome == outFound:
			seen[pushKey{in.shard, out.epoch, out.writer, out.payload}] = true
		case out.outcome == outStale:
			named[namedKey{in.shard, out.epoch, out.writer}] = true
		}
		if !in.latest && out.outcome != outUnknown {
			seen[pushKey{in.shard, in.epoch, in.writer, in.payload}] = true
		}
	}
	kept := ops[:0:0]
	for _, op := range ops {
		in, out := op.Input.(fenceInput), op.Output.(fenceOutput)
		if out.outcome == outUnknown &&
			!seen[pushKey{in.shard, in.epoch, in.writer, in.payload}] &&
			!named[namedKey{in.shard, in.epoch, in.writer}] {
			continue
		}
		kept = append(kept, op)
	}
	return kept, len(ops) - len(kept)
}

// historyRecorder collects operations from concurrent clients.
type historyRecorder struct {
	start time.Time
	mu    sync.Mutex // guards ops
	ops   []porcupine.Operation
}

func (r *historyRecorder) now() int64 { return time.Since(r.start).Nanoseconds() }

func (r *historyRecorder) add(op porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// history returns the operations, the unknown ones returning after all the
// others.
func (r *historyRecorder) history() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	var last int64
	for _, op := range r.ops {
		if op.Return != math.MaxInt64 {
			last = max(last, op.Return)
		}
	}
	ops := append([]porcupine.Operation(nil), r.ops...)
	for i := range ops {
		if ops[i].Return == math.MaxInt64 {
			ops[i].Return = last + 1
		}
	}
	return ops
}

// quickRetries returns ctx with the Fence's back-offs cut to at most a
// millisecond. The proxy makes a store fail far more often than a real
// one does, and in an outage a push backs off through all its attempts,
// up to a quarter of a second at the last ones: the clients would spend
// most of the test asleep. The back-off's length is not what it tests;
// that a retry reads afresh, and what an unknown outcome allows, are.
func quickRetries(ctx context.Context) context.Context {
	return hook.With(ctx, &hook.Hooks{Wait: func(ctx context.Context, _ int, d time.Duration) error {
		return hook.Sleep(ctx, min(d, time.Millisecond))
	}})
}

// linearizabilityRates: delays reorder concurrent requests; resets, lost
// replies and short outages that every client sees hide outcomes.
var linearizabilityRates = faultproxy.Rates{
	Delay:     0.15,
	MaxDelay:  10 * time.Millisecond,
	Reset:     0.05,
	DropReply: 0.05,
	Blackout:  0.01,
	Outage:    100 * time.Millisecond,
}

// TestLinearizable records histories of 8 clients pushing to and reading
// shards concurrently, through the fault proxy, on each real server, and
// checks them with porcupine against the fence's sequential specification.
// A push that returns ErrOutcomeUnknown is retried once with the same
// arguments, so the replay rule is exercised under concurrency.
//
// An unknown outcome may land at any later time, so it stays open to the
// end of the history, and the checker's search grows exponentially with the
// number of such operations open at once. The clients therefore spread
// their operations over one shard per opsPerShard operations, each shard a
// history of its own (porcupine's partitions), so each history holds a
// handful of them while eight clients still contend on every shard. The default
// run is 40 operations per client that did not fail (at most 15 s per
// server); WRITEFENCE_LONG=1 runs 400 per client (at most 3 minutes per
// server).
func TestLinearizable(t *testing.T) {
	opsPerClient, budget := 40, 15*time.Second
	if os.Getenv("WRITEFENCE_LONG") != "" {
		opsPerClient, budget = 400, 3*time.Minute
	}
	for _, a := range faultyAdapters {
		t.Run(a.name, func(t *testing.T) {
			fs := a.open(t, linearizabilityRates)
			runLinearizability(t, fs, 8, opsPerClient, budget)
		})
	}
}

// opsPerShard is about how many operations go to each shard.
const opsPerShard = 80

func runLinearizability(t *testing.T, fs faultyStore, clients, opsPerClient int, budget time.Duration) {
	const plugin = "wal"
	shards := max(1, clients*opsPerClient/opsPerShard)
	rec := &historyRecorder{start: time.Now()}
	deadline := rec.start.Add(budget)
	highest := make([]atomic.Uint64, shards) // the highest epoch any client has seen, by shard
	seen := func(shard int, e uint64) {
		for {
			h := highest[shard].Load()
			if e <= h || highest[shard].CompareAndSwap(h, e) {
				return
			}
		}
	}
	var counts [numOutcomes]atomic.Int64
	// The promise checker reads the same history, recorded beneath the
	// Fences, in the order the store took the writes.
	hist, store := modeltest.NewRecorder(fs.store, time.Now, promise.Options{})
	hist.Concurrent()

	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(fs.proxy.Seed(), uint64(c)))
			f := &writefence.Fence{Store: store, Prefix: fs.prefix, RetryDelay: time.Millisecond, Observer: hist.Observe}
			writer := fmt.Sprintf("c%d", c)
			var retry *fenceInput
			// Failed operations (mostly during an outage, or while a
			// client's pool still remembers one) do not count towards
			// opsPerClient.
			for i, done := 0, 0; done < opsPerClient && time.Now().Before(deadline); i++ {
				in := fenceInput{shard: rng.IntN(shards), latest: true}
				switch {
				case retry != nil:
					in, retry = *retry, nil
				case rng.IntN(10) < 6:
					in.latest = false
					in.epoch = max(1, highest[in.shard].Load()+uint64(rng.IntN(3)))
					in.writer = writer
					in.payload = fmt.Sprintf("%s/%d", writer, i)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				shard := fmt.Sprintf("shard-%d", in.shard)
				pc := &promise.Call{Op: promise.Push, Proc: writer, Prefix: fs.prefix, Plugin: plugin, Shard: shard, Writer: in.writer, Epoch: in.epoch, Payload: []byte(in.payload)}
				if in.latest {
					pc = &promise.Call{Op: promise.Latest, Proc: writer, Prefix: fs.prefix, Plugin: plugin, Shard: shard}
				}
				pc.Key, _ = keys.Shard(fs.prefix, plugin, shard)
				hist.Begin(pc)
				call := rec.now()
				out, err := runFenceOp(quickRetries(modeltest.WithCall(ctx, pc)), t, f, plugin, shard, in)
				ret := rec.now()
				if out.outcome == outFound {
					pc.Read, pc.ReadBody = &record.Header{Epoch: out.epoch, Writer: out.writer}, record.Body{Payload: []byte(out.payload)}
				}
				hist.End(pc, err)
				cancel()
				switch out.outcome {
				case outUnknown:
					ret = math.MaxInt64
					retry = &in
				case outOK:
					seen(in.shard, in.epoch)
				case outStale, outFound:
					seen(in.shard, out.epoch)
				}
				counts[out.outcome].Add(1)
				if out.outcome == outFailed || out.outcome == outUnknown {
					// Most come from an outage: let it pass rather than
					// fill the history with them.
					time.Sleep(time.Duration(10+rng.IntN(20)) * time.Millisecond)
				}
				if out.outcome == outFailed {
					// It changed nothing and could be placed anywhere:
					// leaving it out of the history is equivalent, and
					// spares the checker a search over where to put it.
					continue
				}
				done++
				rec.add(porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret})
			}
		})
	}
	wg.Wait()
	ran := time.Since(rec.start)
	history, pruned := pruneUnobserved(rec.history())
	took := checkLinearizable(t, history)
	// The store's last state, read without faults.
	fs.proxy.SetRates(faultproxy.Rates{})
	fs.proxy.Heal()
	ordered, err := hist.Ordered(context.Background())
	require.NoError(t, err, "the history in the store's order")
	// Every promise, but the readers' (23): a write's place in this
	// history is when it was sent, and porcupine checks the reads.
	for _, v := range promise.NewChecker(promise.Options{}).Check(ordered) {
		if v.Promise != 23 {
			t.Errorf("the promise checker: %v", v)
		}
	}

	summary := fmt.Sprintf("%d operations on %d shards in %v (%d checked: the failed ones and %d unobserved unknown ones left out), linearizable, checked in %v:",
		len(history)+pruned+int(counts[outFailed].Load()), shards, ran.Round(time.Millisecond), len(history), pruned, took.Round(time.Millisecond))
	for o, name := range outcomeNames {
		summary += fmt.Sprintf(" %d %s", counts[o].Load(), name)
		if o < int(numOutcomes)-1 {
			summary += ","
		}
	}
	var top uint64
	for i := range highest {
		top = max(top, highest[i].Load())
	}
	t.Logf("%s; highest epoch %d; proxy: %s", summary, top, fs.proxy.Stats())
	assert.Positive(t, counts[outOK].Load(), "no push landed")
	assert.Positive(t, counts[outStale].Load(), "no push was refused: the clients never contended")
	assert.Positive(t, fs.proxy.Count(faultproxy.DropReply)+fs.proxy.Count(faultproxy.Reset), "no fault was injected")
}

// runFenceOp performs one operation and classifies its result.
func runFenceOp(ctx context.Context, t *testing.T, f *writefence.Fence, plugin, shard string, in fenceInput) (fenceOutput, error) {
	if in.latest {
		epoch, writer, payload, err := f.Latest(ctx, plugin, shard)
		switch {
		case err == nil:
			return fenceOutput{outcome: outFound, epoch: epoch, writer: writer, payload: string(payload)}, nil
		case errors.Is(err, writefence.ErrNotFound):
			return fenceOutput{outcome: outNotFound}, err
		case errors.Is(err, writefence.ErrCorrupt), errors.Is(err, writefence.ErrWire):
			t.Errorf("latest: %v", err)
		}
		return fenceOutput{outcome: outFailed}, err
	}
	err := f.Push(ctx, plugin, shard, in.writer, in.epoch, []byte(in.payload))
	var se *writefence.StaleEpochError
	switch {
	case err == nil:
		return fenceOutput{outcome: outOK}, nil
	case errors.As(err, &se):
		return fenceOutput{outcome: outStale, epoch: se.RecordedEpoch, writer: se.RecordedWriter}, err
	case errors.Is(err, writefence.ErrOutcomeUnknown):
		return fenceOutput{outcome: outUnknown}, err
	case errors.Is(err, writefence.ErrCorrupt), errors.Is(err, writefence.ErrWire):
		t.Errorf("push: %v", err)
	}
	// Push's contract: an error that is neither stale nor outcome unknown
	// means nothing was written.
	return fenceOutput{outcome: outFailed}, err
}

// TestFenceModel shows the checker refuses the histories a broken fence
// would produce and accepts the ones unknown outcomes allow, so a pass of
// TestLinearizable means something.
func TestFenceModel(t *testing.T) {
	push := func(e uint64, w, p string) fenceInput { return fenceInput{epoch: e, writer: w, payload: p} }
	latest := fenceInput{latest: true}
	ok := fenceOutput{outcome: outOK}
	unknown := fenceOutput{outcome: outUnknown}
	failed := fenceOutput{outcome: outFailed}
	stale := func(e uint64, w string) fenceOutput { return fenceOutput{outcome: outStale, epoch: e, writer: w} }
	found := func(e uint64, w, p string) fenceOutput {
		return fenceOutput{outcome: outFound, epoch: e, writer: w, payload: p}
	}
	notFound := fenceOutput{outcome: outNotFound}
	op := func(client int, in fenceInput, out fenceOutput, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: client, Input: in, Output: out, Call: call, Return: ret}
	}
	const never = 1000 // after every other operation: an unknown outcome

	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"two pushes land at one epoch", []porcupine.Operation{
			op(0, push(1, "a", "x"), ok, 0, 10),
			op(1, push(1, "b", "y"), ok, 0, 10),
		}, porcupine.Illegal},
		{"concurrent pushes, one stale", []porcupine.Operation{
			op(0, push(1, "a", "x"), ok, 0, 10),
			op(1, push(1, "b", "y"), stale(1, "a"), 0, 10),
			op(2, latest, found(1, "a", "x"), 11, 12),
		}, porcupine.Ok},
		{"stale names a record that never was", []porcupine.Operation{
			op(0, push(2, "a", "x"), ok, 0, 10),
			op(1, push(1, "b", "y"), stale(3, "a"), 11, 20),
		}, porcupine.Illegal},
		{"landed push then read absent", []porcupine.Operation{
			op(0, push(1, "a", "x"), ok, 0, 10),
			op(1, latest, notFound, 11, 20),
		}, porcupine.Illegal},
		{"epoch goes back", []porcupine.Operation{
			op(0, push(2, "a", "x"), ok, 0, 10),
			op(1, push(1, "b", "y"), ok, 11, 20),
		}, porcupine.Illegal},
		{"failed push shows up", []porcupine.Operation{
			op(0, push(1, "a", "x"), failed, 0, 10),
			op(1, latest, found(1, "a", "x"), 11, 20),
		}, porcupine.Illegal},
		{"unknown push shows up", []porcupine.Operation{
			op(0, push(1, "a", "x"), unknown, 0, never),
			op(1, latest, found(1, "a", "x"), 11, 20),
		}, porcupine.Ok},
		{"unknown push never shows up", []porcupine.Operation{
			op(0, push(1, "a", "x"), unknown, 0, never),
			op(1, latest, notFound, 11, 20),
			op(1, push(1, "b", "y"), ok, 21, 30),
		}, porcupine.Ok},
		{"unknown push resolved by its replay", []porcupine.Operation{
			op(0, push(1, "a", "x"), unknown, 0, never),
			op(0, push(1, "a", "x"), ok, 11, 20),
			op(1, latest, found(1, "a", "x"), 21, 30),
		}, porcupine.Ok},
		{"own landed push reported stale", []porcupine.Operation{
			op(0, push(1, "a", "x"), ok, 0, 10),
			op(0, push(1, "a", "x"), stale(1, "a"), 11, 20),
		}, porcupine.Illegal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, porcupine.CheckOperationsTimeout(fenceModel, tc.ops, 0)) // 0: no time limit
		})
	}
}

// TestPruneUnobserved: only unknown pushes nobody observed are left out.
func TestPruneUnobserved(t *testing.T) {
	op := func(in fenceInput, out fenceOutput) porcupine.Operation {
		return porcupine.Operation{Input: in, Output: out}
	}
	unknown := fenceOutput{outcome: outUnknown}
	ops := []porcupine.Operation{
		op(fenceInput{epoch: 1, writer: "a", payload: "unseen"}, unknown),
		op(fenceInput{epoch: 2, writer: "a", payload: "read"}, unknown),
		op(fenceInput{latest: true}, fenceOutput{outcome: outFound, epoch: 2, writer: "a", payload: "read"}),
		op(fenceInput{epoch: 3, writer: "b", payload: "named"}, unknown),
		op(fenceInput{epoch: 3, writer: "c", payload: "x"}, fenceOutput{outcome: outStale, epoch: 3, writer: "b"}),
		op(fenceInput{epoch: 4, writer: "a", payload: "replayed"}, unknown),
		op(fenceInput{epoch: 4, writer: "a", payload: "replayed"}, fenceOutput{outcome: outOK}),
		op(fenceInput{shard: 1, epoch: 2, writer: "a", payload: "read"}, unknown), // read on shard 0 only
	}
	kept, pruned := pruneUnobserved(ops)
	assert.Equal(t, 2, pruned)
	assert.Equal(t, []porcupine.Operation{ops[1], ops[2], ops[3], ops[4], ops[5], ops[6]}, kept)
}
