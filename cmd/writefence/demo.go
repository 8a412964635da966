package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
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
invariant broke. Interrupted (SIGINT, SIGTERM), it judges nothing and exits
130.

examples:
  writefence demo
  writefence demo -writers 32 -epochs 200 -seed 7`,
	define: defineDemo,
}

func defineDemo(fs *flag.FlagSet, _ *invocation) action {
	writers := fs.Int("writers", 8, "concurrent writers in the race")
	epochs := fs.Int("epochs", 24, "epochs handed out in the race, in random order")
	seed := fs.Uint64("seed", 0, "random seed for the race (0 = random)")
	asJSON := fs.Bool("json", false, "print JSON lines on stdout: one object per push, the race, then the verdict")
	return func(ctx context.Context, inv *invocation, _ []string) int {
		o := &output{inv: inv, json: *asJSON}
		if *writers < 1 || *epochs < 1 {
			return o.fail(usagef("writefence demo: -writers and -epochs must be at least 1"))
		}
		return runDemo(ctx, o, *writers, *epochs, *seed)
	}
}

// demoPush is one push of the demo, and a -json line.
type demoPush struct {
	Event   string `json:"event"` // "push"
	Scene   int    `json:"scene"`
	Writer  string `json:"writer"`
	Epoch   uint64 `json:"epoch"`
	Payload string `json:"payload"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// demoRace is the summary of the demo's race, and a -json line.
type demoRace struct {
	Event   string         `json:"event"` // "race"
	Writers int            `json:"writers"`
	Epochs  []uint64       `json:"epochs"` // handed out
	Seed    uint64         `json:"seed"`
	Landed  []uint64       `json:"landed"`
	Refused map[string]int `json:"refused"` // by outcome
}

// demoVerdict is what the store saw, and the last -json line.
type demoVerdict struct {
	Outcome        string   `json:"outcome"`
	Landings       []uint64 `json:"landings"` // epochs in the store's order
	RecordedEpoch  uint64   `json:"recorded_epoch"`
	RecordedWriter string   `json:"recorded_writer"`
	Violations     []string `json:"violations"`
}

func runDemo(ctx context.Context, o *output, writers, epochs int, seed uint64) int {
	if seed == 0 {
		seed = rand.Uint64()
	}

	log := &landingLog{}
	log.reader.Store = &log.store
	fence := &writefence.Fence{Store: log}
	var outMu sync.Mutex // writers report concurrently
	out := func(format string, a ...any) {
		if o.json {
			return
		}
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(o.inv.stdout, format+"\n", a...)
	}

	out("writefence demo: shard %s/%s on the in-memory store", demoPlugin, demoShard)
	out("")
	out("1. a leader is deposed; the zombie keeps pushing")
	scene := 1
	step := func(writer string, epoch uint64, payload string) {
		err := fence.Push(ctx, demoPlugin, demoShard, writer, epoch, []byte(payload))
		if ctx.Err() != nil {
			return // interrupted: what the push met says nothing of the fence
		}
		if o.json {
			p := demoPush{Event: "push", Scene: scene, Writer: writer, Epoch: epoch, Payload: payload}
			_, p.Outcome = classify(err)
			if err != nil {
				p.Error = message(err)
			}
			outMu.Lock()
			o.emit(p)
			outMu.Unlock()
			return
		}
		if err == nil {
			out("   %-9s epoch %-3d landed   %q", writer, epoch, payload)
		} else {
			out("   %-9s epoch %-3d refused  %v", writer, epoch, message(err))
		}
	}
	// interrupted ends the demo once ctx is done (SIGINT, SIGTERM): the
	// pushes it cut short landed nothing and the record need not hold the
	// highest epoch, so the invariants cannot be judged and nothing is a
	// violation.
	interrupted := func() int {
		return o.fail(fmt.Errorf("writefence demo: interrupted: %w", ctx.Err()))
	}
	step("leader-a", 1, "segment 0001")
	step("leader-a", 2, "segment 0002")
	step("leader-b", 3, "snapshot after failover")
	step("leader-a", 2, "segment 0003 (zombie)")
	step("leader-a", 3, "segment 0003 (zombie claims the new epoch)")

	if ctx.Err() != nil {
		return interrupted()
	}
	base := uint64(3)
	scene = 2
	out("")
	out("2. a confused control plane hands epoch %d to two writers", base+1)
	var wg sync.WaitGroup
	for _, w := range []string{"twin-x", "twin-y"} {
		wg.Go(func() { step(w, base+1, "written by "+w) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return interrupted()
	}
	base++

	out("")
	out("3. %d writers race epochs %d..%d in random order (seed %d)", writers, base+1, base+uint64(epochs), seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	order := rng.Perm(epochs)
	var (
		mu      sync.Mutex // guards the tallies below
		landed  = []uint64{}
		refused = map[string]int{}
		byName  = map[string]int{}
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
					_, name := classify(err)
					byName[name]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return interrupted()
	}
	slices.Sort(landed)
	if o.json {
		handed := make([]uint64, epochs)
		for i, e := range order {
			handed[i] = base + 1 + uint64(e)
		}
		o.emit(demoRace{Event: "race", Writers: writers, Epochs: handed, Seed: seed, Landed: landed, Refused: byName})
	}
	out("   landed:  %d pushes, epochs %v", len(landed), landed)
	for r, n := range refused {
		out("   refused: %d pushes, %s", n, r)
	}

	out("")
	if o.json {
		v := verdict(ctx, log, fence, base+uint64(epochs))
		v.Outcome = "ok"
		code := exitOK
		if len(v.Violations) > 0 {
			v.Outcome, code = "violation", exitViolation
		}
		o.emit(v)
		return code
	}
	return checkInvariants(ctx, out, log, fence, base+uint64(epochs))
}

func reason(err error) string {
	switch {
	case errors.Is(err, writefence.ErrStaleEpoch):
		return "stale epoch (a higher or equal epoch was already recorded)"
	case errors.Is(err, writefence.ErrConflict):
		return "conflict retries exhausted"
	default:
		return message(err)
	}
}

// verdict checks what the store saw: landed epochs strictly rise (so none
// landed twice) and the record holds the highest epoch handed out.
func verdict(ctx context.Context, log *landingLog, fence *writefence.Fence, highest uint64) demoVerdict {
	log.mu.Lock()
	seen := slices.Clone(log.epochs)
	log.mu.Unlock()
	v := demoVerdict{Landings: seen, Violations: []string{}}
	for i := 1; i < len(seen); i++ {
		if seen[i] <= seen[i-1] {
			v.Violations = append(v.Violations, fmt.Sprintf("epoch %d landed after epoch %d", seen[i], seen[i-1]))
		}
	}
	epoch, writer, _, err := fence.Latest(ctx, demoPlugin, demoShard)
	switch {
	case err != nil:
		v.Violations = append(v.Violations, "cannot read the record: "+message(err))
	case epoch != highest:
		v.Violations = append(v.Violations, fmt.Sprintf("recorded epoch %d, but epoch %d was pushed", epoch, highest))
	}
	v.RecordedEpoch, v.RecordedWriter = epoch, writer
	return v
}

// checkInvariants prints the verdict and returns the exit status.
func checkInvariants(ctx context.Context, out func(string, ...any), log *landingLog, fence *writefence.Fence, highest uint64) int {
	v := verdict(ctx, log, fence, highest)
	for _, msg := range v.Violations {
		out("VIOLATION: %s", msg)
	}
	if len(v.Violations) > 0 {
		return exitViolation
	}
	out("invariants hold: %d landings in strictly rising epoch order %v", len(v.Landings), v.Landings)
	out("                 no epoch landed twice; recorded epoch %d by %s is the highest pushed", v.RecordedEpoch, v.RecordedWriter)
	return exitOK
}
