package sim

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/cryptotest"
	"testing/synctest"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/promise"
	"github.com/writefence/writefence/internal/record"
)

// The simulation's CI run: a fixed list of seeds, each a whole deployment
// checked against every promise. WRITEFENCE_SIM_SEEDS=N runs N seeds from
// WRITEFENCE_SIM_FROM (default simFirstSeed), for a long run;
// WRITEFENCE_SIM_SEED=S runs seed S alone, with its history in the log.
//
// Under -race the run is the first simRaceSeeds seeds: the race detector
// makes a seed about seven times dearer, and it finds little in a world
// whose processes run one at a time, in turns; the library's goroutines
// beside them (a Lease's renewer, a commit's listing) run in the first
// seeds as in the others. CI runs every seed without -race as well
// (.ci/run).
const (
	simFirstSeed = 1
	simSeeds     = 2000
	simRaceSeeds = 300
)

// simulate runs seed with cfg and returns the world, its history and what
// the checker found.
func simulate(t *testing.T, seed uint64, cfg Config) (w *World, h *promise.History, found []promise.Violation) {
	t.Helper()
	cryptotest.SetGlobalRandom(t, seed)
	synctest.Test(t, func(t *testing.T) {
		var err error
		if w, err = New(seed, cfg); err != nil {
			t.Fatal(err)
		}
		h = w.Run()
	})
	found = promise.NewChecker(promise.Options{}).Check(h)
	return w, h, found
}

// seeds returns the seeds this run simulates.
func seeds(t *testing.T) []uint64 {
	if s := os.Getenv("WRITEFENCE_SIM_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WRITEFENCE_SIM_SEED: %v", err)
		}
		return []uint64{seed}
	}
	from, n := uint64(simFirstSeed), simSeeds
	if s := os.Getenv("WRITEFENCE_SIM_FROM"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("WRITEFENCE_SIM_FROM: %v", err)
		}
		from = v
	}
	if s := os.Getenv("WRITEFENCE_SIM_SEEDS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("WRITEFENCE_SIM_SEEDS: %v", err)
		}
		n = v
	} else if testing.Short() {
		n = 200
	} else if raceOn {
		n = simRaceSeeds
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = from + uint64(i)
	}
	return out
}

// configFor is the deployment seed simulates: every third one keeps the
// shard's floor apart from its record (Fence.KeepFloor), and every fourth
// (from the second) reads the brand before each write, every fourth from
// the fourth claims it before its first, every seventh (from the
// fourth) deletes blobs one at a time, and in every third (from the
// second) the writers' lease clocks disagree with the world's by up to
// half the lease's TTL; every eleventh (from the fifth) probes the store
// before the first write of each Fence, and every thirteenth (from the
// sixth) keeps its keys under a prefix other than the default.
func configFor(seed uint64) Config {
	cfg := DefaultConfig
	cfg.KeepFloor = seed%3 == 0
	cfg.Branded = seed%4 == 1
	cfg.Claims = seed%4 == 3
	cfg.SerialDeletes = seed%7 == 4
	if seed%3 == 2 {
		cfg.Skew = cfg.TTL / 2
	}
	cfg.Probe = seed%11 == 5
	if seed%13 == 6 {
		cfg.Prefix = "tenant/" // every key under a prefix of its own (promise 28)
	}
	if seed%5 == 2 {
		cfg.ListBudget = 2 // the record soon references more blobs of an epoch than a listing shows
	}
	return cfg
}

// TestSimulation simulates whole deployments, one per seed, and checks
// every history against every promise. A failure names the seed and the
// step of the first broken promise, and logs the history around it.
func TestSimulation(t *testing.T) {
	total := map[string]int{}
	entries := 0
	for _, seed := range seeds(t) {
		w, h, found := simulate(t, seed, configFor(seed))
		entries += len(h.Entries)
		for k, v := range w.Tally() {
			total[k] += v
		}
		for k, v := range outcomes(h, configFor(seed).Prefix) {
			total[k] += v
		}
		total["lease taken before its expiry by the world's clock"] += earlyTakeovers(h, configFor(seed).Prefix)
		firstOf := map[string]bool{} // the TermSources that handed out an epoch
		holdsRegressed := map[int]bool{}
		for _, e := range h.Entries {
			for k, v := range leaseRegressions(e, holdsRegressed) {
				total[k] += v
			}
			if e.End != nil && e.End.Op == promise.Commit && e.End.Err == nil && w.Reads(e.End.ID) == 0 {
				total["commit ok, with no read of the record"]++
			}
			if c := e.End; c != nil && c.Lease != "" && c.Op == promise.Epoch && slices.ContainsFunc(c.Before, func(x promise.Context) bool {
				return x.Kind == "hold" && x.Done && x.Is.Has("lease lost")
			}) {
				total["epoch asked once the Hold's context ended, the lease lost"]++
			}
			if c := e.End; c != nil && c.Op == promise.Hold && c.Is.Has("stale") && slices.ContainsFunc(c.Before, func(x promise.Context) bool {
				return x.Kind == "deposed" && !x.Done
			}) {
				total["hold refused as stale beside a Deposed context"]++
			}
			if c := e.End; c != nil && configFor(seed).Probe && c.BrandReads && !c.BrandAlways && c.Op != promise.Claim && c.Op != promise.Verify && c.Is.Has("wire") {
				total["probing Fence refused as of another identity, its brand read before its first write"]++
			}
			if c := e.End; c != nil && c.TermSource != "" && c.Err == nil && !firstOf[c.TermSource] {
				firstOf[c.TermSource] = true
				if c.Got&(1<<32-1) > 1 {
					total["term source continued above the record"]++
				}
			}
		}
		if os.Getenv("WRITEFENCE_SIM_SEED") != "" {
			t.Logf("seed %d:\n%s", seed, Describe(h, w, 0, len(h.Entries)))
		}
		if len(found) > 0 {
			v := found[0]
			t.Fatalf("seed %d, step %d (entry %d of %d): %s\nall: %v\nthe history before it:\n%s\nrun it alone: WRITEFENCE_SIM_SEED=%d go test -run '^TestSimulation$' -v ./internal/sim",
				seed, w.Step(v.Entry), v.Entry, len(h.Entries), v, found, Describe(h, w, v.Entry-40, v.Entry), seed)
		}
	}
	t.Logf("%d histories, %d entries; %v", len(seeds(t)), entries, total)
	// Both ways a commit decides run: on what its Fence remembers of the
	// record it wrote, and on a read.
	if no := total["commit ok, with no read of the record"]; len(seeds(t)) >= 50 && (no == 0 || no == total["commit ok"]) {
		t.Errorf("of %d commits that landed, %d read nothing: want some of each", total["commit ok"], no)
	}
	// Fences claim the brand (BrandClaim), and a claim's reply is lost or
	// its read back fails now and then.
	for _, k := range []string{"put , the brand", "fault lost, the brand", "fault transient, the brand"} {
		if len(seeds(t)) >= 50 && total[k] == 0 {
			t.Errorf("no %q in the histories", k)
		}
	}
	// A writer told to accept a record set back forgets the shard
	// (Fence.Forget) and writes over it (promises 2 and 29).
	if len(seeds(t)) >= 50 && total["writer forgot the shard after a regression"] == 0 {
		t.Errorf("no writer forgot the shard")
	}
	// An operator retires the shard, and collects it with RecordGone.
	requireRetired(t, total, len(seeds(t)))
	// A refused Settle beside a Deposed context of the shard (promise 18).
	requireBesideSettle(t, total, len(seeds(t)))
	// Fences probe the store before their first write (Fence.Probe),
	// and a probe's request fails now and then, which fails the call
	// (promise 6: Probe's one attempt).
	for _, k := range []string{"put , a probe", "fault transient, a probe"} {
		if len(seeds(t)) >= 50 && total[k] == 0 {
			t.Errorf("no %q in the histories", k)
		}
	}
	// The requests promise 6 says are not retried fail now and then.
	for _, k := range []string{"put blob create blob", "collect list blobs", "collect delete blobs"} {
		if len(seeds(t)) >= 50 && total["fault transient, "+k] == 0 {
			t.Errorf("no transient fault of a %s", k)
		}
	}
	// A Fence that probes and reads the brand before its first write
	// (BrandClaim) begins while the brand holds another identity: it is
	// refused, its probe writing nothing (promise 3).
	if k := "probing Fence refused as of another identity, its brand read before its first write"; len(seeds(t)) >= 50 && total[k] == 0 {
		t.Errorf("no %q in the histories", k)
	}
	// A PutBlob's create lands and its reply is lost: it returns an
	// unknown outcome (promise 5).
	if len(seeds(t)) >= 50 && total["fault lost, put blob create blob"] == 0 {
		t.Errorf("no PutBlob's create lost its reply")
	}
	// A second Deposed context of the shard, not derived from the Hold's,
	// which only the Fence ends (promises 16 and 18).
	if len(seeds(t)) >= 50 && total["second Deposed context, of the process's"] == 0 {
		t.Errorf("no writer watched for deposition under a context of its own")
	}
	// The steps that try promises 1, 3, 5, 8, 9 and 10: Collect writes a
	// horizon; the operator settles at too low an epoch, over references
	// it cannot read, runs a settle again, and its last settle again over
	// new damage from a Fence that forgot the shard; the brand is set to
	// another identity or removed while Fences read it before each write,
	// which are refused.
	for _, k := range []string{"collect put the horizon", "settle at too low an epoch refused", "settle refused for references it cannot read",
		"earlier settle run again over new damage refused", "brand set to another identity", "brand removed"} {
		if len(seeds(t)) >= 50 && total[k] == 0 {
			t.Errorf("no %q in the histories", k)
		}
	}
	again := 0
	for k, v := range total {
		if strings.HasPrefix(k, "settle run again") {
			again += v
		}
	}
	if len(seeds(t)) >= 50 && (again == 0 || total["settle run again: [], then []"] == 0) {
		t.Errorf("no settle run again, or none after it landed")
	}
	if wire := total["push wire"] + total["commit wire"] + total["seal wire"] + total["update wire"]; len(seeds(t)) >= 50 && wire == 0 {
		t.Errorf("no write refused by the brand")
	}
	// Writers renew the lease themselves beside their Hold's renewer.
	if len(seeds(t)) >= 50 && total["lease renew ok"] == 0 {
		t.Errorf("no Renew landed")
	}
	// An operator settles the lease over a live holder (promise 16).
	if len(seeds(t)) >= 50 && total["lease settled over its holder"] == 0 {
		t.Errorf("no lease settled over its holder")
	}
	// An operator settles the lease at its holder's own term (promise 12),
	// and a Deposed context made before a Hold runs through it, which the
	// Hold's seal refused as stale ends (18).
	// A Lease asked for an epoch once its Hold's renewer learned the lease
	// lost (promise 14).
	for _, k := range []string{"lease settled over its holder at its term", "Deposed context made before the Hold",
		"hold refused as stale beside a Deposed context", "epoch asked once the Hold's context ended, the lease lost"} {
		if len(seeds(t)) >= 50 && total[k] == 0 {
			t.Errorf("no %q in the histories", k)
		}
	}
	// A TermSource kept from an earlier hold ends once its term function
	// reports the new term (promise 17).
	if len(seeds(t)) >= 50 && total["term source of an earlier term ended"] == 0 {
		t.Errorf("no TermSource of an earlier term ended")
	}
	// A lease clock ahead of the world's takes the lease before its
	// holder's expiry by the world's clock (promise 13 by the acquirer's
	// clock), which the fencing of the writes must withstand.
	if len(seeds(t)) >= 50 && total["lease taken before its expiry by the world's clock"] == 0 {
		t.Errorf("no lease taken early by a clock ahead")
	}
	// The goroutines that wait for a turn at once have labels of their
	// own, whose order the seed draws (World.turn).
	for k := range total {
		if strings.HasPrefix(k, "two turns of one label") {
			t.Errorf("%s", k)
		}
	}
	// Writers now and then commit references that lie (promise 20),
	// blobs are damaged from outside (23), a writer checks the shard
	// once another holds it, or after the record was set back below what
	// its Fence saw (32), a program of another format rewrites the
	// record, under which no collection deletes (25), and a collector
	// that forgot the shard meets a record set back under its floor (31).
	for _, k := range []string{"confused commit: a size off by one", "confused commit: another writer's blob", "blob damaged", "check after a pause", "check stale",
		"record set back under a check", "record rewritten in another format", "collector forgot the shard"} {
		if len(seeds(t)) >= 50 && total[k] == 0 {
			t.Errorf("no %q in the histories", k)
		}
	}
	// The lease's record is deleted or set back from outside while Lease
	// values that held or read it go on: an acquisition of one of them is
	// refused as regressed, and a renewal reports the lease lost and
	// regressed (promise 30); the operator settles the lease.
	for _, k := range []string{"lease record deleted", "lease record set back", "lease acquisition refused as regressed",
		"lease reported lost and regressed: lease renew", "Hold's context ended, the lease lost and regressed",
		"lease settled after its record was deleted or set back"} {
		if len(seeds(t)) >= 50 && total[k] == 0 {
			t.Errorf("no %q in the histories", k)
		}
	}
	// A TermSource made in a term its writer already wrote continues
	// above the record (promise 17).
	if len(seeds(t)) >= 50 && total["term source continued above the record"] == 0 {
		t.Errorf("no TermSource continued above the record its term had written")
	}
}

// leaseRegressions counts what entry e shows of Lease values meeting
// their record deleted or set back (promise 30): an acquisition refused as
// regressed, a Renew, an Epoch or a Release that reports the lease lost
// and regressed, and a Hold's context ended so, once by its ID (seen).
func leaseRegressions(e promise.Entry, seen map[int]bool) map[string]int {
	out := map[string]int{}
	c := e.End
	if c == nil {
		return out
	}
	var r *writefence.EpochRegressedError
	switch {
	case c.Lease == "":
	case errors.As(c.Err, &r) && strings.HasPrefix(r.Op, "lease"):
		out["lease acquisition refused as regressed"]++
	case LeaseRegressed(c.Err):
		out["lease reported lost and regressed: "+string(c.Op)]++
	}
	for _, x := range append(slices.Clone(c.Before), c.After...) {
		if x.Kind == "hold" && x.Done && LeaseRegressed(x.Cause) && !seen[x.ID] {
			seen[x.ID] = true
			out["Hold's context ended, the lease lost and regressed"]++
		}
	}
	return out
}

// TestSimulationDeterministic: one seed gives one history, entry for
// entry, whatever else the machine is doing: a dozen seeds, among them
// seeds whose goroutines once ran at one instant in the runtime's order.
func TestSimulationDeterministic(t *testing.T) {
	for _, seed := range []uint64{7, 1234, 9, 11, 13, 22, 63, 65, 117, 128, 200, 260} {
		wa, a, _ := simulate(t, seed, configFor(seed))
		wb, b, _ := simulate(t, seed, configFor(seed))
		if d := divergence(wa, a, wb, b); d != "" {
			t.Fatalf("seed %d: %s", seed, d)
		}
	}
}

// TestSimulationReplays runs each seed WRITEFENCE_SIM_REPLAY times and
// names every seed whose run differs from its first, with where the two
// first part: the scheduler's first differing step, and the history's
// first differing entry.
func TestSimulationReplays(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("WRITEFENCE_SIM_REPLAY"))
	if n < 2 {
		t.Skip("WRITEFENCE_SIM_REPLAY=N runs each seed N times and compares the runs")
	}
	var differ []uint64
	for _, seed := range seeds(t) {
		wa, a, _ := simulate(t, seed, configFor(seed))
		for range n - 1 {
			wb, b, _ := simulate(t, seed, configFor(seed))
			if d := divergence(wa, a, wb, b); d != "" {
				differ = append(differ, seed)
				t.Logf("seed %d: %s\ntally: %v", seed, d, wb.Tally())
				break
			}
		}
	}
	t.Logf("%d of %d seeds replay in %d runs each; differ: %v", len(seeds(t))-len(differ), len(seeds(t)), n, differ)
	if len(differ) > 0 {
		t.Errorf("%d seeds do not replay: %v", len(differ), differ)
	}
}

// divergence describes where two runs of one seed first part, or is empty
// when they do not.
func divergence(wa *World, a *promise.History, wb *World, b *promise.History) string {
	var out string
	ta, tb := wa.Trace(), wb.Trace()
	for i := range max(len(ta), len(tb)) {
		if i >= len(ta) || i >= len(tb) || ta[i] != tb[i] {
			at := func(tr []string) string {
				return strings.Join(tr[max(i-3, 0):min(i+1, len(tr))], "\n  ")
			}
			out = fmt.Sprintf("scheduler step %d differs:\n  %s\nthen:\n  %s\n", i, at(ta), at(tb))
			break
		}
	}
	for i := range min(len(a.Entries), len(b.Entries)) {
		if !sameEntry(a.Entries[i], b.Entries[i]) {
			return out + fmt.Sprintf("entry %d differs:\n%s\nthen:\n%s", i, Describe(a, wa, i-12, i+2), Describe(b, wb, i-12, i+2))
		}
	}
	if len(a.Entries) != len(b.Entries) {
		return out + fmt.Sprintf("%d entries, then %d", len(a.Entries), len(b.Entries))
	}
	return out
}

// sameEntry compares two entries by what was called and what changed,
// errors by their messages.
func sameEntry(a, b promise.Entry) bool {
	return reflect.DeepEqual(describeEntry(a), describeEntry(b))
}

func describeEntry(e promise.Entry) map[string]any {
	call := func(c *promise.Call) map[string]any {
		return map[string]any{"id": c.ID, "proc": c.Proc, "op": c.Op, "writer": c.Writer, "epoch": c.Epoch, "got": c.Got,
			"start": c.Start.UnixNano(), "end": c.End.UnixNano(), "err": errString(c.Err), "ref": c.Ref, "bytes": string(c.Bytes),
			"events": eventStrings(c.Events)}
	}
	switch {
	case e.Begin != nil:
		return map[string]any{"begin": call(e.Begin)["id"]}
	case e.End != nil:
		return map[string]any{"end": call(e.End)}
	}
	ch := e.Change
	return map[string]any{"call": ch.Call, "kind": ch.Kind, "key": ch.Key, "data": string(ch.Data), "version": ch.Version,
		"fault": ch.Fault, "at": ch.At.UnixNano(), "modified": ch.Modified.UnixNano()}
}

// eventStrings describes what the Observer saw during a call, and where
// in the history (promise 27).
func eventStrings(events []promise.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s %s retrying=%v err=%s at %d", e.Op, e.Key, e.Retrying, errString(e.Err), e.Place))
	}
	return out
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// TestSimulationOnDirectoryStore runs a few seeds over the directory
// store: its files, its damage checks, its blobs.
func TestSimulationOnDirectoryStore(t *testing.T) {
	n := 20
	if testing.Short() {
		n = 5
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		cfg := configFor(seed)
		cfg.Dir = t.TempDir()
		w, h, found := simulate(t, seed, cfg)
		if len(found) > 0 {
			v := found[0]
			t.Fatalf("seed %d, step %d: %s\n%s", seed, w.Step(v.Entry), v, Describe(h, w, v.Entry-40, v.Entry))
		}
	}
}

// outcomes counts how the history's calls ended, by op and outcome, and
// the blobs Collect deleted: what a run exercised, its keys under prefix.
func outcomes(h *promise.History, prefix string) map[string]int {
	out := map[string]int{}
	ops := map[int]promise.Op{}
	shardKey, err := keys.Shard(prefix, plugin, shard)
	if err != nil {
		panic(err)
	}
	for _, e := range h.Entries {
		switch {
		case e.Begin != nil:
			ops[e.Begin.ID] = e.Begin.Op
		case e.Change != nil && e.Change.Call != 0 && e.Change.Key == keys.Brand(prefix):
			out[e.Change.Kind+" "+e.Change.Fault+", the brand"]++
		case e.Change != nil && e.Change.Kind == "put" && ops[e.Change.Call] == promise.Collect && e.Change.Key == shardKey:
			out["collect put the horizon"]++
		case e.Change != nil && e.Change.Call != 0 && strings.HasPrefix(e.Change.Key, keys.Probe(prefix)):
			out[e.Change.Kind+" "+e.Change.Fault+", a probe"]++
		case e.Change != nil && (e.Change.Fault == "transient" || e.Change.Fault == "lost") && (ops[e.Change.Call] == promise.PutBlob || ops[e.Change.Call] == promise.Collect):
			out["fault "+e.Change.Fault+", "+string(ops[e.Change.Call])+" "+e.Change.Request]++
		case e.End != nil && e.End.Err == nil:
			out[string(e.End.Op)+" ok"]++
		case e.End != nil && len(e.End.Is) > 0:
			out[string(e.End.Op)+" "+e.End.Is[0]]++
		case e.Change != nil && e.Change.Kind == "delete blob" && e.Change.Call != 0:
			out["blob deleted"]++
		case e.Change != nil && e.Change.Kind == "fault":
			out["fault "+e.Change.Fault]++
		}
	}
	return out
}

func TestSimulationMessages(t *testing.T) {
	if os.Getenv("WRITEFENCE_SIM_MESSAGES") == "" {
		t.Skip("WRITEFENCE_SIM_MESSAGES=op shows the errors of op's calls")
	}
	msgs := map[string]int{}
	for seed := uint64(1); seed <= 200; seed++ {
		_, h, _ := simulate(t, seed, DefaultConfig)
		for _, e := range h.Entries {
			if e.End != nil && e.End.Err != nil && string(e.End.Op) == os.Getenv("WRITEFENCE_SIM_MESSAGES") {
				m := e.End.Err.Error()
				if len(m) > 160 {
					m = m[:160]
				}
				msgs[m]++
			}
		}
	}
	for m, n := range msgs {
		if n > 3 {
			t.Logf("%5d %s", n, m)
		}
	}
}

// earlyTakeovers counts the lease records of h written by another
// incarnation over a record whose expiry had not passed by the world's
// clock: takeovers by a lease clock ahead of it; its keys are under
// prefix.
func earlyTakeovers(h *promise.History, prefix string) int {
	key, err := keys.Lease(prefix, leaseName)
	if err != nil {
		panic(err)
	}
	n := 0
	var last *record.Lease
	for _, e := range h.Entries {
		ch := e.Change
		if ch == nil || ch.Kind != "put" || ch.Key != key {
			continue
		}
		l, check := record.DecodeLease(ch.Data)
		if check != "" {
			last = nil
			continue
		}
		if last != nil && l.Incarnation != last.Incarnation && l.Incarnation != ([16]byte{}) && last.Expiry > ch.At.UnixNano() {
			n++
		}
		last = &l
	}
	return n
}
