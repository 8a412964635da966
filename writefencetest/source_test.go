package writefencetest_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/writefencetest"
)

// errFakeDeposed is the sentinel of the fake election's leaders.
var errFakeDeposed = errors.New("fake election: not leader")

// sourceFault is how a fake election's leaders break the contract of an
// EpochSource, if they do.
type sourceFault int

const (
	sourceCorrect     sourceFault = iota
	sourceIgnoresCtx              // correct, and makes no call a context could stop, as Lease.Epoch
	sourceRepeats                 // every third draw of a shard hands out its last epoch again
	sourceZero                    // the election's first epoch is 0
	sourcePerLeader               // each leader counts from 1, as a term used as an epoch would not
	sourceZombie                  // a deposed leader draws on
	sourceBareError               // a deposed leader's error matches no sentinel
	sourceEpochAndErr             // a deposed leader returns its last epoch beside its error
	sourceCancelEnds              // a cancelled context ends the leadership
	sourceRacy                    // a draw reads the count, then writes it back one up, a round trip apart
	sourceExpires                 // correct, and the leadership runs out by the clock, as a Lease's does
)

// fakeElection is a control plane that mints epochs from one counter, as
// etcd's revisions or ZooKeeper's zxids rise, and the leaders of it.
type fakeElection struct {
	fault sourceFault
	gap   compareGap // the round trip of sourceRacy

	mu      sync.Mutex // guards the fields below
	counter uint64
	calls   int // draws that handed out an epoch
	leader  *fakeLeader
}

// fakeLeader is one leader of a fakeElection.
type fakeLeader struct {
	e       *fakeElection
	gone    error     // why it leads no more; nil while it leads
	expiry  time.Time // for sourceExpires: when its leadership runs out
	counted uint64    // its own count, for sourcePerLeader
	last    uint64
	shards  map[string][]uint64 // the epochs of each shard, for sourceRepeats
}

// fakeTTL is how long a sourceExpires leadership lasts.
const fakeTTL = time.Hour

func (l *fakeLeader) Epoch(ctx context.Context, _, shard string) (uint64, error) {
	e := l.e
	if e.fault != sourceIgnoresCtx && e.fault != sourceExpires {
		if err := ctx.Err(); err != nil {
			if e.fault == sourceCancelEnds {
				e.mu.Lock()
				l.gone = fmt.Errorf("cancelled: %w", errFakeDeposed)
				e.mu.Unlock()
			}
			return 0, err
		}
	}
	e.mu.Lock()
	if e.fault == sourceExpires && l.gone == nil && !time.Now().Before(l.expiry) {
		l.gone = fmt.Errorf("expired: %w", errFakeDeposed)
	}
	if l.gone != nil && e.fault != sourceZombie {
		defer e.mu.Unlock()
		switch e.fault {
		case sourceBareError:
			return 0, errors.New("fake election: not leader")
		case sourceEpochAndErr:
			return l.last, l.gone
		}
		return 0, l.gone
	}
	switch e.fault {
	case sourceRacy:
		n := e.counter
		e.mu.Unlock()
		e.gap.compared(true)
		e.mu.Lock()
		e.counter = n + 1
	case sourcePerLeader:
		l.counted++
		e.counter = l.counted
	case sourceRepeats:
		drawn := l.shards[shard]
		if len(drawn)%3 == 2 {
			l.shards[shard] = append(drawn, drawn[len(drawn)-1])
			e.mu.Unlock()
			return drawn[len(drawn)-1], nil
		}
		e.counter++
		l.shards[shard] = append(drawn, e.counter)
	case sourceZero:
		if e.calls > 0 {
			e.counter++
		}
	default:
		e.counter++
	}
	e.calls++
	l.last = e.counter
	epoch := e.counter
	e.mu.Unlock()
	return epoch, nil
}

// election returns the kit's Election over a fresh fakeElection.
func (e *fakeElection) election() writefencetest.Election {
	return writefencetest.Election{
		Lead: func(t *testing.T) writefence.EpochSource {
			e.mu.Lock()
			defer e.mu.Unlock()
			require.Nil(t, e.leader, "Lead while a leader is in office")
			e.leader = &fakeLeader{e: e, expiry: time.Now().Add(fakeTTL), shards: map[string][]uint64{}}
			return e.leader
		},
		Depose: func(t *testing.T) {
			if e.fault == sourceExpires {
				time.Sleep(fakeTTL) // in the bubble: at once
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.leader.gone == nil && e.fault != sourceExpires {
				e.leader.gone = fmt.Errorf("deposed: %w", errFakeDeposed)
			}
			e.leader = nil
		},
		Deposed: errFakeDeposed,
		Resign: func(t *testing.T) {
			e.mu.Lock()
			defer e.mu.Unlock()
			e.leader.gone = fmt.Errorf("resigned: %w", errFakeDeposed)
			e.leader = nil
		},
	}
}

// brokenSourceEnv selects the fault TestHelperBrokenSource runs the kit
// against.
const brokenSourceEnv = "WRITEFENCETEST_BROKEN_SOURCE"

var sourceFaults = map[string]sourceFault{
	"correct": sourceCorrect, "ignores-ctx": sourceIgnoresCtx, "repeats": sourceRepeats, "zero": sourceZero,
	"per-leader": sourcePerLeader, "zombie": sourceZombie, "bare-error": sourceBareError, "epoch-and-error": sourceEpochAndErr,
	"cancel-ends": sourceCancelEnds, "racy": sourceRacy, "expires": sourceExpires,
}

// TestHelperBrokenSource is not a test on its own: TestSourceKitHasTeeth
// runs it in a child process.
func TestHelperBrokenSource(t *testing.T) {
	fault := childOf(t, brokenSourceEnv, "TestSourceKitHasTeeth", sourceFaults)
	writefencetest.TestEpochSource(t, func(*testing.T) writefencetest.Election {
		return (&fakeElection{fault: fault}).election()
	}, &writefencetest.SourceOptions{Bubble: fault == sourceExpires})
}

var failedSourceCheck = regexp.MustCompile(`--- FAIL: TestHelperBrokenSource/(\S+/\S+) `)

// TestSourceKitHasTeeth runs the epoch-source kit against each fake
// election in a child process and checks which clauses fail: none on a
// correct source, and on each broken one exactly the clauses it breaks.
func TestSourceKitHasTeeth(t *testing.T) {
	later := []string{"Leaders/Fenced", "Leaders/Later"}
	deposed := []string{"Leaders/Deposed", "Leaders/Fenced", "Leaders/Resigned"}
	tests := []struct {
		source   string
		wantFail []string
	}{
		{"correct", nil},
		{"ignores-ctx", nil},
		{"expires", nil}, // Depose sleeps an hour: in the bubble, at once
		{"repeats", []string{"Epochs/Concurrent", "Epochs/Rising"}},
		{"zero", []string{"Epochs/Canceled", "Epochs/Concurrent", "Epochs/Rising", "Leaders/Deposed", "Leaders/Fenced", "Leaders/Later", "Leaders/Resigned"}},
		{"per-leader", concat(later, []string{"Leaders/Deposed", "Leaders/Resigned"})},
		{"zombie", deposed},
		{"bare-error", deposed},
		{"epoch-and-error", []string{"Leaders/Deposed", "Leaders/Resigned"}},
		{"cancel-ends", []string{"Epochs/Canceled"}},
		{"racy", []string{"Epochs/Concurrent"}},
	}
	sources := make([]string, len(tests))
	for i, tt := range tests {
		sources[i] = tt.source
	}
	done := runChildren(t, "TestHelperBrokenSource", brokenSourceEnv, "2m", sources, runtime.GOMAXPROCS(0))
	for i, tt := range tests {
		t.Run(tt.source, func(t *testing.T) {
			r := <-done[i]
			assert.NotContains(t, string(r.out), "--- SKIP: TestHelperBrokenSource/Leaders/Resigned", "the kit skipped a check it was given what it needs for")
			if len(tt.wantFail) == 0 {
				require.NoError(t, r.err, "the kit failed on %s:\n%s", tt.source, r.out)
				return
			}
			var exit *exec.ExitError
			require.ErrorAs(t, r.err, &exit, "the kit passed on %s:\n%s", tt.source, r.out)
			failed := subtests(failedSourceCheck, r.out)
			assert.Equal(t, sorted(tt.wantFail), failed, "failing subtests on %s; child output:\n%s", tt.source, tailLines(r.out, 60))
		})
	}
}
