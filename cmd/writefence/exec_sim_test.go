//go:build unix

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/record"
)

// The supervisor on virtual time (testing/synctest): real Leases on one
// MemStore, the supervisor's own loop and decisions, and programs that are
// goroutines pushing through push -term's code every half second. A
// supervisor is partitioned by cutting its lease's path to the store, and
// paused by blocking its loop as well (its renewals fail, as a stopped
// process's would not be sent). Time moves only when every goroutine
// waits, so each run is deterministic and every instant exact.

const (
	simTTL   = 8 * time.Second // margin 1s
	simGrace = time.Second     // SIGTERM with 2s of the term left, SIGKILL with 1s
	simEvery = 500 * time.Millisecond
)

var simPolicy = policy{ttl: simTTL, grace: simGrace}

// simCut is a store a supervisor's lease reaches the MemStore through:
// cut, every call fails, as under a partition.
type simCut struct {
	writefence.ConditionalStore
	cut atomic.Bool
}

var errSimCut = errors.New("store unreachable")

func (s *simCut) Get(ctx context.Context, key string) ([]byte, string, error) {
	if s.cut.Load() {
		return nil, "", errSimCut
	}
	return s.ConditionalStore.Get(ctx, key)
}

func (s *simCut) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	if s.cut.Load() {
		return "", errSimCut
	}
	return s.ConditionalStore.PutIfVersion(ctx, key, data, expect)
}

// simEvent is one thing that happened, on the bubble's clock.
type simEvent struct {
	at     time.Time
	who    string // the supervisor's holder name
	what   string // start, push, refused, exit, seal, signal
	term   uint64
	epoch  uint64
	status int
	sig    syscall.Signal
}

// simWorld is one store, the supervisors on it and what happened.
type simWorld struct {
	t     *testing.T
	store *simStore
	mu    sync.Mutex // guards log
	log   []simEvent
	pid   atomic.Int64
}

// simStore is the world's store: it keeps, in the order they landed, the
// epoch and writer of every record written to wal/0, which the times of
// the events cannot tell apart within one instant.
type simStore struct {
	writefence.MemStore
	mu     sync.Mutex // serializes writes, so that landed is in the store's order
	landed []landing
}

type landing struct {
	epoch  uint64
	writer string
}

func (s *simStore) PutIfVersion(ctx context.Context, key string, data []byte, expect string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	v, err := s.MemStore.PutIfVersion(ctx, key, data, expect)
	if err == nil && key == "writefence/s/wal/0" {
		h, check := record.DecodeHeader(data)
		if check != "" {
			return v, fmt.Errorf("simStore: a record that does not decode landed: %s", check)
		}
		s.landed = append(s.landed, landing{h.Epoch, h.Writer})
	}
	return v, err
}

func (s *simStore) landings() []landing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.landed)
}

func (w *simWorld) record(e simEvent) {
	e.at = time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.log = append(w.log, e)
}

func (w *simWorld) events(who, what string) []simEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []simEvent
	for _, e := range w.log {
		if (who == "" || e.who == who) && (what == "" || e.what == what) {
			out = append(out, e)
		}
	}
	return out
}

// simBehaviour is how a simulated program acts.
type simBehaviour struct {
	ignoreTerm bool          // SIGTERM does nothing: only SIGKILL ends it
	termDelay  time.Duration // how long it takes to exit after SIGTERM
	exitAfter  time.Duration // exits by itself with exitCode after this long; 0: never
	exitCode   int
}

// simSup is one supervisor of the simulation.
type simSup struct {
	w       *simWorld
	name    string
	cut     *simCut
	signals chan os.Signal
	mu      sync.Mutex    // guards paused
	paused  chan struct{} // closed on resume; nil when running
	code    chan int
	logs    strings.Builder
	logMu   sync.Mutex
}

// supervise starts a supervisor of holder name for lease "wal" sealing
// wal/0, whose programs behave as b.
func (w *simWorld) supervise(name string, p policy, b simBehaviour) *simSup {
	s := &simSup{w: w, name: name, cut: &simCut{ConditionalStore: w.store}, signals: make(chan os.Signal, 8), code: make(chan int, 1)}
	fence := &writefence.Fence{Store: s.cut, Observer: func(_ context.Context, e writefence.WriteEvent) {
		if e.Op == "seal" && e.Err == nil {
			w.record(simEvent{who: name, what: "seal", term: e.Epoch >> 32, epoch: e.Epoch})
		}
	}}
	sup := &supervisor{
		p:      p,
		name:   "wal",
		shards: []writefence.Shard{{Plugin: "wal", Shard: "0"}},
		newLease: func() leaseHolder {
			return &writefence.Lease{Fence: fence, Name: "wal", Holder: name, TTL: p.ttl}
		},
		start:       func(term uint64) (program, int, error) { return w.startProgram(name, term, b), 0, nil },
		signals:     s.signals,
		terminating: terminatingSignal,
		logf: func(format string, a ...any) {
			s.logMu.Lock()
			defer s.logMu.Unlock()
			fmt.Fprintf(&s.logs, "%v %s: "+format+"\n", append([]any{time.Now().Format("05.000"), name}, a...)...)
		},
		advise: func(err error) error { return err },
		pause:  s.wait,
	}
	go func() {
		code := sup.run(context.Background())
		s.code <- code
	}()
	return s
}

// pause stops the supervisor's loop and cuts its lease off the store.
func (s *simSup) pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.paused = make(chan struct{})
	s.cut.cut.Store(true)
}

func (s *simSup) resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut.cut.Store(false)
	close(s.paused)
	s.paused = nil
}

func (s *simSup) wait() {
	s.mu.Lock()
	ch := s.paused
	s.mu.Unlock()
	if ch != nil {
		<-ch
	}
}

func (s *simSup) log() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.logs.String()
}

// exit waits for the supervisor to end, at most d, and returns its status.
func (s *simSup) exit(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case code := <-s.code:
		return code
	case <-time.After(d):
		t.Fatalf("%s did not end within %v; its log:\n%s", s.name, d, s.log())
		return -1
	}
}

// simProgram is a program as a goroutine: it pushes every simEvery at its
// term until a signal ends it.
type simProgram struct {
	pid    int
	sigs   chan syscall.Signal
	done   chan struct{}
	status int
	sent   func(sig syscall.Signal) // records a signal sent to its group
}

func (p *simProgram) Signal(sig syscall.Signal) error {
	p.sent(sig)
	select {
	case p.sigs <- sig:
	default: // it is gone, or will be: nothing reads
	}
	return nil
}

func (p *simProgram) Done() <-chan struct{} { return p.done }
func (p *simProgram) Status() int           { return p.status }
func (p *simProgram) Pid() int              { return p.pid }

// startProgram starts a program of holder at term. It checks first that
// the supervisor started it only once the shard was sealed at its term.
func (w *simWorld) startProgram(holder string, term uint64, b simBehaviour) program {
	ctx := context.Background()
	fence := &writefence.Fence{Store: w.store}
	epoch, writer, _, err := fence.Latest(ctx, "wal", "0")
	if err != nil || epoch>>32 != term || writer != holder {
		w.t.Errorf("%s's program started at term %d, but wal/0 records epoch %d of term %d by %s (%v): not sealed", holder, term, epoch, epoch>>32, writer, err)
	}
	p := &simProgram{pid: int(w.pid.Add(1)), sigs: make(chan syscall.Signal, 16), done: make(chan struct{}), sent: func(sig syscall.Signal) {
		w.record(simEvent{who: holder, what: "signal", term: term, sig: sig})
	}}
	w.record(simEvent{who: holder, what: "start", term: term})
	go func() {
		exit := func(status int) {
			p.status = status
			w.record(simEvent{who: holder, what: "exit", term: term, status: status})
			close(p.done)
		}
		tick := time.NewTicker(simEvery)
		defer tick.Stop()
		var selfExit, termExit <-chan time.Time
		if b.exitAfter > 0 {
			selfExit = time.After(b.exitAfter)
		}
		n := 0
		for {
			select {
			case sig := <-p.sigs:
				switch {
				case sig == syscall.SIGKILL:
					exit(128 + int(syscall.SIGKILL))
					return
				case sig == syscall.SIGTERM && !b.ignoreTerm && termExit == nil:
					termExit = time.After(b.termDelay)
				}
			case <-termExit:
				exit(128 + int(syscall.SIGTERM))
				return
			case <-selfExit:
				exit(b.exitCode)
				return
			case <-tick.C:
				n++
				epoch, err := pushTerm(ctx, fence, term, "wal", "0", holder, fmt.Appendf(nil, "%s term %d #%d", holder, term, n))
				switch {
				case err == nil:
					w.record(simEvent{who: holder, what: "push", term: term, epoch: epoch})
				case errors.Is(err, writefence.ErrStaleEpoch):
					w.record(simEvent{who: holder, what: "refused", term: term})
				default:
					w.t.Errorf("%s's push at term %d: %v", holder, term, err)
				}
			}
		}
	}()
	return p
}

// checkPushes checks what every history must show, in the order the
// store took the writes: epochs strictly rise, so no write of a term lands
// after the seal of a later one; each term is written by one holder and
// begins with its seal (its first epoch); every push a program was told
// landed is there.
func (w *simWorld) checkPushes(t *testing.T) {
	t.Helper()
	landed := w.store.landings()
	holder := map[uint64]string{}
	got := map[uint64]bool{}
	var last uint64
	for _, l := range landed {
		term := l.epoch >> 32
		if l.epoch <= last {
			t.Errorf("epoch %d (term %d, by %s) landed after epoch %d", l.epoch, term, l.writer, last)
		}
		if last>>32 != term && l.epoch&maxTerm != 1 {
			t.Errorf("term %d began with epoch %d by %s, not with its seal", term, l.epoch, l.writer)
		}
		if h, ok := holder[term]; ok && h != l.writer {
			t.Errorf("term %d written by %s and %s", term, h, l.writer)
		}
		holder[term], got[l.epoch], last = l.writer, true, l.epoch
	}
	for _, e := range w.events("", "push") {
		if !got[e.epoch] {
			t.Errorf("%s's push at epoch %d returned nil but is not in the store's history", e.who, e.epoch)
		}
	}
}

// landedAfter returns the writes by who the store took after the first
// write by first.
func (w *simWorld) landedAfter(first, who string) []landing {
	var out []landing
	seen := false
	for _, l := range w.store.landings() {
		seen = seen || l.writer == first
		if seen && l.writer == who {
			out = append(out, l)
		}
	}
	return out
}

// running returns the intervals each holder's programs ran: [start, exit).
func (w *simWorld) running(who string) [][2]time.Time {
	var out [][2]time.Time
	for _, e := range w.events(who, "") {
		switch e.what {
		case "start":
			out = append(out, [2]time.Time{e.at})
		case "exit":
			out[len(out)-1][1] = e.at
		}
	}
	return out
}

func overlap(a, b [2]time.Time) bool {
	end := func(x [2]time.Time) time.Time {
		if x[1].IsZero() {
			return time.Unix(1<<40, 0)
		}
		return x[1]
	}
	return a[0].Before(end(b)) && b[0].Before(end(a))
}

func simulate(t *testing.T, f func(t *testing.T, w *simWorld)) {
	synctest.Test(t, func(t *testing.T) {
		w := &simWorld{t: t, store: &simStore{}}
		f(t, w)
		w.checkPushes(t)
	})
}

// TestExecSimPartition: a holder cut off from the store stops its program
// before its term can end, by its own clock: SIGTERM with margin + grace
// left, the program gone by the margin; the contender takes over only once
// the term has ended, so the two programs never run at once, and the
// stopped supervisor exits 75.
func TestExecSimPartition(t *testing.T) {
	simulate(t, func(t *testing.T, w *simWorld) {
		a := w.supervise("a", simPolicy, simBehaviour{termDelay: 300 * time.Millisecond})
		time.Sleep(time.Second)
		b := w.supervise("b", simPolicy, simBehaviour{termDelay: 300 * time.Millisecond})
		time.Sleep(9 * time.Second)
		a.cut.cut.Store(true)
		cutAt := time.Now()

		assert.Equal(t, exitLeaseEnded, a.exit(t, time.Minute), "%s", a.log())
		exits := w.events("a", "exit")
		require.Len(t, exits, 1)
		// The last renewal landed at most TTL/3 before the cut, the term
		// ending TTL after it: the program was gone by margin before that,
		// after SIGTERM 300ms earlier.
		lastRenewal := cutAt.Add(-simTTL / 3)
		assert.False(t, exits[0].at.After(lastRenewal.Add(simTTL-simPolicy.margin())), "a's program exited at %v, after the margin", exits[0].at.Sub(cutAt))
		assert.Equal(t, 143, exits[0].status, "SIGTERM ended it")

		bStarts := w.events("b", "start")
		for deadline := time.Now().Add(time.Minute); len(bStarts) == 0 && time.Now().Before(deadline); bStarts = w.events("b", "start") {
			time.Sleep(100 * time.Millisecond)
		}
		require.Len(t, bStarts, 1, "%s", b.log())
		assert.Equal(t, uint64(2), bStarts[0].term)
		for _, ra := range w.running("a") {
			for _, rb := range w.running("b") {
				assert.False(t, overlap(ra, rb), "the programs of a %v and b %v ran at once", ra, rb)
			}
		}
		time.Sleep(3 * time.Second)
		assert.NotEmpty(t, w.events("b", "push"))
		assert.Contains(t, a.log(), "no renewal landed: stopping the program")
		b.signals <- syscall.SIGTERM
		assert.Equal(t, 143, b.exit(t, time.Minute), "b ends with its program's status")
	})
}

// TestExecSimPaused: a supervisor that is paused cannot stop its program,
// which runs on past the term; the contender takes over and seals, and
// from then on every push of the old program is refused by the store.
// Once the supervisor runs again it stops the program at once: SIGTERM,
// and, as this program ignores it, SIGKILL exactly a grace later.
func TestExecSimPaused(t *testing.T) {
	simulate(t, func(t *testing.T, w *simWorld) {
		a := w.supervise("a", simPolicy, simBehaviour{ignoreTerm: true})
		time.Sleep(time.Second)
		b := w.supervise("b", simPolicy, simBehaviour{termDelay: 100 * time.Millisecond})
		time.Sleep(9 * time.Second)
		a.pause()
		time.Sleep(30 * time.Second)

		seals := w.events("b", "seal")
		require.Len(t, seals, 1, "b took over while a was paused: %s", b.log())
		assert.Empty(t, w.landedAfter("b", "a"), "a's program landed pushes after b's seal")
		for _, e := range w.events("a", "refused") {
			assert.False(t, e.at.Before(seals[0].at), "a's program refused at %v, before b's seal at %v", e.at, seals[0].at)
		}
		assert.Greater(t, len(w.events("a", "push")), 10, "a's program pushed while its term held")
		assert.Greater(t, len(w.events("a", "refused")), 20, "a's paused supervisor did not stop its program, whose pushes the store refused")
		assert.Empty(t, w.events("a", "exit"), "nothing stopped a's program while a was paused")

		a.resume()
		resumed := time.Now()
		assert.Equal(t, exitLeaseEnded, a.exit(t, time.Minute), "%s", a.log())
		exits := w.events("a", "exit")
		require.Len(t, exits, 1)
		assert.Equal(t, simGrace, exits[0].at.Sub(resumed), "SIGKILL a grace after the supervisor ran again")
		assert.Equal(t, 137, exits[0].status)
		sigs := w.events("a", "signal")
		require.Len(t, sigs, 3)
		assert.Equal(t, []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL, syscall.SIGKILL}, []syscall.Signal{sigs[0].sig, sigs[1].sig, sigs[2].sig}, "SIGTERM, SIGKILL, and SIGKILL to what is left of its group")
		assert.Equal(t, resumed, sigs[0].at, "SIGTERM the moment the supervisor ran again")

		b.signals <- syscall.SIGTERM
		assert.Equal(t, 143, b.exit(t, time.Minute))
	})
}

// TestExecSimRestart: with -restart a supervisor that stopped its program
// for the lease waits for it again, and once the other holder releases it
// (its program exited), runs the program anew in a new term, with the
// lease sealed at that term first.
func TestExecSimRestart(t *testing.T) {
	simulate(t, func(t *testing.T, w *simWorld) {
		p := simPolicy
		p.restart = true
		a := w.supervise("a", p, simBehaviour{termDelay: 100 * time.Millisecond})
		time.Sleep(time.Second)
		b := w.supervise("b", simPolicy, simBehaviour{exitAfter: 20 * time.Second, exitCode: 0})
		time.Sleep(5 * time.Second)
		a.cut.cut.Store(true)
		time.Sleep(8 * time.Second)
		a.cut.cut.Store(false)

		assert.Equal(t, 0, b.exit(t, time.Minute), "b ends with its program's status: %s", b.log())
		for deadline := time.Now().Add(time.Minute); len(w.events("a", "start")) < 2 && time.Now().Before(deadline); {
			time.Sleep(100 * time.Millisecond)
		}
		starts := w.events("a", "start")
		require.Len(t, starts, 2, "%s", a.log())
		bTerm := w.events("b", "start")[0].term
		assert.Equal(t, []uint64{1, bTerm + 1}, []uint64{starts[0].term, starts[1].term})
		bExit := w.events("b", "exit")[0].at
		assert.LessOrEqual(t, starts[1].at.Sub(bExit), simTTL/4, "a takes the released lease at its next try, a quarter TTL on at most")
		for _, ra := range w.running("a") {
			for _, rb := range w.running("b") {
				assert.False(t, overlap(ra, rb), "the programs of a %v and b %v ran at once", ra, rb)
			}
		}
		time.Sleep(2 * time.Second)
		a.signals <- syscall.SIGTERM
		assert.Equal(t, 143, a.exit(t, time.Minute), "%s", a.log())
	})
}

// TestExecSimSignalsAndStatus: exec forwards signals to the program and
// ends with its status when it exits by itself, releasing the lease so
// the next holder takes it at once rather than after a TTL.
func TestExecSimSignalsAndStatus(t *testing.T) {
	simulate(t, func(t *testing.T, w *simWorld) {
		a := w.supervise("a", simPolicy, simBehaviour{exitAfter: 10 * time.Second, exitCode: 3})
		time.Sleep(time.Second)
		b := w.supervise("b", simPolicy, simBehaviour{termDelay: time.Second})
		time.Sleep(time.Second)
		a.signals <- syscall.SIGUSR1
		assert.Equal(t, 3, a.exit(t, time.Minute), "%s", a.log())
		aExit := time.Now()
		sigs := w.events("a", "signal")
		require.Len(t, sigs, 2)
		assert.Equal(t, syscall.SIGUSR1, sigs[0].sig, "forwarded")
		assert.Equal(t, syscall.SIGKILL, sigs[1].sig, "what it left in its group is killed")
		assert.Contains(t, a.log(), "term 1 released")

		time.Sleep(simTTL / 4)
		starts := w.events("b", "start")
		require.Len(t, starts, 1, "b took the released lease within a quarter TTL: %s", b.log())
		assert.LessOrEqual(t, starts[0].at.Sub(aExit), simTTL/4)

		b.signals <- syscall.SIGTERM
		time.Sleep(simGrace / 2)
		b.signals <- syscall.SIGTERM // a second one is forwarded too
		assert.Equal(t, 143, b.exit(t, time.Minute))
		assert.Len(t, w.events("b", "signal"), 3, "two SIGTERMs and the group's SIGKILL")
	})
}

// TestExecSimGivesUp: exec interrupted while it waits for the lease ends
// with 130 and -timeout with 75, having started nothing; a Hold in flight
// is cancelled first.
func TestExecSimGivesUp(t *testing.T) {
	simulate(t, func(t *testing.T, w *simWorld) {
		a := w.supervise("a", simPolicy, simBehaviour{})
		time.Sleep(time.Second)
		p := simPolicy
		p.wait = 5 * time.Second
		b := w.supervise("b", p, simBehaviour{})
		start := time.Now()
		assert.Equal(t, exitLeaseEnded, b.exit(t, time.Minute))
		assert.Equal(t, 5*time.Second, time.Since(start))
		c := w.supervise("c", simPolicy, simBehaviour{})
		time.Sleep(3 * time.Second)
		c.signals <- syscall.SIGINT
		assert.Equal(t, exitInterrupted, c.exit(t, time.Minute))
		assert.Empty(t, w.events("b", "start"))
		assert.Empty(t, w.events("c", "start"))
		a.signals <- syscall.SIGTERM
		assert.Equal(t, 143, a.exit(t, time.Minute))
	})
}

// TestExecSimDeterministic: the supervisor's decisions depend on the
// virtual clock alone: the same history, run twice, starts, seals, signals
// and ends the programs at the same instants, with the same terms and
// statuses. (Pushes are left out: one that meets a seal in the same
// instant lands or not by how the goroutines run.)
func TestExecSimDeterministic(t *testing.T) {
	run := func() []string {
		var out []string
		t.Run("run", func(t *testing.T) {
			simulate(t, func(t *testing.T, w *simWorld) {
				t0 := time.Now()
				until := func(d time.Duration) { time.Sleep(time.Until(t0.Add(d))) }
				a := w.supervise("a", simPolicy, simBehaviour{ignoreTerm: true})
				until(time.Second)
				b := w.supervise("b", simPolicy, simBehaviour{})
				until(5 * time.Second)
				a.pause()
				until(20 * time.Second)
				a.resume()
				out = append(out, fmt.Sprint("a ", a.exit(t, time.Minute)))
				until(25 * time.Second)
				b.signals <- syscall.SIGTERM
				out = append(out, fmt.Sprint("b ", b.exit(t, time.Minute)))
				for _, e := range w.events("", "") {
					if e.what != "push" && e.what != "refused" {
						out = append(out, fmt.Sprintf("%v %s %s term %d epoch %d status %d %v", e.at.Sub(t0), e.who, e.what, e.term, e.epoch, e.status, e.sig))
					}
				}
			})
		})
		return out
	}
	first := run()
	require.Greater(t, len(first), 8)
	second := run()
	assert.Equal(t, first, second, "two runs differ")
}
