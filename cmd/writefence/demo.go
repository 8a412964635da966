package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/writefence/writefence"
)

const (
	demoPlugin = "wal"
	demoShard  = "shard-0"
)

// landingLog wraps the store and records, in the store's own order, the
// epoch of every record that lands, so the invariants are checked against
// what the storage saw rather than what the writers believe.
type landingLog struct {
	store  writefence.MemStore
	reader writefence.Fence // decodes what landed
	mu     sync.Mutex       // serialises writes with their logging; guards epochs
	epochs []uint64
}

func (l *landingLog) Get(ctx context.Context, key string) ([]byte, string, error) {
	return l.store.Get(ctx, key)
}

func (l *landingLog) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	v, err := l.store.PutIfVersion(ctx, key, data, expect)
	if err != nil {
		return v, err
	}
	e, _, _, err := l.reader.Latest(ctx, demoPlugin, demoShard)
	if err != nil {
		return "", err
	}
	l.epochs = append(l.epochs, e)
	return v, nil
}

var demoCommand = command{
	name:    "demo",
	args:    "",
	nargs:   0,
	summary: "race writers on one shard of the in-memory store and check the invariants",
	help: `
Shows the fence at work on the embedded in-memory store: a deposed leader's
zombie pushes, two writers handed the same epoch, then -writers writers racing
-epochs epochs in random order. It checks what the store saw (landed epochs
strictly rise, the record holds the highest epoch) and exits 10 if an
invariant broke.

examples:
  writefence demo
  writefence demo -writers 32 -epochs 200 -seed 7`,
	define: defineDemo,
}

func defineDemo(fs *flag.FlagSet, _ *invocation) action {
	writers := fs.Int("writers", 8, "concurrent writers in the race")
	epochs := fs.Int("epochs", 24, "epochs handed out in the race, in random order")
	seed := fs.Uint64("seed", 0, "random seed for the race (0 = random)")
	return func(ctx context.Context, inv *invocation, _ []string) int {
		if *writers < 1 || *epochs < 1 {
			fmt.Fprintln(inv.stderr, "writefence demo: -writers and -epochs must be at least 1")
			return exitUsage
		}
		return runDemo(ctx, inv.stdout, *writers, *epochs, *seed)
	}
}

func runDemo(ctx context.Context, stdout io.Writer, writers, epochs int, seed uint64) int {
	if seed == 0 {
		seed = rand.Uint64()
	}

	log := &landingLog{}
	log.reader.Store = &log.store
	fence := &writefence.Fence{Store: log}
	var outMu sync.Mutex // writers report concurrently
	out := func(format string, a ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(stdout, format+"\n", a...)
	}

	out("writefence demo: shard %s/%s on the in-memory store", demoPlugin, demoShard)
	out("")
	out("1. a leader is deposed; the zombie keeps pushing")
	step := func(writer string, epoch uint64, payload string) {
		err := fence.Push(ctx, demoPlugin, demoShard, writer, epoch, []byte(payload))
		if err == nil {
			out("   %-9s epoch %-3d landed   %q", writer, epoch, payload)
		} else {
			out("   %-9s epoch %-3d refused  %v", writer, epoch, err)
		}
	}
	step("leader-a", 1, "segment 0001")
	step("leader-a", 2, "segment 0002")
	step("leader-b", 3, "snapshot after failover")
	step("leader-a", 2, "segment 0003 (zombie)")
	step("leader-a", 3, "segment 0003 (zombie claims the new epoch)")

	base := uint64(3)
	out("")
	out("2. a confused control plane hands epoch %d to two writers", base+1)
	var wg sync.WaitGroup
	for _, w := range []string{"twin-x", "twin-y"} {
		wg.Go(func() { step(w, base+1, "written by "+w) })
	}
	wg.Wait()
	base++

	out("")
	out("3. %d writers race epochs %d..%d in random order (seed %d)", writers, base+1, base+uint64(epochs), seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	order := rng.Perm(epochs)
	var (
		mu      sync.Mutex // guards the tallies below
		landed  []uint64
		refused = map[string]int{}
	)
	for w := range writers {
		wg.Go(func() {
			// Each racer climbs its own share of the epochs, as a writer
			// re-elected several times would.
			var mine []uint64
			for i := w; i < len(order); i += writers {
				mine = append(mine, base+1+uint64(order[i]))
			}
			slices.Sort(mine)
			for _, epoch := range mine {
				err := fence.Push(ctx, demoPlugin, demoShard, fmt.Sprintf("racer-%d", w), epoch, []byte("x"))
				mu.Lock()
				if err == nil {
					landed = append(landed, epoch)
				} else {
					refused[reason(err)]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(landed)
	out("   landed:  %d pushes, epochs %v", len(landed), landed)
	for r, n := range refused {
		out("   refused: %d pushes, %s", n, r)
	}

	out("")
	return checkInvariants(ctx, out, log, fence, base+uint64(epochs))
}

func reason(err error) string {
	switch {
	case errors.Is(err, writefence.ErrStaleEpoch):
		return "stale epoch (a higher or equal epoch was already recorded)"
	case errors.Is(err, writefence.ErrConflict):
		return "conflict retries exhausted"
	default:
		return err.Error()
	}
}

// checkInvariants checks what the store saw: landed epochs strictly rise (so
// none landed twice) and the record holds the highest epoch handed out.
func checkInvariants(ctx context.Context, out func(string, ...any), log *landingLog, fence *writefence.Fence, highest uint64) int {
	log.mu.Lock()
	seen := slices.Clone(log.epochs)
	log.mu.Unlock()
	ok := true
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			out("VIOLATION: epoch %d landed after epoch %d", seen[i], seen[i-1])
			ok = false
		}
	}
	epoch, writer, _, err := fence.Latest(ctx, demoPlugin, demoShard)
	switch {
	case err != nil:
		out("VIOLATION: cannot read the record: %v", err)
		ok = false
	case epoch != highest:
		out("VIOLATION: recorded epoch %d, but epoch %d was pushed", epoch, highest)
		ok = false
	}
	if !ok {
		return exitViolation
	}
	out("invariants hold: %d landings in strictly rising epoch order %v", len(seen), seen)
	out("                 no epoch landed twice; recorded epoch %d by %s is the highest pushed", epoch, writer)
	return exitOK
}
