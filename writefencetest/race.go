package writefencetest

import (
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

// together runs n goroutines. Each runs before(i) (if before is non-nil)
// and waits at a barrier; once all n are there, between runs (if
// non-nil) and then every goroutine runs during(i) at once; together
// returns when all have finished. The barrier makes every racer's write
// follow every racer's read, so the race is forced, not hoped for.
func together(n int, before func(i int), between func(), during func(i int)) {
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
	if between != nil {
		between()
	}
	close(gate)
	done.Wait()
}

// tally sorts the results of one round into winners and losers, reporting
// any loser whose error does not match want.
type tally struct {
	winners []int
	losers  int
	refused int // by the brand, in a race under a changed brand
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

// log reports the totals of rounds rounds of goroutines doing what.
func (ty *tally) log(t *testing.T, rounds int, what string) {
	refused := ""
	if ty.refused > 0 {
		refused = fmt.Sprintf(", %d refused by the brand", ty.refused)
	}
	t.Logf("%d rounds x %d goroutines %s: %d landed, %d conflicts%s, %d other errors",
		rounds, raceWorkers, what, len(ty.winners), ty.losers, refused, ty.other)
}

// racePayload is unique per round and goroutine, so the stored bytes name
// the winner.
func racePayload(round, i int) []byte {
	return fmt.Appendf(nil, "round %d goroutine %d", round, i)
}

// readAll has every racer read key, and fails the test unless they all
// read one version, which it returns.
func readAll(t *testing.T, r int, key string, read []string, readErr []error) string {
	t.Helper()
	for i, err := range readErr {
		if err != nil {
			t.Fatalf("round %d goroutine %d: Get(%q): %v", r, i, key, err)
		}
		if read[i] != read[0] {
			t.Fatalf("round %d: goroutines read versions %q and %q with no write in between", r, read[0], read[i])
		}
	}
	return read[0]
}

// testRaceUpdate makes every goroutine read the same token and then update
// with it through writefence.PutParts, its bytes in two parts: exactly one
// update per round may land.
func testRaceUpdate(t *testing.T, sc *scope) {
	logPaths(t, sc, "PutParts")
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
		}, nil, func(i int) {
			if readErr[i] == nil {
				written[i], errs[i] = writefence.PutParts(t.Context(), sc.s, key, split(racePayload(r, i)), read[i])
			}
		})
		v := readAll(t, r, key, read, readErr)
		total.settle(t, sc.s, r, key, errs, written, fmt.Sprintf("PutParts updates with the same version %q", v))
	}
	total.log(t, raceRounds, "updating with one version")
}

// testRaceCreate makes every goroutine create the same new key through
// writefence.PutParts: exactly one create per round may land.
func testRaceCreate(t *testing.T, sc *scope) {
	logPaths(t, sc, "PutParts")
	var total tally
	for r := 1; r <= raceRounds; r++ {
		key := sc.key(fmt.Sprintf("race-create-%02d", r))
		var (
			written = make([]string, raceWorkers)
			errs    = make([]error, raceWorkers)
		)
		together(raceWorkers, nil, nil, func(i int) {
			written[i], errs[i] = writefence.PutParts(t.Context(), sc.s, key, split(racePayload(r, i)), "")
		})
		total.settle(t, sc.s, r, key, errs, written, fmt.Sprintf("create-only PutParts of %q", key))
	}
	total.log(t, raceRounds, "creating one key")
}

// brandRace is a race of writefence.PutIfBranded calls on one key under
// one brand key, which holds brandedIdentity between rounds.
type brandRace struct {
	sc           *scope
	brand, key   string
	brandVersion string // the brand key's current version
	total        tally
}

func newBrandRace(t *testing.T, sc *scope) *brandRace {
	br := &brandRace{sc: sc, brand: sc.key("race-brand"), key: sc.key("race-branded")}
	skipUnsupported(t, sc, br.brand, br.key)
	br.brandVersion = put(t, sc.s, br.brand, []byte(brandedIdentity), "")
	put(t, sc.s, br.key, []byte("round 0"), "")
	return br
}

// round runs round r: every racer reads the key, then, when flip is set,
// the brand key is changed to otherIdentity, then every racer writes
// through PutIfBranded with the version it read. Unflipped, exactly one
// write lands and every other is refused with ErrConflict; flipped, every
// write is refused with a *writefence.WireError naming otherIdentity and
// the key is left as it was. A flipped brand is put back after the round.
func (br *brandRace) round(t *testing.T, r int, flip bool) {
	t.Helper()
	s := br.sc.s
	data, version, err := s.Get(t.Context(), br.key)
	if err != nil {
		t.Fatalf("Get(%q): %v", br.key, err)
	}
	var (
		read    = make([]string, raceWorkers)
		readErr = make([]error, raceWorkers)
		written = make([]string, raceWorkers)
		errs    = make([]error, raceWorkers)
		flipErr error
	)
	together(raceWorkers, func(i int) {
		_, read[i], readErr[i] = s.Get(t.Context(), br.key)
	}, func() {
		if flip {
			br.brandVersion, flipErr = writefence.PutParts(t.Context(), s, br.brand, [][]byte{[]byte(otherIdentity)}, br.brandVersion)
		}
	}, func(i int) {
		if readErr[i] == nil && flipErr == nil {
			written[i], errs[i] = writefence.PutIfBranded(t.Context(), s, br.brand, brandedIdentity, br.key, split(racePayload(r, i)), read[i])
		}
	})
	if flipErr != nil {
		t.Fatalf("round %d: PutParts(%q) changing the brand to %q: %v", r, br.brand, otherIdentity, flipErr)
	}
	v := readAll(t, r, br.key, read, readErr)
	if !flip {
		br.total.settle(t, s, r, br.key, errs, written, fmt.Sprintf("PutIfBranded updates with the same version %q under the brand", v))
		return
	}
	landed := 0
	for i, err := range errs {
		switch {
		case err == nil:
			landed++
		case errors.Is(err, writefence.ErrWire):
			br.total.refused++
		default:
			br.total.other++
		}
		wantWire(t, err, fmt.Sprintf("round %d goroutine %d: PutIfBranded(%q, %q, %q, ..., %q) after the brand key changed to %q",
			r, i, br.brand, brandedIdentity, br.key, v, otherIdentity), br.brand, otherIdentity)
	}
	if landed > 0 {
		t.Errorf("round %d: %d of %d PutIfBranded writes landed after the brand key changed to %q; want none", r, landed, raceWorkers, otherIdentity)
	}
	br.total.winners = append(br.total.winners, make([]int, landed)...)
	wantContent(t, s, br.key, data, version)
	br.brandVersion, err = writefence.PutParts(t.Context(), s, br.brand, [][]byte{[]byte(brandedIdentity)}, br.brandVersion)
	if err != nil {
		t.Fatalf("round %d: PutParts(%q) putting the brand back: %v", r, br.brand, err)
	}
}

// testRaceBranded makes every goroutine read the same version and then
// write through writefence.PutIfBranded under a brand key that holds the
// identity: exactly one write per round may land, as for PutParts. A
// store that checks the brand in the write's step but compares the
// version on the client lets several land.
func testRaceBranded(t *testing.T, sc *scope) {
	logPaths(t, sc, "PutIfBranded")
	br := newBrandRace(t, sc)
	for r := 1; r <= raceRounds; r++ {
		br.round(t, r, false)
	}
	br.total.log(t, raceRounds, "writing under the brand with one version")
}

// testRaceBrandFlip alternates rounds of testRaceBranded with rounds in
// which, after every goroutine has read the version and before any
// writes, the brand key is changed to another identity: then every write
// must be refused with ErrWire and the key must keep its bytes and
// version. A store that remembers a brand it once found, instead of
// reading it in every write's step, lets the first writer of a flipped
// round land.
func testRaceBrandFlip(t *testing.T, sc *scope) {
	logPaths(t, sc, "PutIfBranded")
	br := newBrandRace(t, sc)
	for r := 1; r <= raceRounds; r++ {
		br.round(t, r, r%2 == 0)
	}
	br.total.log(t, raceRounds, "writing under a brand changed every other round")
}

// testRaceFencePush runs pushrace.Run: writers, each with a Fence of its
// own, push the same epoch to one shard, with the epoch rising each round,
// and every one of them has read the record before any of them writes.
// Exactly one push per epoch may land, and Latest must return it.
func testRaceFencePush(t *testing.T, sc *scope) {
	logPaths(t, sc, "GetPrefix", "PutParts")
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
		t.Fatalf("pushrace.Run: %v", err)
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
