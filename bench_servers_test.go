//go:build !writefence_nominio && !writefence_nogcs && !writefence_novalkey && !writefence_nosdk

package writefence_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/defaults"
	"github.com/writefence/writefence/internal/fakestore"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/pushbench"
	"github.com/writefence/writefence/internal/testserver"
)

// The benchmarks below run over the real servers (skipped when their
// environment variables are unset) and are meant to be read side by side
// with benchstat; bench/run runs them and prints the comparisons. Sub-
// benchmark names carry size= and impl= so that benchstat can put the
// implementations in columns:
//
//	raw        the adapter's PutIfVersion of the payload, conditioned on the
//	           version the previous write returned: the floor.
//	fenced     Fence.Push by one writer pushing consecutive epochs (steady
//	           state: the fence conditions each write on the version it
//	           last wrote, without reading).
//	cold       Fence.Push by a fresh Fence every time: one read of the
//	           record's header (PrefixReader) and the write.
//	readfirst  the design that reads before every write: a fresh Fence
//	           every time over the store with PrefixReader hidden, so each
//	           push downloads the whole previous record before writing.
//
// roundtrips/op counts the HTTP requests sent, bytes-read/op the bytes of
// the GET response bodies received, both at the transport.

// benchSizes are the payload sizes of the benchmarks.
var benchSizes = []struct {
	name string
	n    int
}{{"1KiB", 1 << 10}, {"16MiB", 16 << 20}}

// benchImpls are the push implementations compared, the floor first.
var benchImpls = []string{"raw", "rawrecord", "fenced", "cold", "readfirst"}

// benchTransport counts a benchmark's HTTP traffic.
type benchTransport struct{ *testserver.Transport }

// traffic returns the requests sent and the GET body bytes read so far.
func (t *benchTransport) traffic() (reqs, read int64) { return t.Requests(), t.GetBytesRead() }

// benchPush runs every implementation at every size over store, whose HTTP
// traffic wire counts.
func benchPush(b *testing.B, store writefence.ConditionalStore, wire *benchTransport) {
	for _, size := range benchSizes {
		payload := benchPayload(size.n)
		for _, impl := range benchImpls {
			b.Run("size="+size.name+"/impl="+impl, func(b *testing.B) {
				benchPushImpl(b, store, wire, impl, payload)
			})
		}
	}
}

func benchPushImpl(b *testing.B, store writefence.ConditionalStore, wire *benchTransport, impl string, payload []byte) {
	ctx := context.Background()
	fence, prefix := pushbench.Fenced(b, store, payload)
	epoch := uint64(1)
	rawKey := prefix + "raw"
	version, err := store.PutIfVersion(ctx, rawKey, payload, "")
	if err != nil {
		b.Fatal(err)
	}
	// rawrecord writes as many bytes as the fenced record holds (the
	// payload and a header), so that it and fenced differ only in the
	// fence's own work.
	record := append(append([]byte(nil), payload...), make([]byte, recordOverhead(b, store, prefix))...)
	// readfirst reads through a store that hides every optional
	// capability, so a Fence over it reads whole records.
	hidden := fakestore.New(store, fakestore.Options{Hide: fakestore.All})

	b.SetBytes(int64(len(payload)))
	b.ReportAllocs()
	reqs, read := wire.traffic()
	for b.Loop() {
		epoch++
		switch impl {
		case "raw":
			version, err = store.PutIfVersion(ctx, rawKey, payload, version)
		case "rawrecord":
			version, err = store.PutIfVersion(ctx, rawKey, record, version)
		case "fenced":
			err = fence.Push(ctx, "wal", "0", "w", epoch, payload)
		case "cold":
			err = (&writefence.Fence{Store: store, Prefix: prefix}).Push(ctx, "wal", "0", "w", epoch, payload)
		case "readfirst":
			err = (&writefence.Fence{Store: hidden, Prefix: prefix}).Push(ctx, "wal", "0", "w", epoch, payload)
		default:
			b.Fatalf("unknown impl %q", impl)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	n := float64(b.N)
	reqsEnd, readEnd := wire.traffic()
	b.ReportMetric(float64(reqsEnd-reqs)/n, "roundtrips/op")
	b.ReportMetric(float64(readEnd-read)/n, "bytes-read/op")
}

// recordOverhead returns how many bytes a record under prefix holds beyond
// its payload: the size of the header of the record just pushed.
func recordOverhead(b *testing.B, store writefence.ConditionalStore, prefix string) int {
	data, _, err := store.Get(context.Background(), prefix+"s/wal/0")
	if err != nil {
		b.Fatal(err)
	}
	_, _, payload, err := (&writefence.Fence{Store: store, Prefix: prefix}).Latest(context.Background(), "wal", "0")
	if err != nil {
		b.Fatal(err)
	}
	return len(data) - len(payload)
}

// BenchmarkS3Push compares the implementations over MinIO.
func BenchmarkS3Push(b *testing.B) {
	store, wire := countedMinioStore(b)
	benchPush(b, store, wire)
}

// BenchmarkGCSPush compares the implementations over the GCS emulator.
func BenchmarkGCSPush(b *testing.B) {
	store, wire := countedGCSStore(b)
	benchPush(b, store, wire)
}

// countedMinioStore returns a store over a bucket of its own on the MinIO
// server, removed with its objects when the test or benchmark ends, and the
// transport that counts its traffic.
func countedMinioStore(b testing.TB) (*writefence.MinioStore, *benchTransport) {
	wire := &benchTransport{testserver.NewTransport(b)}
	c := testserver.S3Server(b).Client(b, wire)
	return writefence.NewMinioStore(c, testserver.MinioBucket(b, c)), wire
}

// countedGCSStore returns a store over a bucket of its own on the GCS
// emulator, removed with its objects when the test or benchmark ends, and
// the transport that counts its traffic.
func countedGCSStore(b testing.TB) (*writefence.GCSStore, *benchTransport) {
	wire := &benchTransport{testserver.NewTransport(b)}
	c := testserver.GCSClient(b, testserver.GCSEndpoint(b), wire)
	return writefence.NewGCSStore(c, testserver.GCSBucket(b, c)), wire
}

// benchTrips is a go-redis hook counting round trips, one per command or
// pipeline sent (the client has retries off).
type benchTrips struct{ n atomic.Int64 }

func (h *benchTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *benchTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}

func (h *benchTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// benchValkey returns a client of the Valkey server with a round-trip
// counter, closed when the benchmark ends.
func benchValkey(b testing.TB) (*redis.Client, *benchTrips) {
	client := testserver.ValkeyClient(b, testserver.ValkeyAddr(b), "")
	trips := &benchTrips{}
	client.AddHook(trips)
	return client, trips
}

// benchValkeyKey returns a store over client, on the script path or the
// WATCH path, and a key of the benchmark's own, deleted when it ends.
func benchValkeyKey(b *testing.B, client *redis.Client, script bool) (*writefence.ValkeyStore, string) {
	key := testserver.UniqueName(b)
	b.Cleanup(func() { _ = client.Del(context.Background(), key).Err() })
	store := writefence.NewValkeyStore(client)
	store.Script = script
	return store, key
}

// BenchmarkValkeyPut compares, for one value of each size, a plain SET
// (the floor), PutIfVersion on the WATCH/MULTI path and PutIfVersion with
// Script set, each conditioned on the version the previous write returned.
// Both PutIfVersion paths check the head of the value they overwrite (its
// first 4000 bytes and its length): the WATCH path reads it back, the
// script checks it on the server, and neither hashes or moves the rest.
// Besides the client's time it reports what the server spent, from INFO
// (valkeyServerWork), and the bytes read from the server.
func BenchmarkValkeyPut(b *testing.B) {
	client, trips := benchValkey(b)
	wire := &valkeyByteCounter{}
	client.AddHook(wire)
	for _, size := range benchSizes {
		value := benchPayload(size.n)
		for _, impl := range []string{"set", "watch", "script"} {
			b.Run("size="+size.name+"/impl="+impl, func(b *testing.B) {
				store, key := benchValkeyKey(b, client, impl == "script")
				benchValkeyPut(b, client, client, store, key, impl, value, trips, wire)
			})
		}
	}
}

// benchValkeyPut measures impl ("set", "watch" or "script") writing value
// at key over store, whose client is client; server answers INFO for the
// server that holds key. trips and wire, when set, count client's round
// trips and the bytes it read. Besides the mean (ns/op) it reports the
// median of single writes (median-ns/op, of the first 65,536), which a
// few writes delayed by other work on the machine do not move.
func benchValkeyPut(b *testing.B, client redis.UniversalClient, server *redis.Client, store *writefence.ValkeyStore, key, impl string, value []byte, trips *benchTrips, wire *valkeyByteCounter) {
	ctx := context.Background()
	// The first write also checks the server and loads the script.
	version, err := store.PutIfVersion(ctx, key, value, "")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(value)))
	b.ReportAllocs()
	work := valkeyServerWork(b, server)
	var trips0, read0 int64
	if trips != nil {
		trips0, read0 = trips.n.Load(), wire.n.Load()
	}
	took := make([]time.Duration, 0, 1<<16) // made before the loop: no allocation of it is counted
	for b.Loop() {
		start := time.Now()
		if impl == "set" {
			err = client.Set(ctx, key, value, 0).Err()
		} else {
			version, err = store.PutIfVersion(ctx, key, value, version)
		}
		if err != nil {
			b.Fatal(err)
		}
		if len(took) < cap(took) {
			took = append(took, time.Since(start))
		}
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2]), "median-ns/op")
	n := float64(b.N)
	if trips != nil {
		b.ReportMetric(float64(trips.n.Load()-trips0)/n, "roundtrips/op")
		b.ReportMetric(float64(wire.n.Load()-read0)/n, "bytes-read/op")
	}
	cmds := map[string][]string{
		"set": {"set"},
		// EXEC's time includes the SET it runs.
		"watch": {"watch", "strlen", "exists", "getrange", "multi", "exec"},
		// EVALSHA's time includes the commands the script calls, the SET
		// of a value sent in its call among them.
		"script": {"evalsha", "eval"},
	}[impl]
	if impl == "script" && writefence.ValkeyScriptStages(len(value)) {
		cmds = append(cmds, "set") // the staging SET, a command of its own
	}
	usec, cpu, each := work(cmds)
	b.ReportMetric(usec/n, "server-us/op")
	b.ReportMetric(cpu/n, "server-cpu-us/op")
	names := slices.Sorted(maps.Keys(each))
	line := make([]string, 0, len(names))
	for _, name := range names {
		if each[name] > 0 {
			line = append(line, fmt.Sprintf("%s %.2f", name, each[name]/n))
		}
	}
	b.Logf("%d writes; server µs per write by command (INFO commandstats; a script's and EXEC's commands also inside theirs): %s", b.N, strings.Join(line, ", "))
}

// valkeyServerWork reads the server's counters now and returns what reads
// them again and says what the server did in between: the microseconds
// INFO commandstats gives the commands named (their execution alone; a
// command called from a script or run by EXEC counts inside the caller
// too, so only the commands a client sends are named), the microseconds
// of CPU its main thread spent (INFO cpu: reading, parsing and replying
// included), and the microseconds of every command.
func valkeyServerWork(b *testing.B, c *redis.Client) func(cmds []string) (usec, cpu float64, each map[string]float64) {
	read := func() (map[string]float64, float64) {
		info, err := c.Info(context.Background(), "commandstats", "cpu").Result()
		if err != nil {
			b.Fatal(err)
		}
		usec, cpu := map[string]float64{}, 0.0
		for line := range strings.Lines(info) {
			name, fields, ok := strings.Cut(strings.TrimSpace(line), ":")
			switch {
			case !ok:
			case strings.HasPrefix(name, "cmdstat_"):
				for f := range strings.SplitSeq(fields, ",") {
					if k, v, _ := strings.Cut(f, "="); k == "usec" {
						n, _ := strconv.ParseFloat(v, 64)
						usec[strings.TrimPrefix(name, "cmdstat_")] = n
					}
				}
			case name == "used_cpu_sys_main_thread" || name == "used_cpu_user_main_thread":
				n, _ := strconv.ParseFloat(fields, 64)
				cpu += n * 1e6
			}
		}
		return usec, cpu
	}
	usec0, cpu0 := read()
	return func(cmds []string) (float64, float64, map[string]float64) {
		usec1, cpu1 := read()
		var total float64
		for _, cmd := range cmds {
			total += usec1[cmd] - usec0[cmd]
		}
		each := map[string]float64{}
		for cmd, u := range usec1 {
			if !strings.HasPrefix(cmd, "info") && !strings.HasPrefix(cmd, "config") {
				each[cmd] = u - usec0[cmd]
			}
		}
		return total, cpu1 - cpu0, each
	}
}

// BenchmarkValkeyScriptFloor measures, at 1 KiB, what a write through a
// script costs before any check: a plain SET (set), SET and PING in one
// pipeline (set-ping), a staging SET and a script that returns 1
// (stage-noop) or moves the staged value onto the key as the put script
// does (stage-move: RENAME, PERSIST), and a script that SETs a value sent
// in its call (call-set). BenchmarkValkeyPut's script path is one of the
// last two plus the check of the value it replaces.
func BenchmarkValkeyScriptFloor(b *testing.B) {
	client, _ := benchValkey(b)
	ctx := context.Background()
	value := benchPayload(1 << 10)
	noop := redis.NewScript(`return 1`)
	move := redis.NewScript(`redis.call('RENAME', KEYS[2], KEYS[1]) redis.call('PERSIST', KEYS[1]) return 1`)
	set := redis.NewScript(`redis.call('SET', KEYS[1], ARGV[1]) return 1`)
	for _, s := range []*redis.Script{noop, move, set} {
		if err := s.Load(ctx, client).Err(); err != nil {
			b.Fatal(err)
		}
	}
	for _, impl := range []string{"set", "set-ping", "stage-noop", "stage-move", "call-set"} {
		b.Run("impl="+impl, func(b *testing.B) {
			key := testserver.UniqueName(b)
			staged := key + "/staged"
			b.Cleanup(func() { _ = client.Del(context.Background(), key, staged).Err() })
			write := func() error {
				switch impl {
				case "set":
					return client.Set(ctx, key, value, 0).Err()
				case "call-set":
					return set.EvalSha(ctx, client, []string{key}, value).Err()
				}
				p := client.Pipeline()
				if impl == "set-ping" {
					p.Set(ctx, key, value, 0)
					p.Ping(ctx)
				} else {
					p.Set(ctx, staged, value, time.Minute)
					s := map[string]*redis.Script{"stage-noop": noop, "stage-move": move}[impl]
					s.EvalSha(ctx, p, []string{key, staged})
				}
				_, err := p.Exec(ctx)
				return err
			}
			b.SetBytes(int64(len(value)))
			b.ReportAllocs()
			work := valkeyServerWork(b, client)
			took := make([]time.Duration, 0, 1<<16)
			for b.Loop() {
				start := time.Now()
				if err := write(); err != nil {
					b.Fatal(err)
				}
				if len(took) < cap(took) {
					took = append(took, time.Since(start))
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2]), "median-ns/op")
			_, cpu, _ := work(nil)
			b.ReportMetric(cpu/float64(b.N), "server-cpu-us/op")
		})
	}
}

// BenchmarkValkeyPutWait measures what WaitReplicas=1 costs a write: the
// two write paths at 1 KiB with and without it (impl=watch-wait,
// script-wait), on a primary with one replica of the benchmark's own and
// on the cluster .ci/run starts (each primary with one replica), where
// the write and its WAIT go to the primary of the key's slot.
func BenchmarkValkeyPutWait(b *testing.B) {
	value := benchPayload(1 << 10)
	for _, target := range []string{"replica", "cluster"} {
		b.Run("target="+target, func(b *testing.B) {
			var client redis.UniversalClient
			var key string
			var server func(key string) *redis.Client
			switch target {
			case "replica":
				addr, primary := startPrimary(b)
				startReplica(b, primary, addr)
				client, key = primary, testserver.UniqueName(b)
				server = func(string) *redis.Client { return primary }
			case "cluster":
				addrs := testserver.ValkeyClusterAddrs(b)
				cc := testserver.ValkeyClusterClient(b, addrs)
				client, key = cc, testserver.ValkeyClusterPrefix(b, addrs, false)+"k"
				server = func(key string) *redis.Client {
					m, err := cc.MasterForKey(context.Background(), key)
					if err != nil {
						b.Fatal(err)
					}
					return m
				}
			}
			for _, impl := range []string{"watch", "watch-wait", "script", "script-wait"} {
				b.Run("impl="+impl, func(b *testing.B) {
					store := writefence.NewValkeyStore(client)
					store.Script = strings.HasPrefix(impl, "script")
					if strings.HasSuffix(impl, "-wait") {
						store.WaitReplicas, store.WaitTimeout = 1, 10*time.Second
					}
					k := key + "/" + impl
					b.Cleanup(func() { _ = client.Del(context.Background(), k).Err() })
					benchValkeyPut(b, client, server(k), store, k, strings.TrimSuffix(impl, "-wait"), value, nil, nil)
				})
			}
		})
	}
}

// BenchmarkValkeyThroughput: 64 writers, each with a Fence of its own,
// push 1 KiB payloads to 1,000 shards (writer w owns shards w, w+64, ...,
// and pushes them in turn, so every push after the first of a shard is a
// steady push on a remembered version), against one server and against a
// cluster of three primaries, the shards spread over their slots. Without
// waiting: one server without a replica (target=standalone), three
// primaries without replicas of the benchmark's own (target=primaries),
// and the cluster .ci/run starts, whose primaries each have a replica to
// feed (target=cluster). With wait=1 (WaitReplicas=1): a primary with one
// replica (target=standalone) and the cluster .ci/run starts. It reports
// pushes/s; ns/op is the wall time per push of all the writers together,
// and server-cpu-us/op the CPU time all the servers' main threads spent
// per push (replicas included).
func BenchmarkValkeyThroughput(b *testing.B) {
	const writers, shards = 64, 1000
	for _, wait := range []int{0, 1} {
		targets := []string{"standalone", "primaries", "cluster"}
		if wait > 0 {
			targets = []string{"standalone", "cluster"}
		}
		for _, target := range targets {
			for _, script := range []bool{false, true} {
				name := fmt.Sprintf("wait=%d/target=%s/path=%s", wait, target, map[bool]string{false: "watch", true: "script"}[script])
				b.Run(name, func(b *testing.B) {
					var client redis.UniversalClient
					var prefix string
					var servers []*redis.Client // every server's main thread, replicas included
					newCluster := func(addrs []string) {
						cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: writers, MaxRetries: -1})
						b.Cleanup(func() { _ = cc.Close() })
						client, prefix = cc, testserver.ValkeyClusterPrefix(b, addrs, false)
						for _, a := range addrs {
							servers = append(servers, testserver.ValkeyClient(b, a, ""))
						}
					}
					switch {
					case target == "cluster":
						newCluster(testserver.ValkeyClusterAddrs(b))
					case target == "primaries":
						nodes := []testserver.ValkeyNode{testserver.StartValkeyNode(b), testserver.StartValkeyNode(b), testserver.StartValkeyNode(b)}
						testserver.FormValkeyCluster(b, nodes, nil)
						newCluster([]string{nodes[0].Addr, nodes[1].Addr, nodes[2].Addr})
					case wait > 0:
						addr, primary := startPrimary(b)
						replica := startReplica(b, primary, addr)
						c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: writers, MaxRetries: -1})
						b.Cleanup(func() { _ = c.Close() })
						client, prefix, servers = c, testserver.UniqueName(b)+"/", []*redis.Client{primary, replica}
					default:
						addr := testserver.ValkeyAddr(b)
						c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: writers, MaxRetries: -1})
						b.Cleanup(func() { _ = c.Close() })
						client, prefix, servers = c, testserver.ValkeyPrefix(b, addr), []*redis.Client{testserver.ValkeyClient(b, addr, "")}
					}
					store := writefence.NewValkeyStore(client)
					store.Script = script
					if wait > 0 {
						store.WaitReplicas, store.WaitTimeout = wait, 10*time.Second
					}
					benchThroughput(b, store, prefix, writers, shards, servers)
				})
			}
		}
	}
}

// benchThroughput runs writers over shards shards of store under prefix,
// b.N pushes in all, after a first push of every shard; servers are the
// servers whose CPU it reports.
func benchThroughput(b *testing.B, store writefence.ConditionalStore, prefix string, writers, shards int, servers []*redis.Client) {
	ctx := context.Background()
	payload := benchPayload(1 << 10)
	type writer struct {
		fence  *writefence.Fence
		shards []string
		epoch  uint64
	}
	ws := make([]*writer, writers)
	for w := range ws {
		ws[w] = &writer{fence: &writefence.Fence{Store: store, Prefix: prefix}, epoch: 1}
		for s := w; s < shards; s += writers {
			ws[w].shards = append(ws[w].shards, strconv.Itoa(s))
		}
	}
	run := func(n int64, epochs bool) {
		var next atomic.Int64
		var wg sync.WaitGroup
		failed := make(chan error, 1)
		for _, w := range ws {
			wg.Go(func() {
				for i := 0; next.Add(1) <= n; i++ {
					shard := w.shards[i%len(w.shards)]
					if i%len(w.shards) == 0 && epochs {
						w.epoch++
					}
					if err := w.fence.Push(ctx, "wal", shard, "w", w.epoch, payload); err != nil {
						select {
						case failed <- err:
						default:
						}
						return
					}
				}
			})
		}
		wg.Wait()
		select {
		case err := <-failed:
			b.Fatal(err)
		default:
		}
	}
	// Every shard once at epoch 1, each writer through its own shards.
	for _, w := range ws {
		for _, shard := range w.shards {
			if err := w.fence.Push(ctx, "wal", shard, "w", 1, payload); err != nil {
				b.Fatal(err)
			}
		}
	}
	works := make([]func([]string) (float64, float64, map[string]float64), len(servers))
	for i, c := range servers {
		works[i] = valkeyServerWork(b, c)
	}
	b.ResetTimer()
	start := time.Now()
	run(int64(b.N), true)
	elapsed := time.Since(start)
	b.StopTimer()
	var cpu float64
	for _, work := range works {
		_, c, _ := work(nil)
		cpu += c
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "pushes/s")
	b.ReportMetric(cpu/float64(b.N), "server-cpu-us/op")
}

// BenchmarkValkeyRead compares the reads a Fence makes of a record: Get
// (the whole value, checked on the client), GetPrefix of one header's worth
// without Script (which reads and checks the whole value, as Get) and with
// Script (checked on the server, only the prefix sent back).
// bytes-read/op counts the bytes received from the server.
func BenchmarkValkeyRead(b *testing.B) {
	client, trips := benchValkey(b)
	wire := &valkeyByteCounter{}
	client.AddHook(wire)
	for _, size := range benchSizes {
		for _, impl := range []string{"get", "prefix-watch", "prefix-script"} {
			b.Run("size="+size.name+"/impl="+impl, func(b *testing.B) {
				ctx := context.Background()
				store, key := benchValkeyKey(b, client, impl == "prefix-script")
				if _, err := store.PutIfVersion(ctx, key, benchPayload(size.n), ""); err != nil {
					b.Fatal(err)
				}
				if _, _, _, err := store.GetPrefix(ctx, key, defaults.MaxHeaderSize); err != nil {
					b.Fatal(err) // loads the script
				}
				b.ReportAllocs()
				start, read := trips.n.Load(), wire.n.Load()
				for b.Loop() {
					var err error
					if impl == "get" {
						_, _, err = store.Get(ctx, key)
					} else {
						_, _, _, err = store.GetPrefix(ctx, key, defaults.MaxHeaderSize)
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(trips.n.Load()-start)/float64(b.N), "roundtrips/op")
				b.ReportMetric(float64(wire.n.Load()-read)/float64(b.N), "bytes-read/op")
			})
		}
	}
}

// BenchmarkContention races 32 writers on one shard. In every round each
// writer, with a Fence of its own kept across rounds, pushes the next epoch
// of a shared ascending counter, all released at once. A push lands or is
// refused as stale; any other outcome (retries exhausted) counts as gaveup.
// Reported per round: landed pushes, wasted store calls per landed push
// (every call but the landing write), and the most conflicts any one
// writer's push met (retries/op for the slowest writer of the round,
// averaged; max-retries is the worst round).
func BenchmarkContention(b *testing.B) {
	const writers = 32
	b.Run(fmt.Sprintf("store=mem/writers=%d", writers), func(b *testing.B) {
		benchContention(b, &writefence.MemStore{}, writers, nil)
	})
	b.Run(fmt.Sprintf("store=valkey/writers=%d", writers), func(b *testing.B) {
		client, trips := benchValkey(b)
		store := writefence.NewValkeyStore(client)
		benchContention(b, store, writers, trips)
	})
}

func benchContention(b *testing.B, store writefence.ConditionalStore, writers int, trips *benchTrips) {
	ctx := context.Background()
	prefix := testserver.UniqueName(b) + "/"
	if d, ok := store.(writefence.Deleter); ok {
		b.Cleanup(func() {
			key, err := keys.Shard(prefix, "wal", "0")
			if err == nil {
				_ = d.Delete(context.Background(), key)
			}
		})
	}
	counters := make([]fakestore.Store, writers)
	conflicts := make([]atomic.Int64, writers) // the writes the store refused as conflicts, by writer
	fences := make([]*writefence.Fence, writers)
	for i := range fences {
		counters[i] = fakestore.New(store, fakestore.Options{Hide: fakestore.All, After: func(_ context.Context, _ fakestore.Call, err error) error {
			if errors.Is(err, writefence.ErrConflict) {
				conflicts[i].Add(1)
			}
			return err
		}})
		fences[i] = &writefence.Fence{Store: counters[i], Prefix: prefix}
	}
	var (
		epoch                    atomic.Uint64
		landed, stale, gaveUp    atomic.Int64
		slowestSum, slowestWorst int64
	)
	trips0 := int64(0)
	if trips != nil {
		trips0 = trips.n.Load()
	}
	for b.Loop() {
		before := make([]int64, writers)
		for i := range conflicts {
			before[i] = conflicts[i].Load()
		}
		var start, done sync.WaitGroup
		start.Add(1)
		for i, f := range fences {
			done.Go(func() {
				start.Wait()
				err := f.Push(ctx, "wal", "0", fmt.Sprintf("w%d", i), epoch.Add(1), []byte("segment"))
				switch {
				case err == nil:
					landed.Add(1)
				case errors.Is(err, writefence.ErrStaleEpoch):
					stale.Add(1)
				default:
					gaveUp.Add(1)
				}
			})
		}
		start.Done()
		done.Wait()
		slowest := int64(0)
		for i := range conflicts {
			slowest = max(slowest, conflicts[i].Load()-before[i])
		}
		slowestSum += slowest
		slowestWorst = max(slowestWorst, slowest)
	}
	calls := int64(0)
	for _, c := range counters {
		calls += roundTrips(c)
	}
	n := float64(b.N)
	l := float64(landed.Load())
	b.ReportMetric(l/n, "landed/op")
	b.ReportMetric(float64(stale.Load())/n, "stale/op")
	b.ReportMetric(float64(gaveUp.Load())/n, "gaveup/op")
	b.ReportMetric((float64(calls)-l)/l, "wasted-calls/landed")
	if trips != nil {
		b.ReportMetric(float64(trips.n.Load()-trips0)/l, "wire-roundtrips/landed")
	}
	b.ReportMetric(float64(slowestSum)/n, "slowest-retries/op")
	b.ReportMetric(float64(slowestWorst), "max-retries")
}

// BenchmarkPushMemory pushes 64 MiB payloads, for the bytes a push
// allocates beyond the raw conditional write (-benchmem's B/op): an upper
// bound on how much the heap grows while it runs. The directory store
// sends nothing over a network, so its roundtrips/op and bytes-read/op are
// zero. Run it with a few iterations:
//
//	go test -run '^$' -bench '^BenchmarkPushMemory$' -benchmem -benchtime 5x -count 5 .
func BenchmarkPushMemory(b *testing.B) {
	payload := benchPayload(64 << 20)
	stores := []struct {
		name string
		open func(b *testing.B) (writefence.ConditionalStore, *benchTransport)
	}{
		{"valkey", valkeyPushMemoryStore},
		{"s3", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) { return countedMinioStore(b) }},
		{"gcs", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) { return countedGCSStore(b) }},
		{"dir", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) {
			return newDirStore(b, b.TempDir()), &benchTransport{testserver.NewTransport(b)}
		}},
	}
	for _, s := range stores {
		for _, impl := range []string{"raw", "fenced", "cold"} {
			b.Run("store="+s.name+"/size=64MiB/impl="+impl, func(b *testing.B) {
				store, wire := s.open(b)
				benchPushImpl(b, store, wire, impl, payload)
			})
		}
	}
}

// BenchmarkBlob streams a 1 GiB blob to MinIO in 16 MiB parts: Fence.PutBlob
// (impl=fenced: the adapter's CreateBlob, If-None-Match on the upload, the
// CRC-32C the Fence takes as the bytes go by, the HEAD that reads the
// blob's info) against minio-go's own PutObject of the same bytes, of
// unknown size with the same part size (impl=raw), and the same with
// DisableContentSha256 (impl=rawunsigned: each part sent whole as
// UNSIGNED-PAYLOAD, where over plain HTTP minio-go otherwise signs it in
// 64 KiB chunks, the streaming signature). MB/s is the blob's size
// over the time of one upload. peak-heap-MiB is the largest growth of the
// heap's objects seen during an upload, sampled every millisecond: what
// the upload holds and the garbage it made that the GC has not yet freed
// (with GOGC=100 a heap is let grow to twice what was live at the last
// GC); peak-live-MiB the largest growth of what a GC found live, which is
// what the upload holds. Each upload's
// object is deleted, off the clock. It needs the S3 server (.ci/run's
// environment) and is not run by bench/run or CI; run the test binary
// with a count of 1 a few times over, so that the implementations
// alternate (BENCHMARKS.md, "Streams"):
//
//	go test -c -o blob.test .
//	for i in $(seq 8); do ./blob.test -test.run '^$' -test.bench '^BenchmarkBlob$' -test.benchtime 1x -test.count 1; done
func BenchmarkBlob(b *testing.B) {
	const size, part = 1 << 30, 16 << 20
	c := testserver.S3Server(b).Client(b, nil)
	bucket := testserver.MinioBucket(b, c)
	store := writefence.NewMinioStore(c, bucket)
	store.BlobPartSize = part
	for _, impl := range []string{"raw", "rawunsigned", "fenced"} {
		b.Run("store=s3/size=1GiB/impl="+impl, func(b *testing.B) {
			ctx := context.Background()
			prefix := testserver.UniqueName(b) + "/"
			fence := &writefence.Fence{Store: store, Prefix: prefix}
			var grewObjects, grewLive float64
			for i := 0; b.Loop(); i++ {
				runtime.GC()
				base := readHeap()
				stop := heapPeak()
				key := fmt.Sprintf("%sraw-%d", prefix, i)
				switch impl {
				case "raw", "rawunsigned":
					_, err := c.PutObject(ctx, bucket, key, newPattern(size, byte(i)), -1,
						minio.PutObjectOptions{PartSize: part, ContentType: "application/octet-stream", DisableContentSha256: impl == "rawunsigned"})
					if err != nil {
						b.Fatal(err)
					}
				case "fenced":
					ref, err := fence.PutBlob(ctx, "wal", "0", "w", uint64(i+1), newPattern(size, byte(i)))
					if err != nil {
						b.Fatal(err)
					}
					if key, err = keys.Blob(prefix, "wal", "0", ref.Name); err != nil {
						b.Fatal(err)
					}
				}
				objects, live := stop().growth(base)
				grewObjects, grewLive = max(grewObjects, objects), max(grewLive, live)
				b.StopTimer()
				if err := c.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(size)*float64(b.N)/b.Elapsed().Seconds()/1e6, "MB/s")
			b.ReportMetric(grewObjects, "peak-heap-MiB")
			b.ReportMetric(grewLive, "peak-live-MiB")
		})
	}
}

// benchBlobStores are the stores the stream benchmarks run over, each
// with the transport that counts its traffic (none for the local ones).
var benchBlobStores = []struct {
	name string
	open func(b *testing.B) (writefence.ConditionalStore, *benchTransport)
}{
	{"mem", func(*testing.B) (writefence.ConditionalStore, *benchTransport) { return &writefence.MemStore{}, nil }},
	{"dir", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) {
		return newDirStore(b, b.TempDir()), nil
	}},
	{"s3", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) { return countedMinioStore(b) }},
	{"gcs", func(b *testing.B) (writefence.ConditionalStore, *benchTransport) { return countedGCSStore(b) }},
}

// requests returns the requests wire sent so far; none for a local store.
func (t *benchTransport) requests() int64 {
	if t == nil {
		return 0
	}
	return t.Requests()
}

// BenchmarkCommitBlobs: a Commit whose manifest newly references n blobs,
// for n = 1 and 1,000 (impl=commit). Before each commit, untimed, its
// Fence puts n blobs at the commit's epoch (16 uploads at once); the
// commit replaces the manifest's references with them, as a shipper
// commits what it just put, over the record its Fence wrote: it lists
// their epoch and writes once, with no read of the record on S3 and GCS
// (asserted in testCommitManyBlobs); the record of 1,000 references is
// read first elsewhere (see Fence.Update).
// roundtrips/op counts the commit's requests alone, stats/op its
// StatBlobs. impl=list is not a commit: one ListBlobs of the n blobs of
// the epoch put last, what the check costs alone.
func BenchmarkCommitBlobs(b *testing.B) {
	for _, s := range benchBlobStores {
		for _, n := range []int{1, 1000} {
			b.Run(fmt.Sprintf("store=%s/blobs=%d", s.name, n), func(b *testing.B) {
				benchCommitBlobs(b, s.open, n)
			})
		}
	}
}

func benchCommitBlobs(b *testing.B, open func(*testing.B) (writefence.ConditionalStore, *benchTransport), n int) {
	ctx := context.Background()
	store, wire := open(b)
	blobs := fakestore.New(store, fakestore.Options{})
	prefix := testserver.UniqueName(b) + "/"
	f := &writefence.Fence{Store: store, Blobs: blobs, Prefix: prefix}
	space, err := keys.Blobs(prefix, "wal", "0")
	if err != nil {
		b.Fatal(err)
	}
	epoch := uint64(0)
	put := func() []writefence.BlobRef {
		epoch++
		refs := make([]writefence.BlobRef, n)
		var g errgroup.Group
		g.SetLimit(16)
		for j := range refs {
			g.Go(func() (err error) {
				refs[j], err = f.PutBlob(ctx, "wal", "0", "w", epoch, strings.NewReader(fmt.Sprintf("segment %d of epoch %d", j, epoch)))
				return err
			})
		}
		if err := g.Wait(); err != nil {
			b.Fatal(err)
		}
		return refs
	}
	put()
	for _, impl := range []string{"commit", "list"} {
		b.Run("impl="+impl, func(b *testing.B) {
			b.ReportAllocs()
			var reqs int64
			stats := blobs.Calls(fakestore.StatBlob)
			for b.Loop() {
				switch impl {
				case "commit":
					b.StopTimer()
					refs := put()
					b.StartTimer()
					before := wire.requests()
					err = f.Commit(ctx, "wal", "0", "w", epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
						return writefence.Manifest{Payload: m.Payload, Blobs: refs}, nil
					})
					reqs += wire.requests() - before
				case "list":
					listed := 0
					before := wire.requests()
					err = store.(writefence.BlobStore).ListBlobs(ctx, fmt.Sprintf("%s%016x-", space, epoch), func(writefence.BlobInfo) error {
						listed++
						return nil
					})
					reqs += wire.requests() - before
					if err == nil && listed != n {
						err = fmt.Errorf("listed %d blobs, not %d", listed, n)
					}
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			nOps := float64(b.N)
			b.ReportMetric(float64(reqs)/nOps, "roundtrips/op")
			b.ReportMetric(float64(blobs.Calls(fakestore.StatBlob)-stats)/nOps, "stats/op")
		})
	}
}

// BenchmarkStream ships a WAL to one shard in 64 KiB segments, 16 a op
// (1 MiB), over MinIO and the GCS emulator, four ways:
//
//	push      Fence.Push of each segment to the shard's record, by the
//	          writer that pushed last (steady state: the write alone)
//	blob1     each segment a blob (PutBlob), then a Commit of a manifest
//	          that adds it
//	blob16    the 16 blobs put one after another, then one Commit that
//	          adds them all
//	blob16x4  the 16 blobs put by 4 uploaders at once, then one Commit
//
// A Commit is made at the next epoch and reads the record first (it has no
// version cache); the manifest keeps the last 64 segments (a WAL truncated
// at snapshots), and those it drops are left to Collect, which does not
// run here. segments/s is the segments shipped per second, roundtrips/
// segment the requests sent per segment, record-writes/segment the
// conditional writes of the record per segment (testserver.Traced): the
// rate one record's writes cap, 1 for a push and 1/16 for a batched
// commit.
func BenchmarkStream(b *testing.B) {
	const segment, batch, window = 64 << 10, 16, 64
	payload := benchPayload(segment)
	for _, s := range benchBlobStores[2:] {
		for _, impl := range []string{"push", "blob1", "blob16", "blob16x4"} {
			b.Run("store="+s.name+"/impl="+impl, func(b *testing.B) {
				store, wire := s.open(b)
				ctx, trace := testserver.Traced(context.Background())
				f := &writefence.Fence{Store: store, Prefix: testserver.UniqueName(b) + "/"}
				epoch := uint64(1)
				if err := f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
					b.Fatal(err)
				}
				put := func() (writefence.BlobRef, error) {
					return f.PutBlob(ctx, "wal", "0", "w", epoch, bytes.NewReader(payload))
				}
				commit := func(refs ...writefence.BlobRef) error {
					return f.Commit(ctx, "wal", "0", "w", epoch, func(m writefence.Manifest) (writefence.Manifest, error) {
						all := slices.Concat(m.Blobs, refs)
						return writefence.Manifest{Blobs: all[max(0, len(all)-window):]}, nil
					})
				}
				b.SetBytes(batch * segment)
				b.ReportAllocs()
				reqs, writes := wire.requests(), trace.Writes()
				for b.Loop() {
					var err error
					switch impl {
					case "push":
						for range batch {
							epoch++
							if err = f.Push(ctx, "wal", "0", "w", epoch, payload); err != nil {
								break
							}
						}
					case "blob1":
						for range batch {
							epoch++
							var ref writefence.BlobRef
							if ref, err = put(); err == nil {
								err = commit(ref)
							}
							if err != nil {
								break
							}
						}
					case "blob16", "blob16x4":
						epoch++
						refs := make([]writefence.BlobRef, batch)
						errs := make([]error, batch)
						uploaders := 1
						if impl == "blob16x4" {
							uploaders = 4
						}
						var wg sync.WaitGroup
						for u := range uploaders {
							wg.Go(func() {
								for i := u; i < batch; i += uploaders {
									refs[i], errs[i] = put()
								}
							})
						}
						wg.Wait()
						if err = errors.Join(errs...); err == nil {
							err = commit(refs...)
						}
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				segments := float64(b.N * batch)
				b.ReportMetric(segments/b.Elapsed().Seconds(), "segments/s")
				b.ReportMetric(float64(wire.requests()-reqs)/segments, "roundtrips/segment")
				b.ReportMetric(float64(trace.Writes()-writes)/segments, "record-writes/segment")
			})
		}
	}
}

// valkeyPushMemoryStore opens the Valkey store of BenchmarkPushMemory on a
// server of its own, which goes, when the benchmark ends, with the 64 MiB
// values it leaves behind. The transport it returns counts HTTP, which
// Valkey does not speak: roundtrips/op and bytes-read/op read 0 for it
// (BenchmarkValkeyPut and BenchmarkValkeyRead count Valkey's).
func valkeyPushMemoryStore(b *testing.B) (writefence.ConditionalStore, *benchTransport) {
	c := testserver.ValkeyClient(b, testserver.StartValkey(b, ""), "")
	return writefence.NewValkeyStore(c), &benchTransport{testserver.NewTransport(b)}
}

// BenchmarkShipper ships a WAL as a user of the package writes it, against
// raw uploads of the same segments, side by side, on MinIO and the GCS
// emulator: segments of 64 KiB and 4 MiB, uploaded by 1, 4 or 16
// uploaders at once.
//
//	fenced  a Lease held on the shard (Hold); each batch of 16 segments
//	        takes the next epoch of the lease, each segment goes up with
//	        Fence.PutBlob at that epoch, and once the 16 are up a
//	        committer adds them to the manifest with one Fence.Commit at
//	        that epoch (the manifest keeps the last 64 segments), while
//	        the uploaders go on with the next batches
//	raw     the same segments, by the same uploaders, each one
//	        unconditional upload with the SDK's plain call (minio-go's
//	        PutObject of a known size; a GCS Writer with its defaults,
//	        which is a resumable upload), and no manifest
//
// One op is a batch of 16 segments. segments/s is the segments shipped
// per second (for fenced, committed: the last commit is waited for);
// requests/segment the HTTP requests sent per segment.
//
//	go test -c -o cur.test .
//	for i in $(seq 6); do ./cur.test -test.run '^$' -test.bench '^BenchmarkShipper$' -test.benchtime 2s -test.count 1 >> shipper.txt; done
//	benchstat -row '.name /store /size /uploaders' -col '/impl@(raw fenced)' shipper.txt
func BenchmarkShipper(b *testing.B) {
	const batch, window = 16, 64
	for _, store := range []string{"s3", "gcs"} {
		for _, size := range []struct {
			name string
			n    int
		}{{"64KiB", 64 << 10}, {"4MiB", 4 << 20}} {
			segment := benchPayload(size.n)
			for _, uploaders := range []int{1, 4, 16} {
				for _, impl := range []string{"raw", "fenced"} {
					b.Run(fmt.Sprintf("store=%s/size=%s/uploaders=%d/impl=%s", store, size.name, uploaders, impl), func(b *testing.B) {
						s := openShipperStore(b, store)
						var ship func(ctx context.Context, batches int) error
						if impl == "raw" {
							ship = s.raw(segment, uploaders, batch)
						} else {
							ship = s.fenced(b, segment, uploaders, batch, window)
						}
						ctx := context.Background()
						// One batch before the clock runs: connections open, the
						// lease held, the manifest in place.
						if err := ship(ctx, 1); err != nil {
							b.Fatal(err)
						}
						b.SetBytes(int64(batch * size.n))
						reqs := s.wire.Requests()
						b.ResetTimer()
						if err := ship(ctx, b.N); err != nil {
							b.Fatal(err)
						}
						b.StopTimer()
						segments := float64(b.N * batch)
						b.ReportMetric(segments/b.Elapsed().Seconds(), "segments/s")
						b.ReportMetric(float64(s.wire.Requests()-reqs)/segments, "requests/segment")
					})
				}
			}
		}
	}
}

// shipperStore is one bucket of a server, reached through a counting
// transport: the fenced shipper's store, and the raw uploads' client.
type shipperStore struct {
	wire   *testserver.Transport
	store  writefence.ConditionalStore
	put    func(ctx context.Context, key string, data []byte) error
	prefix string
}

func openShipperStore(b *testing.B, name string) *shipperStore {
	s := &shipperStore{wire: testserver.NewTransport(b), prefix: testserver.UniqueName(b) + "/"}
	switch name {
	case "s3":
		c := testserver.S3Server(b).Client(b, s.wire)
		bucket := testserver.MinioBucket(b, c)
		s.store = writefence.NewMinioStore(c, bucket)
		s.put = func(ctx context.Context, key string, data []byte) error {
			_, err := c.PutObject(ctx, bucket, key, bytes.NewReader(data), int64(len(data)), minio.PutObjectOptions{ContentType: "application/octet-stream"})
			return err
		}
	case "gcs":
		c := testserver.GCSClient(b, testserver.GCSEndpoint(b), s.wire)
		bucket := testserver.GCSBucket(b, c)
		s.store = writefence.NewGCSStore(c, bucket)
		s.put = func(ctx context.Context, key string, data []byte) error {
			w := c.Bucket(bucket).Object(key).NewWriter(ctx)
			if _, err := w.Write(data); err != nil {
				w.Close()
				return err
			}
			return w.Close()
		}
	default:
		b.Fatalf("unknown store %q", name)
	}
	return s
}

// upload runs batches of size segments through uploaders goroutines, in
// order, calling up for each segment and done once each batch is up.
func upload(ctx context.Context, batches, size, uploaders int, up func(batch, i int) error, done func(batch int) error) error {
	type job struct{ batch, i int }
	jobs := make(chan job)
	left := make([]int, batches) // segments of each batch still going up
	var mu sync.Mutex            // guards left and first
	var first error
	complete := make(chan int, batches)
	var wg sync.WaitGroup
	for range uploaders {
		wg.Go(func() {
			for j := range jobs {
				err := up(j.batch, j.i)
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				if left[j.batch]--; left[j.batch] == 0 {
					complete <- j.batch
				}
				mu.Unlock()
			}
		})
	}
	committed := make(chan error, 1)
	go func() {
		// Batches complete out of order; they are committed in order.
		ready, next := map[int]bool{}, 0
		var err error
		for n := range complete {
			ready[n] = true
			for ready[next] {
				if err == nil {
					err = done(next)
				}
				next++
			}
			if next == batches {
				break
			}
		}
		committed <- err
	}()
	for n := range batches {
		mu.Lock()
		left[n] = size
		mu.Unlock()
		for i := range size {
			select {
			case jobs <- job{n, i}:
			case <-ctx.Done():
			}
		}
	}
	close(jobs)
	wg.Wait()
	err := <-committed
	if first != nil {
		return first
	}
	return err
}

// raw ships with unconditional uploads.
func (s *shipperStore) raw(segment []byte, uploaders, size int) func(ctx context.Context, batches int) error {
	var seq int
	return func(ctx context.Context, batches int) error {
		base := seq
		seq += batches
		return upload(ctx, batches, size, uploaders, func(batch, i int) error {
			return s.put(ctx, fmt.Sprintf("%sraw/%08d-%02d", s.prefix, base+batch, i), segment)
		}, func(int) error { return nil })
	}
}

// fenced ships under a Lease, with PutBlob and Commit.
func (s *shipperStore) fenced(b *testing.B, segment []byte, uploaders, size, window int) func(ctx context.Context, batches int) error {
	const plugin, shard, writer = "wal", "0", "shipper"
	f := &writefence.Fence{Store: s.store, Prefix: s.prefix}
	lease := &writefence.Lease{Fence: f, Name: "wal-0", Holder: writer, TTL: time.Minute}
	held, err := lease.Hold(context.Background(), writefence.Shard{Plugin: plugin, Shard: shard})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = lease.Release(context.Background()) })
	return func(_ context.Context, batches int) error {
		epochs := make([]uint64, batches)
		refs := make([][]writefence.BlobRef, batches)
		for n := range batches {
			e, err := lease.Epoch(held, plugin, shard)
			if err != nil {
				return err
			}
			epochs[n], refs[n] = e, make([]writefence.BlobRef, size)
		}
		return upload(held, batches, size, uploaders, func(batch, i int) error {
			ref, err := f.PutBlob(held, plugin, shard, writer, epochs[batch], bytes.NewReader(segment))
			refs[batch][i] = ref
			return err
		}, func(batch int) error {
			return f.Commit(held, plugin, shard, writer, epochs[batch], func(m writefence.Manifest) (writefence.Manifest, error) {
				all := slices.Concat(m.Blobs, refs[batch])
				return writefence.Manifest{Payload: m.Payload, Blobs: all[max(0, len(all)-window):]}, nil
			})
		})
	}
}

// The parts of the MinIO shipper (BenchmarkShipper), one at a time.

// BenchmarkS3BlobPut puts 64 KiB segments one after another, each a new
// key, three ways side by side:
//
//	raw        minio-go's PutObject of a known size, as the shipper's raw
//	           uploads (over plain HTTP it signs the body in chunks)
//	writeblob  the store's WriteBlob: one PUT with If-None-Match: *, its
//	           SHA-256 signed and its CRC-32C sent
//	putblob    Fence.PutBlob, which writes through WriteBlob
//
//	go test -c -o cur.test .
//	for i in $(seq 8); do ./cur.test -test.run '^$' -test.bench '^BenchmarkS3BlobPut$' -test.benchtime 400x -test.benchmem -test.count 1 >> put.txt; done
//	benchstat -col /impl put.txt
func BenchmarkS3BlobPut(b *testing.B) {
	c := testserver.S3Server(b).Client(b, nil)
	bucket := testserver.MinioBucket(b, c)
	store := writefence.NewMinioStore(c, bucket)
	f := &writefence.Fence{Store: store}
	segment := bytes.Repeat([]byte("segment "), 8<<10) // 64 KiB
	ctx := context.Background()
	seq := 0
	for _, impl := range []string{"raw", "writeblob", "putblob"} {
		b.Run("size=64KiB/impl="+impl, func(b *testing.B) {
			b.SetBytes(int64(len(segment)))
			for b.Loop() {
				seq++
				key := fmt.Sprintf("put/%s/%08d", impl, seq)
				var err error
				switch impl {
				case "raw":
					_, err = c.PutObject(ctx, bucket, key, bytes.NewReader(segment), int64(len(segment)), minio.PutObjectOptions{ContentType: "application/octet-stream"})
				case "writeblob":
					_, err = writefence.WriteBlob(ctx, store, key, bytes.NewReader(segment))
				case "putblob":
					_, err = f.PutBlob(ctx, "wal", "0", "shipper", 1, bytes.NewReader(segment))
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkS3EpochListing lists the 16 blobs of one epoch, as a commit
// checks the blobs its writer just put, in a shard whose blob space
// holds blobs=N blobs, 16 an epoch: on MinIO the listing of a prefix
// that ends inside the shard's folder takes longer the more it holds.
//
//	go test -c -o cur.test .
//	for i in $(seq 8); do ./cur.test -test.run '^$' -test.bench '^BenchmarkS3EpochListing$' -test.benchtime 200x -test.count 1 >> list.txt; done
//	benchstat -col /blobs list.txt
func BenchmarkS3EpochListing(b *testing.B) {
	c := testserver.S3Server(b).Client(b, nil)
	bucket := testserver.MinioBucket(b, c)
	var store writefence.BlobStore = writefence.NewMinioStore(c, bucket)
	space, err := keys.Blobs("", "wal", "0")
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	epoch := uint64(0)
	for _, n := range []int{64, 1024, 4096} {
		for ; epoch*16 < uint64(n); epoch++ {
			for i := range 16 {
				name := keys.BlobName(epoch+1, "shipper", fmt.Sprintf("%032x", i))
				if _, err := c.PutObject(ctx, bucket, space+name, bytes.NewReader([]byte("x")), 1, minio.PutObjectOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		}
		prefix := space + keys.BlobEpochPrefix(epoch)
		b.Run(fmt.Sprintf("blobs=%d", n), func(b *testing.B) {
			for b.Loop() {
				found := 0
				if err := store.ListBlobs(ctx, prefix, func(writefence.BlobInfo) error { found++; return nil }); err != nil {
					b.Fatal(err)
				}
				if found != 16 {
					b.Fatalf("listed %d blobs of epoch %d, want 16", found, epoch)
				}
			}
		})
	}
}
