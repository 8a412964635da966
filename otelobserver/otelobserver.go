// Package otelobserver records a writefence.Fence's writes as OpenTelemetry
// metrics, on a Meter the caller gives: New returns a function for
// Fence.Observer.
//
// It lives in its own package so that programs importing writefence do not
// compile OpenTelemetry unless they use it. It needs only the metrics API
// (go.opentelemetry.io/otel/metric); the SDK, its readers and exporters
// are the caller's.
//
// # Metrics
//
// Every write the Fence makes (of a record, of a Lease on it, of the brand)
// ends in exactly one event (see writefence.WriteEvent), and each race it
// lost and retried is one more event before that. From them:
//
//	writefence.writes            counter {write}      writes ended, by op and outcome
//	writefence.write.duration    histogram s          from the write's start to its end, by op and outcome
//	writefence.write.attempts    histogram {attempt}  the attempts a write took (0: refused before the first), by op and outcome
//	writefence.conflicts.retried counter {conflict}   races lost and retried, by op
//	writefence.outcomes.unknown  counter {write}      writes whose outcome could not be learned, by op
//	writefence.probe.refusals    counter {write}      writes refused because the store failed the probe, by op and check
//	writefence.brand.refusals    counter {write}      writes refused by the store's brand, by op and whether it was absent
//
// The attributes:
//
//	writefence.op           the write: push, update, commit, seal, settle, settle log, floor,
//	                        blob, collect, lease acquire, lease renew, lease release,
//	                        lease settle, brand claim (WriteEvent.Op)
//	writefence.outcome      landed, untrusted, unknown, wire, corrupt, regressed, stale, lease,
//	                        conflict, failed (WriteEvent.Outcome)
//	writefence.probe.check  the probe check the store failed (writefence.ProbeError.Check)
//	writefence.brand.absent true when the brand key was absent, false when it held another value
//	writefence.key          the key written, only with Options.Keys
//
// A record lost or set back under a Fence that saw it (or under its
// KeepFloor floor) ends its writes with the outcome "regressed": alert on
// any, as only an operator can settle it.
//
// Shard names are not attributes by default: a deployment with many shards
// would make a time series of every one. Options.Keys adds the key written
// to every metric, for a deployment with few.
package otelobserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/writefence/writefence"
)

// Options are New's settings; nil means the defaults.
type Options struct {
	// Keys adds the attribute writefence.key, the key each write wrote
	// (a shard's record key, as the Fence builds it), to every metric.
	// False leaves it out: one time series per shard can cost more than
	// the metrics are worth.
	Keys bool

	// Clock returns the current time, against which a write's duration is
	// measured from WriteEvent.Start; nil means time.Now. WriteEvent.Start
	// carries a monotonic clock reading, which time.Now's result uses.
	Clock func() time.Time
}

// Bucket boundaries. A write is a round trip or a few to a store, from
// under a millisecond (memory, a local Valkey) to seconds (an object store
// retrying); attempts run from 0 to Fence.MaxAttempts (10 by default).
var (
	durationBounds = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}
	attemptBounds  = []float64{0, 1, 2, 3, 5, 10, 20}
)

// Attribute keys.
const (
	attrOp          = attribute.Key("writefence.op")
	attrOutcome     = attribute.Key("writefence.outcome")
	attrKey         = attribute.Key("writefence.key")
	attrProbeCheck  = attribute.Key("writefence.probe.check")
	attrBrandAbsent = attribute.Key("writefence.brand.absent")
)

// observer holds the instruments New created.
type observer struct {
	keys  bool
	clock func() time.Time

	writes    metric.Int64Counter
	duration  metric.Float64Histogram
	attempts  metric.Int64Histogram
	conflicts metric.Int64Counter
	unknown   metric.Int64Counter
	probe     metric.Int64Counter
	brand     metric.Int64Counter
}

// New creates the package's instruments on meter and returns an Observer
// for Fence.Observer that records every WriteEvent on them (see the
// package documentation for what each records). The function is safe for
// concurrent use, as Fence.Observer must be. An error creating an
// instrument is returned, and no Observer; meter must not be nil.
func New(meter metric.Meter, opts *Options) (func(context.Context, writefence.WriteEvent), error) {
	if meter == nil {
		return nil, &writefence.InvalidArgumentError{Arg: "meter", Reason: "nil"}
	}
	if opts == nil {
		opts = &Options{}
	}
	o := &observer{keys: opts.Keys, clock: opts.Clock}
	if o.clock == nil {
		o.clock = time.Now
	}
	var errs []error
	counter := func(name, unit, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	o.writes = counter("writefence.writes", "{write}", "Writes ended, by operation and outcome.")
	o.conflicts = counter("writefence.conflicts.retried", "{conflict}", "Races a write lost and retried on a fresh read.")
	o.unknown = counter("writefence.outcomes.unknown", "{write}", "Writes whose outcome could not be learned: they may or may not have landed.")
	o.probe = counter("writefence.probe.refusals", "{write}", "Writes refused because the store failed the probe: it ignored a precondition.")
	o.brand = counter("writefence.brand.refusals", "{write}", "Writes refused because the store's brand is absent or holds another wire identity.")
	var err error
	o.duration, err = meter.Float64Histogram("writefence.write.duration", metric.WithUnit("s"),
		metric.WithDescription("Time from a write's start to its end, retries included."),
		metric.WithExplicitBucketBoundaries(durationBounds...))
	errs = append(errs, err)
	o.attempts, err = meter.Int64Histogram("writefence.write.attempts", metric.WithUnit("{attempt}"),
		metric.WithDescription("Attempts (a read, a decision, a conditional write) a write took; 0 when refused before the first."),
		metric.WithExplicitBucketBoundaries(attemptBounds...))
	errs = append(errs, err)
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("writefence: otelobserver: %w", err)
	}
	return o.observe, nil
}

// observe records one event.
func (o *observer) observe(ctx context.Context, e writefence.WriteEvent) {
	base := []attribute.KeyValue{attrOp.String(e.Op)}
	if o.keys {
		base = append(base, attrKey.String(e.Key))
	}
	if e.Retrying {
		o.conflicts.Add(ctx, 1, metric.WithAttributes(base...))
		return
	}
	outcome := e.Outcome()
	ended := metric.WithAttributeSet(attribute.NewSet(append(base[:len(base):len(base)], attrOutcome.String(outcome))...))
	o.writes.Add(ctx, 1, ended)
	o.attempts.Record(ctx, int64(e.Attempt), ended)
	if !e.Start.IsZero() {
		o.duration.Record(ctx, o.clock().Sub(e.Start).Seconds(), ended)
	}
	switch outcome {
	case "unknown":
		o.unknown.Add(ctx, 1, metric.WithAttributes(base...))
	case "untrusted":
		var pe *writefence.ProbeError
		if errors.As(e.Err, &pe) {
			o.probe.Add(ctx, 1, metric.WithAttributes(append(base, attrProbeCheck.String(pe.Check))...))
		}
	case "wire":
		// The brand's refusal names the brand key; a record's, the record
		// written. A brand claim writes the brand key itself.
		var we *writefence.WireError
		if errors.As(e.Err, &we) && (we.Key != e.Key || e.Op == "brand claim") {
			o.brand.Add(ctx, 1, metric.WithAttributes(append(base, attrBrandAbsent.Bool(we.Absent))...))
		}
	}
}
