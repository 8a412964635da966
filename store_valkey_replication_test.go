package writefence_test

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	"github.com/writefence/writefence/internal/keys"
)

// Durability across failover, on a primary and a replica of the test's own.

// replRelay is a TCP relay between a replica and its primary. hold stops
// the primary's bytes from reaching the replica while keeping both
// connections open, so the primary still counts the replica (and its
// acknowledgements of what it had before) while it receives nothing new;
// cut closes every connection and refuses new ones.
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
	r := &replRelay{target: target}
	r.wake = sync.NewCond(&r.mu)
	for range 20 {
		ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(20000+rand.IntN(12000))))
		if err == nil {
			r.ln = ln
			break
		}
	}
	require.NotNil(t, r.ln, "no free port for the relay")
	r.wg.Add(1)
	go r.accept()
	t.Cleanup(r.close)
	return r
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
func infoField(t *testing.T, c *redis.Client, section, name string) string {
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

// waitUntil polls cond every 10 ms, failing the test after 15 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
	}
}

// newDirectClient is a client of addr without retries, closed at the end.
func newDirectClient(t *testing.T, addr string) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// startPrimary starts a server to replicate from. It serves a replica's
// full sync at once, not after the default delay of 5 s.
func startPrimary(t *testing.T) string {
	t.Helper()
	return startValkeyServer(t, "", "--repl-diskless-sync-delay", "0")
}

// startReplica starts a replica of primary, through the server at
// upstreamAddr (primary's own address, or a relay to it), and waits until
// the replica's link is up and primary counts it online: only then does
// WAIT count it (after a diskless sync the primary waits for the replica's
// first acknowledgement, sent once a second).
func startReplica(t *testing.T, primary *redis.Client, upstreamAddr string) *redis.Client {
	t.Helper()
	host, port, err := net.SplitHostPort(upstreamAddr)
	require.NoError(t, err)
	replica := newDirectClient(t, startValkeyServer(t, "", "--replicaof", host, port))
	waitUntil(t, "the replica's link is up", func() bool {
		return infoField(t, replica, "replication", "master_link_status") == "up"
	})
	waitUntil(t, "the primary counts the replica online", func() bool {
		return strings.Contains(infoField(t, primary, "replication", "slave0"), "state=online")
	})
	return replica
}

// rawValue returns the value at key, "" when absent.
func rawValue(t *testing.T, c *redis.Client, key string) string {
	t.Helper()
	v, err := c.Get(context.Background(), key).Result()
	if err == redis.Nil {
		return ""
	}
	require.NoError(t, err)
	return v
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
	ctx := context.Background()
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			primaryAddr := startPrimary(t)
			primary := newDirectClient(t, primaryAddr)
			store := writefence.NewValkeyConditionalStore(primary)
			store.Script = path.script
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
			assert.Empty(t, rawValue(t, primary, key))

			// A write lands on the primary but is not reported as landed,
			// and reading it back is not confirmed either.
			v, err := store.PutIfVersion(ctx, "other", []byte("x"), "")
			require.ErrorIs(t, err, writefence.ErrOutcomeUnknown, "a write no replica acknowledged")
			assert.NotErrorIs(t, err, writefence.ErrConflict)
			assert.Empty(t, v)
			assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged the write within 100ms")
			require.NotEmpty(t, rawValue(t, primary, "other"), "the write is on the primary all the same")
			for name, read := range map[string]func() error{
				"get":    func() error { _, _, err := store.Get(ctx, "other"); return err },
				"prefix": func() error { _, _, _, err := store.GetPrefix(ctx, "other", 1); return err },
			} {
				err := read()
				require.ErrorIs(t, err, writefence.ErrOutcomeUnknown, "%s: a read no replica confirms", name)
				assert.Contains(t, err.Error(), "0 of 1 replicas acknowledged what was read within 100ms", name)
			}

			replica := startReplica(t, primary, primaryAddr)
			// Acknowledgements take what the machine's load makes them
			// take: a WAIT that is to succeed gets time enough. (No call is
			// in flight, so the field may change here.)
			store.WaitTimeout = testAckTimeout
			require.NoError(t, push(1), "the same push, once a replica is linked")
			assert.Equal(t, rawValue(t, primary, key), rawValue(t, replica, key), "the replica holds the record")

			require.NoError(t, push(2))
			assert.Equal(t, rawValue(t, primary, key), rawValue(t, replica, key), "the replica had the write when the push returned")
			_, _, err = store.Get(ctx, key)
			require.NoError(t, err)
		})
	}
}

// valkeyPush is one push and what it returned.
type valkeyPush struct {
	writer string
	epoch  uint64
	err    error
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
	ctx := context.Background()
	for _, wait := range []bool{false, true} {
		for _, path := range valkeyPaths {
			t.Run(fmt.Sprintf("%s/wait=%v", path.name, wait), func(t *testing.T) {
				primaryAddr := startPrimary(t)
				primary := newDirectClient(t, primaryAddr)
				relay := newReplRelay(t, primaryAddr)
				replica := startReplica(t, primary, relay.addr())
				newStore := func(c *redis.Client, wait bool) *writefence.ValkeyConditionalStore {
					s := writefence.NewValkeyConditionalStore(c)
					s.Script = path.script
					if wait {
						s.WaitReplicas, s.WaitTimeout = 1, testWaitTimeout
					}
					return s
				}
				key, err := keys.Shard("", "wal", "0")
				require.NoError(t, err)
				var pushes []valkeyPush
				push := func(f *writefence.Fence, writer string, epoch uint64) error {
					err := f.Push(ctx, "wal", "0", writer, epoch, fmt.Appendf(nil, "%s at %d", writer, epoch))
					pushes = append(pushes, valkeyPush{writer, epoch, err})
					t.Logf("push by %s at epoch %d: %v", writer, epoch, err)
					return err
				}

				aStore := newStore(primary, wait)
				aStore.WaitTimeout = testAckTimeout
				a := &writefence.Fence{Store: aStore}
				require.NoError(t, push(a, "a", 1))
				if wait {
					assert.Equal(t, rawValue(t, primary, key), rawValue(t, replica, key), "acknowledged by the replica")
				} else {
					waitUntil(t, "the replica has epoch 1", func() bool {
						return rawValue(t, replica, key) == rawValue(t, primary, key)
					})
				}

				relay.hold()
				// No acknowledgement can come now: a short WAIT suffices. The
				// same fence keeps its cached version, so its push writes
				// without reading first. (No call is in flight.)
				aStore.WaitTimeout = testWaitTimeout
				errA := push(a, "a", 2)
				// The same push retried from another connection, as another
				// process of writer a would: it finds its own record on the
				// primary.
				retry := &writefence.Fence{Store: newStore(newDirectClient(t, primaryAddr), wait)}
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
				var lost []valkeyPush
				landed := map[uint64]int{}
				for _, p := range pushes {
					if p.err != nil {
						continue
					}
					landed[p.epoch]++
					if p.epoch > epoch || p.epoch == epoch && p.writer != writer {
						lost = append(lost, p)
					}
				}
				t.Logf("after the failover: epoch %d by %s; lost: %v", epoch, writer, lost)
				if !wait {
					require.NoError(t, errA)
					require.NoError(t, errRetry)
					assert.Equal(t, []valkeyPush{{"a", 2, nil}, {"a", 2, nil}}, lost, "the documented failure: an acknowledged push is lost")
					assert.Equal(t, 3, landed[2], "and a second push at epoch 2 returned nil too")
					return
				}
				require.ErrorIs(t, errA, writefence.ErrOutcomeUnknown)
				assert.NotErrorIs(t, errA, writefence.ErrConflict)
				require.ErrorIs(t, errRetry, writefence.ErrOutcomeUnknown, "a retry reading the record only the primary holds")
				assert.Empty(t, lost, "no push that returned nil is lost")
				assert.Equal(t, 1, landed[2], "one push at epoch 2 returned nil")
			})
		}
	}
}

// TestValkeyWaitRoundTrips: WaitReplicas costs one round trip, the WAIT,
// on every call that reports a write or a read; none on a refusal.
func TestValkeyWaitRoundTrips(t *testing.T) {
	ctx := context.Background()
	primaryAddr := startPrimary(t)
	startReplica(t, newDirectClient(t, primaryAddr), primaryAddr)
	for _, path := range valkeyPaths {
		t.Run(path.name, func(t *testing.T) {
			c := redis.NewClient(&redis.Options{Addr: primaryAddr, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			tap := &valkeyTap{}
			c.AddHook(tap)
			store := writefence.NewValkeyConditionalStore(c)
			store.Script = path.script
			store.WaitReplicas, store.WaitTimeout = 1, testAckTimeout
			key := path.name + "/k"
			_, err := store.PutIfVersion(ctx, path.name+"/warm", []byte("x"), "")
			require.NoError(t, err)
			_, _, _, err = store.GetPrefix(ctx, path.name+"/warm", 1)
			require.NoError(t, err)
			tap.take()

			put := 2
			if path.script {
				put = 1
			}
			var version string
			steps := []struct {
				name string
				want int
				wait bool
				run  func() error
			}{
				{"create", put + 1, true, func() (err error) {
					version, err = store.PutIfVersion(ctx, key, []byte("a"), "")
					return err
				}},
				{"update", put + 1, true, func() (err error) {
					version, err = store.PutIfVersion(ctx, key, []byte("b"), version)
					return err
				}},
				{"stale update", put, false, func() error {
					_, err := store.PutIfVersion(ctx, key, []byte("c"), strings.Repeat("0", 32))
					return valkeyWantConflict(err)
				}},
				{"get", 2, true, func() error {
					_, _, err := store.Get(ctx, key)
					return err
				}},
				{"get prefix", 2, true, func() error {
					_, _, _, err := store.GetPrefix(ctx, key, 1)
					return err
				}},
			}
			for _, s := range steps {
				require.NoError(t, s.run(), s.name)
				trips := tap.take()
				t.Logf("%s %s: %d round trips: %s", path.name, s.name, len(trips), formatValkeyTrips(trips))
				require.Len(t, trips, s.want, "%s: %s", s.name, formatValkeyTrips(trips))
				last := trips[len(trips)-1]
				assert.Equal(t, s.wait, last[0] == "wait", "%s: %s", s.name, formatValkeyTrips(trips))
			}
		})
	}
}
