package writefencetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/pushrace"
)

// Size of every race: modest, so the suite stays quick against a real
// server on a small machine, yet enough goroutines meet in each round to
// expose a client-side compare. Races can still be missed; see the package
// documentation.
const (
	raceRounds  = 20
	raceWorkers = 16
)

// together runs n goroutines. Each runs before(i) (if before is non-nil),
// then waits until all n have done so, then runs during(i); together returns
// when all have finished. Holding them at one gate makes the during calls
// reach the store as nearly at once as the scheduler allows.
func together(n int, before, during func(i int)) {
	var ready, done sync.WaitGroup
	gate := make(chan struct{})
	ready.Add(n)
	done.Add(n)
	for i := range n {
		go func() {
			defer done.Done()
			if before != nil {
				before(i)
			}
			ready.Done()
			<-gate
			during(i)
		}()
	}
	ready.Wait()
	close(gate)
	done.Wait()
}

// tally sorts the results of one round into winners and losers, reporting
// any loser whose error does not match want.
type tally struct {
	winners []int
	losers  int
	other   int
}

func (ty *tally) add(t *testing.T, round, i int, err, want error) {
	t.Helper()
	switch {
	case err == nil:
		ty.winners = append(ty.winners, i)
	case errors.Is(err, want):
		ty.losers++
	default:
		ty.other++
		t.Errorf("round %d goroutine %d: %v; want nil or an error matching %v", round, i, err, want)
	}
}

// round tallies one round's errors, adds them to ty and returns them.
func (ty *tally) round(t *testing.T, r int, errs []error, want error) tally {
	t.Helper()
	var round tally
	for i, err := range errs {
		round.add(t, r, i, err, want)
	}
	ty.winners = append(ty.winners, round.winners...)
	ty.losers += round.losers
	ty.other += round.other
	return round
}

// settle tallies round r of conditional writes to key, described by what,
// into ty: exactly one may land, every other must be refused with
// ErrConflict, and key must then hold the winner's bytes and the version
// its write returned (written[i] for goroutine i).
func (ty *tally) settle(t *testing.T, s writefence.ConditionalStore, r int, key string, errs []error, written []string, what string) {
	t.Helper()
	round := ty.round(t, r, errs, writefence.ErrConflict)
	if len(round.winners) != 1 {
		t.Errorf("round %d: %d of %d %s landed; want exactly 1", r, len(round.winners), len(errs), what)
		return
	}
	w := round.winners[0]
	wantContent(t, s, key, racePayload(r, w), written[w])
}

// log reports the totals of the rounds of goroutines doing what.
func (ty *tally) log(t *testing.T, what string) {
	t.Logf("%d rounds x %d goroutines %s: %d landed, %d conflicts, %d other errors",
		raceRounds, raceWorkers, what, len(ty.winners), ty.losers, ty.other)
}

// racePayload is unique per round and goroutine, so the stored bytes name
// the winner.
func racePayload(round, i int) []byte {
	return fmt.Appendf(nil, "round %d goroutine %d", round, i)
}

// testRaceUpdate makes every goroutine read the same token and then update
// with it: exactly one update per round may land.
func testRaceUpdate(t *testing.T, sc *scope) {
	key := sc.key("race-update")
	put(t, sc.s, key, []byte("round 0"), "")
	var total tally
	for r := 1; r <= raceRounds; r++ {
		var (
			read    = make([]string, raceWorkers)
			readErr = make([]error, raceWorkers)
			written = make([]string, raceWorkers)
			errs    = make([]error, raceWorkers)
		)
		together(raceWorkers, func(i int) {
			_, read[i], readErr[i] = sc.s.Get(t.Context(), key)
		}, func(i int) {
			if readErr[i] == nil {
				written[i], errs[i] = sc.s.PutIfVersion(t.Context(), key, racePayload(r, i), read[i])
			}
		})
		for i, err := range readErr {
			if err != nil {
				t.Fatalf("round %d goroutine %d: Get(%q): %v", r, i, key, err)
			}
			if read[i] != read[0] {
				t.Fatalf("round %d: goroutines read versions %q and %q with no write in between", r, read[0], read[i])
			}
		}
		total.settle(t, sc.s, r, key, errs, written, fmt.Sprintf("updates with the same version %q", read[0]))
	}
	total.log(t, "updating with one version")
}

// testRaceCreate makes every goroutine create the same new key: exactly one
// create per round may land.
func testRaceCreate(t *testing.T, sc *scope) {
	var total tally
	for r := 1; r <= raceRounds; r++ {
		key := sc.key(fmt.Sprintf("race-create-%02d", r))
		var (
			written = make([]string, raceWorkers)
			errs    = make([]error, raceWorkers)
		)
		together(raceWorkers, nil, func(i int) {
			written[i], errs[i] = sc.s.PutIfVersion(t.Context(), key, racePayload(r, i), "")
		})
		total.settle(t, sc.s, r, key, errs, written, fmt.Sprintf("create-only puts of %q", key))
	}
	total.log(t, "creating one key")
}

// testRaceFencePush runs RacePush: writers, each with a Fence of its own,
// push the same epoch to one shard, with the epoch rising each round, and
// every one of them has read the record before any of them writes. Exactly
// one push per epoch may land, and Latest must return it.
func testRaceFencePush(t *testing.T, sc *scope) {
	const plugin, shard = "writefencetest", "race"
	prefix := sc.prefix + "fence/"
	key, err := keys.Shard(prefix, plugin, shard)
	if err != nil {
		t.Fatalf("ShardKey: %v", err)
	}
	sc.track(key)
	rounds, err := pushrace.Run(t.Context(), sc.s, pushrace.Race{
		Writers: raceWorkers, Rounds: raceRounds,
		Prefix: prefix, Plugin: plugin, Shard: shard,
	})
	if err != nil {
		t.Fatalf("RacePush: %v", err)
	}
	var landed, stale, other int
	for _, r := range rounds {
		landed += len(r.Winners)
		stale += r.Stale
		other += len(r.Errors)
		for _, err := range r.Errors {
			t.Errorf("round %d: %v; want nil or an error matching %v", r.Round, err, writefence.ErrStaleEpoch)
		}
		for _, v := range r.Violations {
			t.Errorf("round %d: %s; want exactly 1 of %d pushes at one epoch to land, and the record to be its", r.Round, v, raceWorkers)
		}
	}
	t.Logf("%d rounds x %d writers pushing one epoch: %d landed, %d stale, %d other errors",
		len(rounds), raceWorkers, landed, stale, other)
}

// Size of the overwrite check: the writes one writer makes while readers
// read the key without pause.
const (
	overwriteWrites  = 50
	overwriteReaders = 4
	overwritePrefix  = 12 // bytes GetPrefix asks for: enough to name the write
)

// overwriteContent is write i's bytes: they name the write in their first
// overwritePrefix bytes, are longer than that, and their length varies so a
// size from another write shows.
func overwriteContent(i int) []byte {
	return fmt.Appendf(nil, "write %04d %s", i, bytes.Repeat([]byte{'x'}, 2+i%7))
}

// readPair is what one read returned: bytes (or a prefix and a size) and a
// version.
type readPair struct {
	data    string
	version string
	size    int64 // -1 for a Get, else the size GetPrefix returned
}

// testGetUnderOverwrite has one writer overwrite a key while readers read
// it (with Get, and GetPrefix when the store has it) and checks afterwards
// that every read paired its bytes with the version of the write that
// stored them. A server that returns a new body with the previous version
// under concurrent overwrite (or the reverse) fails here.
func testGetUnderOverwrite(t *testing.T, sc *scope) {
	key := sc.key("overwrite")
	pr, _ := sc.s.(writefence.PrefixReader)
	named := map[string][]byte{} // each write's version and bytes, filled by the writer
	v := put(t, sc.s, key, overwriteContent(0), "")
	named[v] = overwriteContent(0)

	var (
		stop    = make(chan struct{})
		started sync.WaitGroup // each reader has read once: writes meet reads
		readers sync.WaitGroup
		seen    = make([]map[readPair]int, overwriteReaders)
		errs    = make([]error, overwriteReaders)
	)
	started.Add(overwriteReaders)
	for r := range overwriteReaders {
		seen[r] = map[readPair]int{}
		read := func(prefix bool) error {
			var p readPair
			if prefix {
				data, size, v, err := pr.GetPrefix(t.Context(), key, overwritePrefix)
				if err != nil {
					return fmt.Errorf("GetPrefix(%q, %d): %w", key, overwritePrefix, err)
				}
				p = readPair{data: string(data), version: v, size: size}
			} else {
				data, v, err := sc.s.Get(t.Context(), key)
				if err != nil {
					return fmt.Errorf("Get(%q): %w", key, err)
				}
				p = readPair{data: string(data), version: v, size: -1}
			}
			seen[r][p]++
			return nil
		}
		readers.Go(func() {
			for n := 0; errs[r] == nil; n++ {
				errs[r] = read(pr != nil && n%2 == 1)
				if n == 0 {
					started.Done()
				}
				select {
				case <-stop:
					// One more read of each kind, after the last write:
					// a store that lags a write shows even if every
					// read during the writes was lucky.
					if errs[r] == nil {
						errs[r] = read(false)
					}
					if errs[r] == nil && pr != nil {
						errs[r] = read(true)
					}
					return
				default:
				}
			}
		})
	}
	started.Wait()
	var writeErr error
	for i := 1; i <= overwriteWrites && writeErr == nil; i++ {
		data := overwriteContent(i)
		v, writeErr = sc.s.PutIfVersion(t.Context(), key, data, v)
		if writeErr == nil {
			if prev, ok := named[v]; ok {
				writeErr = fmt.Errorf("write %d returned version %q, the version of %s", i, v, describe(prev))
			}
			named[v] = data
		}
	}
	close(stop)
	readers.Wait()
	if writeErr != nil {
		t.Fatalf("PutIfVersion(%q) by the only writer: %v", key, writeErr)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatalf("a read during the overwrites: %v", err)
		}
	}

	reads, bad := 0, 0
	for _, m := range seen {
		for p, count := range m {
			reads += count
			if msg := mismatch(p, named); msg != "" {
				if bad++; bad <= 5 {
					t.Errorf("%s (%d times)", msg, count)
				}
			}
		}
	}
	if bad > 5 {
		t.Errorf("and %d more such reads", bad-5)
	}
	t.Logf("%d writes, %d reads by %d readers, %d distinct (bytes, version) pairs that no write made",
		overwriteWrites, reads, overwriteReaders, bad)
}

// mismatch says how p disagrees with the write its version names, if it
// does.
func mismatch(p readPair, named map[string][]byte) string {
	what := "Get"
	if p.size >= 0 {
		what = fmt.Sprintf("GetPrefix(%d)", overwritePrefix)
	}
	want, ok := named[p.version]
	switch {
	case !ok:
		return fmt.Sprintf("%s during the overwrites returned %s with version %q, which no write returned", what, describe([]byte(p.data)), p.version)
	case p.size < 0 && p.data != string(want):
		return fmt.Sprintf("%s during the overwrites returned %s with version %q, the version of %s: bytes and version of different writes",
			what, describe([]byte(p.data)), p.version, describe(want))
	case p.size >= 0 && (p.data != string(want[:min(len(want), overwritePrefix)]) || p.size != int64(len(want))):
		return fmt.Sprintf("%s during the overwrites returned %s of size %d with version %q, the version of %s: bytes and version of different writes",
			what, describe([]byte(p.data)), p.size, p.version, describe(want))
	}
	return ""
}
