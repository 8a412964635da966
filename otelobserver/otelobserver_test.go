package otelobserver_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/otelobserver"
)

// The boundaries the package documents for its histograms.
var (
	durationBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	attemptBounds  = []float64{0, 1, 2, 3, 5, 10, 20}
)

// perAttempt is how long each attempt of a write takes by the test's clock:
// a write's duration is perAttempt times its attempts, exactly
// representable in seconds, so sums compare exactly.
const perAttempt = 250 * time.Millisecond

// harness is an SDK MeterProvider with a ManualReader, and an Observer on
// it whose clock puts each event perAttempt times its attempt after the
// write's start.
type harness struct {
	reader   *sdkmetric.ManualReader
	observer func(context.Context, writefence.WriteEvent)

	mu     sync.Mutex // guards now
	now    time.Time
	events []writefence.WriteEvent
}

func newHarness(t *testing.T, keys bool) *harness {
	t.Helper()
	h := &harness{reader: sdkmetric.NewManualReader()}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(h.reader))
	t.Cleanup(func() { _ = provider.Shutdown(context.Background()) })
	obs, err := otelobserver.New(provider.Meter("writefence-test"), &otelobserver.Options{Keys: keys, Clock: h.clock})
	require.NoError(t, err)
	h.observer = func(ctx context.Context, e writefence.WriteEvent) {
		h.mu.Lock()
		h.now = e.Start.Add(time.Duration(e.Attempt) * perAttempt)
		h.events = append(h.events, e)
		h.mu.Unlock()
		obs(ctx, e)
	}
	return h
}

func (h *harness) clock() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// collect returns the metrics recorded so far, by name.
func (h *harness) collect(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, h.reader.Collect(context.Background(), &rm))
	got := make(map[string]metricdata.Metrics)
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			got[m.Name] = m
		}
	}
	return got
}

// ended is a write the script expects to end: its op, outcome and
// attempts.
type ended struct {
	op, outcome string
	attempts    int64
}

// expected builds every metric the package records from the writes the
// script made, the conflicts it retried and the refusals it counts,
// following the documented rules: one count per write, one histogram
// value per write, buckets as OpenTelemetry's explicit-bucket aggregation
// fills them (a value goes in the first bucket whose bound it does not
// exceed).
type expected struct {
	writes    []ended
	conflicts map[string]int64                   // by op
	unknown   map[string]int64                   // by op
	probe     map[attribute.Set]int64            // by attributes
	brand     map[attribute.Set]int64            // by attributes
	keyOf     func(e ended) []attribute.KeyValue // the key attribute, with Options.Keys
}

func sum(name string, points map[attribute.Set]int64) metricdata.Metrics {
	m := metricdata.Metrics{Name: name, Data: metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}}
	s := m.Data.(metricdata.Sum[int64])
	for set, v := range points {
		s.DataPoints = append(s.DataPoints, metricdata.DataPoint[int64]{Attributes: set, Value: v})
	}
	m.Data = s
	return m
}

func buckets(bounds []float64, values []float64) []uint64 {
	counts := make([]uint64, len(bounds)+1)
	for _, v := range values {
		i := 0
		for i < len(bounds) && v > bounds[i] {
			i++
		}
		counts[i]++
	}
	return counts
}

func histogram[N int64 | float64](bounds []float64, byAttrs map[attribute.Set][]N) []metricdata.HistogramDataPoint[N] {
	var points []metricdata.HistogramDataPoint[N]
	for set, values := range byAttrs {
		p := metricdata.HistogramDataPoint[N]{Attributes: set, Count: uint64(len(values)), Bounds: bounds}
		fl := make([]float64, len(values))
		minV, maxV := values[0], values[0]
		for i, v := range values {
			p.Sum += v
			fl[i] = float64(v)
			minV, maxV = min(minV, v), max(maxV, v)
		}
		p.BucketCounts = buckets(bounds, fl)
		p.Min, p.Max = metricdata.NewExtrema(minV), metricdata.NewExtrema(maxV)
		points = append(points, p)
	}
	return points
}

func (x expected) metrics() []metricdata.Metrics {
	writes := make(map[attribute.Set]int64)
	durations := make(map[attribute.Set][]float64)
	attempts := make(map[attribute.Set][]int64)
	for _, w := range x.writes {
		kv := []attribute.KeyValue{attribute.String("writefence.op", w.op), attribute.String("writefence.outcome", w.outcome)}
		if x.keyOf != nil {
			kv = append(kv, x.keyOf(w)...)
		}
		set := attribute.NewSet(kv...)
		writes[set]++
		durations[set] = append(durations[set], (time.Duration(w.attempts) * perAttempt).Seconds())
		attempts[set] = append(attempts[set], w.attempts)
	}
	byOp := func(counts map[string]int64) map[attribute.Set]int64 {
		out := make(map[attribute.Set]int64)
		for op, n := range counts {
			out[attribute.NewSet(attribute.String("writefence.op", op))] = n
		}
		return out
	}
	var ms []metricdata.Metrics
	add := func(m metricdata.Metrics, unit, desc string) {
		m.Unit, m.Description = unit, desc
		ms = append(ms, m)
	}
	add(sum("writefence.writes", writes), "{write}", "Writes ended, by operation and outcome.")
	add(metricdata.Metrics{Name: "writefence.write.duration", Data: metricdata.Histogram[float64]{
		Temporality: metricdata.CumulativeTemporality, DataPoints: histogram(durationBounds, durations)}},
		"s", "Time from a write's start to its end, retries included.")
	add(metricdata.Metrics{Name: "writefence.write.attempts", Data: metricdata.Histogram[int64]{
		Temporality: metricdata.CumulativeTemporality, DataPoints: histogram(attemptBounds, attempts)}},
		"{attempt}", "Attempts (a read, a decision, a conditional write) a write took; 0 when refused before the first.")
	if len(x.conflicts) > 0 {
		add(sum("writefence.conflicts.retried", byOp(x.conflicts)), "{conflict}", "Races a write lost and retried on a fresh read.")
	}
	if len(x.unknown) > 0 {
		add(sum("writefence.outcomes.unknown", byOp(x.unknown)), "{write}", "Writes whose outcome could not be learned: they may or may not have landed.")
	}
	if len(x.probe) > 0 {
		add(sum("writefence.probe.refusals", x.probe), "{write}", "Writes refused because the store failed the probe: it ignored a precondition.")
	}
	if len(x.brand) > 0 {
		add(sum("writefence.brand.refusals", x.brand), "{write}", "Writes refused because the store's brand is absent or holds another wire identity.")
	}
	return ms
}

// requireMetrics fails unless exactly the metrics of x were recorded.
func requireMetrics(t *testing.T, h *harness, x expected) {
	t.Helper()
	got := h.collect(t)
	want := x.metrics()
	require.Len(t, got, len(want), "metric names: %v", names(got))
	for _, m := range want {
		g, ok := got[m.Name]
		require.True(t, ok, "%s was not recorded", m.Name)
		metricdatatest.AssertEqual(t, m, g, metricdatatest.IgnoreTimestamp())
	}
}

func names(ms map[string]metricdata.Metrics) []string {
	var out []string
	for name := range ms {
		out = append(out, name)
	}
	return out
}

// conflictStore answers ErrConflict to its next n writes without making
// them, as if a rival won each race.
type conflictStore struct {
	writefence.ConditionalStore
	mu sync.Mutex // guards n
	n  int
}

func (s *conflictStore) conflicts(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n = n
}

func (s *conflictStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	refuse := s.n > 0
	if refuse {
		s.n--
	}
	s.mu.Unlock()
	if refuse {
		return "", writefence.ErrConflict
	}
	return s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
}

// errCut stands for a connection cut after the server acted.
var errCut = errors.New("connection reset by peer")

// cutStore makes a write and loses its reply, and from then on fails every
// read: the write's outcome cannot be learned.
type cutStore struct {
	writefence.ConditionalStore
	mu  sync.Mutex // guards cut
	cut bool
}

func (s *cutStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return nil, "", errCut
	}
	return s.ConditionalStore.Get(ctx, key)
}

func (s *cutStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if _, err := s.ConditionalStore.PutIfVersion(ctx, key, data, expect); err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	return "", errCut
}

// ignoringStore writes whatever its precondition says: the probe refuses
// to trust it.
type ignoringStore struct{ m writefence.MemStore }

func (s *ignoringStore) Get(ctx context.Context, key string) ([]byte, string, error) {
	return s.m.Get(ctx, key)
}

func (s *ignoringStore) PutIfVersion(ctx context.Context, key string, data []byte, _ string) (string, error) {
	_, v, err := s.m.Get(ctx, key)
	if errors.Is(err, writefence.ErrNotFound) {
		v = ""
	} else if err != nil {
		return "", err
	}
	return s.m.PutIfVersion(ctx, key, data, v)
}

// A scripted run of every kind of record write on MemStore, and the exact
// data points it leaves.
func TestRecordsEveryWrite(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t, false)
	mem := &writefence.MemStore{}
	store := &conflictStore{ConditionalStore: mem}
	f := &writefence.Fence{Store: store, Observer: h.observer}

	require.NoError(t, f.Push(ctx, "wal", "0", "node-a", 1, []byte("segment 1")))
	require.NoError(t, f.Seal(ctx, "wal", "0", "node-a", 2))
	require.NoError(t, f.Update(ctx, "wal", "0", "node-a", 3, func(cur []byte) ([]byte, error) { return append(cur, '+'), nil }))
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "zombie", 2, []byte("late")), writefence.ErrStaleEpoch)

	store.conflicts(1)
	require.NoError(t, f.Push(ctx, "wal", "0", "node-a", 4, []byte("segment 2")), "a conflict retried, then landed")

	damaged, err := mem.PutIfVersion(ctx, "writefence/s/wal/1", []byte("garbage"), "")
	require.NoError(t, err)
	require.NoError(t, f.Settle(ctx, "wal", "1", writefence.Settlement{Version: damaged, Writer: "operator", Epoch: 5, Payload: []byte("restored"), Floor: 4}))

	cut := &cutStore{ConditionalStore: &writefence.MemStore{}}
	lost := &writefence.Fence{Store: cut, Observer: h.observer, MaxAttempts: 2}
	require.ErrorIs(t, lost.Push(ctx, "wal", "2", "node-a", 1, []byte("segment")), writefence.ErrOutcomeUnknown)

	requireMetrics(t, h, expected{
		writes: []ended{
			{op: "push", outcome: "landed", attempts: 1},
			{op: "seal", outcome: "landed", attempts: 1},
			{op: "update", outcome: "landed", attempts: 1},
			{op: "push", outcome: "stale", attempts: 1},
			{op: "push", outcome: "landed", attempts: 2},
			{op: "settle log", outcome: "landed", attempts: 1},
			{op: "settle", outcome: "landed", attempts: 1},
			{op: "push", outcome: "unknown", attempts: 2},
		},
		conflicts: map[string]int64{"push": 1},
		unknown:   map[string]int64{"push": 1},
	})

	// The duration runs from the write's start, which every event of one
	// write shares: the retried conflict's and the landed push's.
	var retried, landed writefence.WriteEvent
	for i, e := range h.events {
		if e.Retrying {
			retried, landed = e, h.events[i+1]
		}
	}
	require.False(t, retried.Start.IsZero())
	require.Equal(t, retried.Start, landed.Start)
	require.Equal(t, 2, landed.Attempt)
}

// Writes refused before their first attempt: by an untrusted store (the
// probe's check named), by an absent brand and by another brand (a brand
// claim and the push it guards); a record of another identity is no brand
// refusal.
func TestRecordsRefusals(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t, false)

	untrusted := &writefence.Fence{Store: &ignoringStore{}, Probe: true, Observer: h.observer}
	err := untrusted.Push(ctx, "wal", "0", "node-a", 1, nil)
	var pe *writefence.ProbeError
	require.ErrorAs(t, err, &pe)

	unbranded := &writefence.Fence{Store: &writefence.MemStore{}, Brand: writefence.BrandVerify, Observer: h.observer}
	require.ErrorIs(t, unbranded.Push(ctx, "wal", "0", "node-a", 1, nil), writefence.ErrWire)

	branded := &writefence.MemStore{}
	_, err = (&writefence.Fence{Store: branded, Identity: "wal/v1"}).ClaimBrand(ctx)
	require.NoError(t, err)
	claimer := &writefence.Fence{Store: branded, Identity: "wal/v2", Brand: writefence.BrandClaim, Observer: h.observer}
	require.ErrorIs(t, claimer.Push(ctx, "wal", "0", "node-a", 1, nil), writefence.ErrWire)

	records := &writefence.MemStore{}
	require.NoError(t, (&writefence.Fence{Store: records, Identity: "wal/v1"}).Push(ctx, "wal", "0", "node-a", 1, nil))
	other := &writefence.Fence{Store: records, Identity: "wal/v2", Observer: h.observer}
	require.ErrorIs(t, other.Push(ctx, "wal", "0", "node-b", 2, nil), writefence.ErrWire)

	opAbsent := func(op string, absent bool) attribute.Set {
		return attribute.NewSet(attribute.String("writefence.op", op), attribute.Bool("writefence.brand.absent", absent))
	}
	requireMetrics(t, h, expected{
		writes: []ended{
			{op: "push", outcome: "untrusted", attempts: 0},
			{op: "push", outcome: "wire", attempts: 0},
			{op: "brand claim", outcome: "wire", attempts: 1},
			{op: "push", outcome: "wire", attempts: 0},
			{op: "push", outcome: "wire", attempts: 1},
		},
		probe: map[attribute.Set]int64{
			attribute.NewSet(attribute.String("writefence.op", "push"), attribute.String("writefence.probe.check", pe.Check)): 1,
		},
		brand: map[attribute.Set]int64{
			opAbsent("push", true):         1,
			opAbsent("brand claim", false): 1,
			opAbsent("push", false):        1,
		},
	})
}

// With Options.Keys every metric carries the key written.
func TestRecordsKeys(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t, true)
	store := &conflictStore{ConditionalStore: &writefence.MemStore{}}
	f := &writefence.Fence{Store: store, Observer: h.observer}
	require.NoError(t, f.Push(ctx, "wal", "0", "node-a", 1, nil))
	store.conflicts(1)
	require.NoError(t, f.Push(ctx, "wal", "1", "node-a", 1, nil))

	key := func(k string) []attribute.KeyValue {
		return []attribute.KeyValue{attribute.String("writefence.key", k)}
	}
	keys := map[int64]string{1: "writefence/s/wal/0", 2: "writefence/s/wal/1"}
	got := h.collect(t)
	want := expected{
		writes: []ended{{op: "push", outcome: "landed", attempts: 1}, {op: "push", outcome: "landed", attempts: 2}},
		keyOf:  func(e ended) []attribute.KeyValue { return key(keys[e.attempts]) },
	}.metrics()
	for _, m := range want {
		metricdatatest.AssertEqual(t, m, got[m.Name], metricdatatest.IgnoreTimestamp())
	}
	conflicts := metricdata.Metrics{Name: "writefence.conflicts.retried", Unit: "{conflict}",
		Description: "Races a write lost and retried on a fresh read.",
		Data: metricdata.Sum[int64]{Temporality: metricdata.CumulativeTemporality, IsMonotonic: true,
			DataPoints: []metricdata.DataPoint[int64]{{Attributes: attribute.NewSet(
				attribute.String("writefence.op", "push"), attribute.String("writefence.key", "writefence/s/wal/1")), Value: 1}}}}
	metricdatatest.AssertEqual(t, conflicts, got[conflicts.Name], metricdatatest.IgnoreTimestamp())
}

func TestNewNilMeter(t *testing.T) {
	_, err := otelobserver.New(nil, nil)
	require.ErrorIs(t, err, writefence.ErrInvalidArgument)
}

// A record deleted under a Fence that saw it ends the next push with the
// outcome "regressed"; under KeepFloor a seal's floor is a write of its
// own, Op "floor".
func TestRecordsRegressed(t *testing.T) {
	ctx := t.Context()
	h := newHarness(t, false)
	mem := &writefence.MemStore{}
	f := &writefence.Fence{Store: mem, Observer: h.observer, KeepFloor: true}
	require.NoError(t, f.Seal(ctx, "wal", "0", "node-a", 1))
	require.NoError(t, mem.Delete(ctx, "writefence/s/wal/0"))
	require.ErrorIs(t, f.Push(ctx, "wal", "0", "node-a", 2, []byte("segment")), writefence.ErrEpochRegressed)

	requireMetrics(t, h, expected{
		writes: []ended{
			{op: "seal", outcome: "landed", attempts: 1},
			{op: "floor", outcome: "landed", attempts: 1},
			{op: "push", outcome: "regressed", attempts: 2},
		},
		// The push conditions its first write on the version the seal
		// left, which the delete took: a conflict, then a read.
		conflicts: map[string]int64{"push": 1},
	})
}
