package otelobserver_test

import (
	"context"
	"fmt"
	"slices"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/otelobserver"
)

// A Fence's writes counted by operation and outcome, read back through the
// SDK's ManualReader; a program passes its own MeterProvider's Meter.
func Example() {
	ctx := context.Background()
	reader := sdkmetric.NewManualReader()
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer provider.Shutdown(ctx)

	observer, err := otelobserver.New(provider.Meter("github.com/writefence/writefence"), nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	fence := &writefence.Fence{Store: &writefence.MemStore{}, Observer: observer}
	_ = fence.Seal(ctx, "wal", "0", "node-a", 1)
	_ = fence.Push(ctx, "wal", "0", "node-a", 2, []byte("segment 1"))
	_ = fence.Push(ctx, "wal", "0", "node-a", 3, []byte("segment 2"))
	_ = fence.Push(ctx, "wal", "0", "zombie", 2, []byte("late"))

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		fmt.Println(err)
		return
	}
	var lines []string
	for _, m := range rm.ScopeMetrics[0].Metrics {
		if writes, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "writefence.writes" {
			for _, p := range writes.DataPoints {
				op, _ := p.Attributes.Value("writefence.op")
				outcome, _ := p.Attributes.Value("writefence.outcome")
				lines = append(lines, fmt.Sprintf("%s op=%s outcome=%s: %d", m.Name, op.AsString(), outcome.AsString(), p.Value))
			}
		}
	}
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	// Output:
	// writefence.writes op=push outcome=landed: 2
	// writefence.writes op=push outcome=stale: 1
	// writefence.writes op=seal outcome=landed: 1
}
