package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
)

// The supervisor's decisions, as a pure function of the time, its lease
// and its program: each case sets the machine up through its events, as
// the supervisor would, and asks for the next action.

var (
	machineT0  = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	machinePol = policy{ttl: 8 * time.Second, grace: time.Second} // margin 1s: SIGTERM with 2s left, SIGKILL with 1s
)

func at(d time.Duration) time.Time { return machineT0.Add(d) }

// heldMachine is a machine that took term 3 at t0, expiring at t0+TTL.
func heldMachine(p policy) *machine {
	m := newMachine(p, machineT0)
	m.acquiring()
	m.held(3, at(p.ttl))
	return m
}

// freshMachine is a machine that has done nothing yet, at t0.
func freshMachine(p policy) *machine { return newMachine(p, machineT0) }

// acquiringMachine is freshMachine with a Hold in flight.
func acquiringMachine(p policy) *machine {
	m := freshMachine(p)
	m.acquiring()
	return m
}

// then is the machine start makes, put through events.
func then(start func(policy) *machine, events func(m *machine)) func(policy) *machine {
	return func(p policy) *machine {
		m := start(p)
		events(m)
		return m
	}
}

// runningMachine is heldMachine with its program started.
func runningMachine(p policy) *machine {
	m := heldMachine(p)
	m.started()
	return m
}

func TestExecMachineDecisions(t *testing.T) {
	errNet := errors.New("writefence: dial tcp 127.0.0.1:1: connection refused")
	errStale := &writefence.StaleEpochError{Op: "seal", Key: "writefence/s/wal/0", Epoch: 2<<32 | 1, RecordedEpoch: 9<<32 | 1, RecordedWriter: "x"}
	lost := &writefence.LeaseLostError{Name: "wal", Term: 3, Holder: "b", NewTerm: 4}
	restart := machinePol
	restart.restart = true
	waiting := machinePol
	waiting.wait = 30 * time.Second
	heldBy := func(expiry time.Duration) error {
		return &writefence.LeaseHeldError{Name: "wal", Holder: "b", Term: 2, Expiry: at(expiry)}
	}
	refused := func(err error) func(policy) *machine {
		return then(acquiringMachine, func(m *machine) { m.holdFailed(machineT0, err) })
	}
	stopping := then(runningMachine, func(m *machine) { m.terminating(at(7*time.Second), "expiring") })
	cases := []struct {
		name string
		p    policy
		m    func(p policy) *machine
		now  time.Duration
		want decision
	}{
		{"a new supervisor acquires", machinePol, freshMachine, 0, decision{act: actAcquire}},
		{"a Hold in flight is waited for", machinePol, acquiringMachine, time.Hour, decision{act: actWait}},
		{"a Hold in flight is waited for until -timeout", waiting, acquiringMachine, time.Second, decision{act: actWait, at: at(30 * time.Second)}},
		{"held by another: tried again at its holder's expiry", machinePol, refused(heldBy(1500 * time.Millisecond)), 0, decision{act: actWait, at: at(1500 * time.Millisecond)}},
		{"held by another: tried again a quarter TTL on at the latest", machinePol, refused(heldBy(time.Hour)), 0, decision{act: actWait, at: at(2 * time.Second)}},
		{"held by another whose expiry passed: a sixteenth TTL on at the soonest", machinePol, refused(heldBy(-time.Hour)), 0, decision{act: actWait, at: at(500 * time.Millisecond)}},
		{"held by another: acquire once the time comes", machinePol, refused(heldBy(time.Second)), time.Second, decision{act: actAcquire}},
		{"a takeover that timed out: again an eighth TTL on", machinePol, refused(fmt.Errorf("writefence: lease wal: takeover given up: %w", writefence.ErrTakeoverTimeout)), 0, decision{act: actWait, at: at(time.Second)}},
		{"an unreachable store before the first term: give up", machinePol, refused(errNet), 0, decision{act: actExit, code: exitError, err: errNet}},
		{"an unreachable store after a term: again a quarter TTL on", restart, then(runningMachine, func(m *machine) {
			m.leaseEnded(lost)
			m.terminating(at(time.Second), "lost")
			m.exited(143)
			m.released(at(time.Second))
			m.acquiring()
			m.holdFailed(at(time.Second), errNet)
		}), time.Second, decision{act: actWait, at: at(3 * time.Second)}},
		{"a damaged lease record: give up", restart, refused(&writefence.CorruptError{Key: "writefence/_lease/wal", Check: "checksum"}), 0, decision{act: actExit, code: exitCorrupt, err: &writefence.CorruptError{Key: "writefence/_lease/wal", Check: "checksum"}}},
		{"a seal refused as stale: again an eighth TTL on", restart, refused(errStale), 0, decision{act: actWait, at: at(time.Second)}},
		{"a seal refused as stale three times in a row: give up", restart, then(freshMachine, func(m *machine) {
			for range staleHolds {
				m.acquiring()
				m.holdFailed(machineT0, errStale)
			}
		}), 0, decision{act: actExit, code: exitStale, err: errStale}},
		{"stale refusals not in a row: again", restart, then(freshMachine, func(m *machine) {
			for range staleHolds {
				m.acquiring()
				m.holdFailed(machineT0, errStale)
				m.acquiring()
				m.holdFailed(machineT0, heldBy(time.Second))
			}
			m.acquiring()
			m.holdFailed(machineT0, errStale)
		}), 0, decision{act: actWait, at: at(time.Second)}},
		{"-timeout passed while waiting: give up", waiting, refused(heldBy(time.Hour)), 30 * time.Second, decision{act: actExit, code: exitLeaseEnded}},
		{"-timeout passed with a Hold in flight: cancel it first", waiting, acquiringMachine, 30 * time.Second, decision{act: actCancel}},
		{"-timeout passed with the Hold cancelled: wait for it", waiting, then(acquiringMachine, func(m *machine) { m.cancelling() }), 31 * time.Second, decision{act: actWait}},

		{"held with the whole term left: start", machinePol, heldMachine, 0, decision{act: actStart}},
		{"held with half the term left: start", machinePol, heldMachine, 4 * time.Second, decision{act: actStart}},
		{"held with less than half the term left: wait for a renewal", machinePol, heldMachine, 4*time.Second + 1, decision{act: actWait, at: at(4*time.Second + 1 + 500*time.Millisecond)}},
		{"held, then renewed: start", machinePol, then(heldMachine, func(m *machine) { m.renewed(at(13 * time.Second)) }), 5 * time.Second, decision{act: actStart}},
		{"the lease ended before the program started: release", machinePol, then(heldMachine, func(m *machine) { m.leaseEnded(lost) }), 0, decision{act: actRelease}},

		{"running: wait until SIGTERM is due", machinePol, runningMachine, time.Second, decision{act: actWait, at: at(6 * time.Second)}},
		{"running, renewed: SIGTERM is due later", machinePol, then(runningMachine, func(m *machine) { m.renewed(at(10 * time.Second)) }), 3 * time.Second, decision{act: actWait, at: at(8 * time.Second)}},
		{"running, margin + grace left: SIGTERM, SIGKILL at the margin", machinePol, runningMachine, 6 * time.Second, decision{act: actTerm, killBy: at(7 * time.Second)}},
		{"running, SIGTERM late: SIGKILL still at the margin", machinePol, runningMachine, 6500 * time.Millisecond, decision{act: actTerm, killBy: at(7 * time.Second)}},
		{"running, past the margin (the supervisor was paused): SIGKILL a grace on", machinePol, runningMachine, 9 * time.Second, decision{act: actTerm, killBy: at(10 * time.Second)}},
		{"running, the lease lost early: SIGTERM, SIGKILL a grace on", machinePol, then(runningMachine, func(m *machine) { m.leaseEnded(lost) }), 2 * time.Second, decision{act: actTerm, killBy: at(3 * time.Second)}},
		{"running, the lease lost near the margin: SIGKILL by the margin", machinePol, then(runningMachine, func(m *machine) { m.leaseEnded(lost) }), 6500 * time.Millisecond, decision{act: actTerm, killBy: at(7 * time.Second)}},
		{"running, -grace 0: SIGKILL at once", policy{ttl: 8 * time.Second}, runningMachine, 7 * time.Second, decision{act: actTerm, killBy: at(7 * time.Second)}},
		{"running, interrupted: the program decides (the signal was forwarded)", machinePol, then(runningMachine, func(m *machine) { m.interrupt() }), time.Second, decision{act: actWait, at: at(6 * time.Second)}},
		{"stopping: wait for SIGKILL's time", machinePol, stopping, 6 * time.Second, decision{act: actWait, at: at(7 * time.Second)}},
		{"stopping: SIGKILL at its time", machinePol, stopping, 7 * time.Second, decision{act: actKill}},
		{"killed: wait for the exit", machinePol, then(stopping, func(m *machine) { m.killing() }), time.Hour, decision{act: actWait}},

		{"exited by itself: release first", machinePol, then(runningMachine, func(m *machine) { m.exited(3) }), time.Second, decision{act: actRelease}},
		{"exited by itself, released: its status", machinePol, then(runningMachine, func(m *machine) { m.exited(3); m.released(at(time.Second)) }), time.Second, decision{act: actExit, code: 3, own: true}},
		{"exited by itself with -restart: its status", restart, then(runningMachine, func(m *machine) { m.exited(0); m.released(at(time.Second)) }), time.Second, decision{act: actExit, code: 0, own: true}},
		{"stopped for the lease: 75", machinePol, then(stopping, func(m *machine) { m.exited(143); m.released(at(7 * time.Second)) }), 7 * time.Second, decision{act: actExit, code: exitLeaseEnded}},
		{"stopped for the lease, -restart: acquire again", restart, then(stopping, func(m *machine) { m.exited(143); m.released(at(7 * time.Second)) }), 7 * time.Second, decision{act: actAcquire}},
		{"stopped for the lease, -restart, interrupted: 75", restart, then(stopping, func(m *machine) { m.interrupt(); m.exited(143); m.released(at(7 * time.Second)) }), 7 * time.Second, decision{act: actExit, code: exitLeaseEnded}},
		{"could not start: release first", machinePol, then(heldMachine, func(m *machine) { m.startFailed(exitCannotRun) }), 0, decision{act: actRelease}},
		{"could not start, released: 126, not the program's", machinePol, then(heldMachine, func(m *machine) { m.startFailed(exitCannotRun); m.released(machineT0) }), 0, decision{act: actExit, code: exitCannotRun}},

		{"interrupted while waiting: 130", machinePol, then(freshMachine, func(m *machine) { m.interrupt() }), 0, decision{act: actExit, code: exitInterrupted}},
		{"interrupted with a Hold in flight: cancel it", machinePol, then(acquiringMachine, func(m *machine) { m.interrupt() }), 0, decision{act: actCancel}},
		{"interrupted, the Hold cancelled: 130", machinePol, then(acquiringMachine, func(m *machine) { m.interrupt(); m.cancelling(); m.holdFailed(machineT0, context.Canceled) }), 0, decision{act: actExit, code: exitInterrupted}},
		{"interrupted, held, not started: release", machinePol, then(heldMachine, func(m *machine) { m.interrupt() }), 0, decision{act: actRelease}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.m(c.p).next(at(c.now))
			got.why = ""
			if c.want.act == actExit && c.want.err == nil && got.err != nil && c.want.code == exitLeaseEnded {
				assert.Contains(t, got.err.Error(), "-timeout")
				got.err = nil
			}
			assert.Equal(t, c.want, got)
		})
	}
}

// TestExecMachineSaysWhy: the reason a stop gives, for the log.
func TestExecMachineSaysWhy(t *testing.T) {
	for _, c := range []struct {
		cause error
		now   time.Duration
		want  string
	}{
		{&writefence.LeaseLostError{Name: "wal", Term: 3, Holder: "b\n", NewTerm: 4}, time.Second, `term 3 was taken over by b\n at term 4`},
		{fmt.Errorf("writefence: lease wal: term 3 expired: %w", writefence.ErrLeaseExpired), 9 * time.Second, "term 3 expired by this clock, no renewal landed"},
		{fmt.Errorf("writefence: lease wal: term 3: released: %w", writefence.ErrLeaseLost), time.Second, "term 3 ended: lease wal: term 3: released: lease lost"},
		{nil, 6 * time.Second, "term 3 ends in 2s by this clock, no renewal landed"},
		{nil, 9 * time.Second, "term 3 ended 1s ago by this clock, no renewal landed"},
	} {
		m := runningMachine(machinePol)
		if c.cause != nil {
			m.leaseEnded(c.cause)
		}
		d := m.next(at(c.now))
		assert.Equal(t, actTerm, d.act)
		assert.Equal(t, c.want, d.why)
	}
}

// TestExecMachineWalks drives the machine through random histories of
// events on a random clock, as the supervisor would, and checks every
// decision against the rules the documentation states: the program starts
// only with the lease held (every shard sealed) and half a TTL of it left;
// a running program gets SIGTERM as soon as the lease has ended or margin +
// grace of the term is left, and never earlier; SIGKILL is due at most a
// grace after SIGTERM and, for a stop begun before the margin, no later
// than it; exec never ends while its program runs, a Hold is in flight or
// the lease is held, and ends with the program's status exactly when the
// program ended by itself. Each history ends with an interrupt, after
// which exec must end.
func TestExecMachineWalks(t *testing.T) {
	for seed := range uint64(300) {
		walkMachine(t, seed)
	}
}

func walkMachine(t *testing.T, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 7))
	p := policy{ttl: time.Duration(1+rng.IntN(60)) * time.Second, restart: rng.IntN(2) == 0}
	p.grace = time.Duration(rng.Int64N(int64(p.margin()) + 1))
	if rng.IntN(3) == 0 {
		p.wait = time.Duration(rng.IntN(120)) * time.Second
	}
	now := machineT0
	m := newMachine(p, now)
	var (
		expiry   time.Time // the term's end, as the Lease keeps it
		by       time.Time // when SIGKILL is due
		exitedBy bool      // the program exited by itself, unstopped
		want75   bool      // a program stopped for the lease was released after an interrupt
	)
	for step := 0; ; step++ {
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("seed %d, step %d, policy %+v, at +%v: %s", seed, step, p, now.Sub(machineT0), fmt.Sprintf(format, a...))
		}
		if step == 300 {
			m.interrupt()
		}
		if step > 2000 {
			fail("no end 1700 steps after the interrupt")
		}
		if m.lease == leaseHeld {
			m.renewed(expiry)
		}
		d := m.next(now)
		running := m.child == childRunning
		switch {
		case running && (m.lease != leaseHeld || expiry.Sub(now) <= p.stopLeft()):
			if d.act != actTerm {
				fail("%v with the program running, lease %d, %v of the term left: want SIGTERM", d.act, m.lease, expiry.Sub(now))
			}
		case running:
			if d.act != actWait || !d.at.Equal(expiry.Add(-p.stopLeft())) {
				fail("%v until %v with %v of the term left: want to wait until margin + grace is left", d.act, d.at, expiry.Sub(now))
			}
		}
		switch d.act {
		case actAcquire:
			if m.quit {
				fail("acquire after an interrupt")
			}
			if m.lease != leaseIdle || m.child != childNone {
				fail("acquire with lease %d, child %d", m.lease, m.child)
			}
			m.acquiring()
		case actCancel:
			if m.lease != leaseAcquiring {
				fail("cancel with lease %d", m.lease)
			}
			m.cancelling()
		case actStart:
			if m.lease != leaseHeld || expiry.Sub(now) < p.ttl/2 || m.child != childNone {
				fail("start with lease %d, %v left, child %d", m.lease, expiry.Sub(now), m.child)
			}
			if rng.IntN(10) == 0 {
				m.startFailed(exitCannotRun)
				break
			}
			m.started()
			exitedBy = false
		case actTerm:
			if d.killBy.Before(now) || d.killBy.Sub(now) > p.grace {
				fail("SIGKILL due %v after SIGTERM: want 0 to the grace", d.killBy.Sub(now))
			}
			if deadline := expiry.Add(-p.margin()); now.Before(deadline) && d.killBy.After(deadline) {
				fail("SIGKILL due %v after the margin, for a stop begun before it", d.killBy.Sub(deadline))
			}
			by = d.killBy
			m.terminating(d.killBy, d.why)
		case actKill:
			if m.child != childStopping || now.Before(by) {
				fail("SIGKILL with child %d, %v before it is due", m.child, by.Sub(now))
			}
			m.killing()
		case actRelease:
			if m.lease != leaseHeld && m.lease != leaseEnded {
				fail("release with lease %d", m.lease)
			}
			if m.child != childNone && m.child != childExited {
				fail("release while the program runs (%d)", m.child)
			}
			want75 = m.quit && m.child == childExited && m.stopped != ""
			m.released(now)
		case actExit:
			if m.lease != leaseIdle || (m.child != childNone && m.child != childExited) {
				fail("exit with lease %d, child %d", m.lease, m.child)
			}
			if d.own != (m.child == childExited && exitedBy) {
				fail("exit %d, the program's own: %v; it exited by itself: %v", d.code, d.own, exitedBy)
			}
			if d.own && d.code != m.status {
				fail("exit %d, the program's %d", d.code, m.status)
			}
			if (want75 || !d.own && m.child == childExited && !m.unstarted) && d.code != exitLeaseEnded {
				fail("exit %d after a stop for the lease: want %d", d.code, exitLeaseEnded)
			}
			return
		case actWait:
			if !d.at.IsZero() && d.at.Before(now) {
				fail("wait until %v, in the past", d.at)
			}
			walkEvent(rng, m, p, &now, &expiry, d, &exitedBy)
		}
	}
}

// walkEvent makes the next thing happen to a waiting machine: an event
// the supervisor would report, or the time passing.
func walkEvent(rng *rand.Rand, m *machine, p policy, now, expiry *time.Time, d decision, exitedBy *bool) {
	switch {
	case (m.child == childRunning && (m.quit || rng.IntN(8) == 0)) ||
		(m.child == childStopping && rng.IntN(3) == 0) ||
		(m.child == childKilled && rng.IntN(2) == 0):
		// The program exits: by itself, or stopped.
		*exitedBy = m.child == childRunning
		m.exited(rng.IntN(256))
		return
	case m.lease == leaseAcquiring || m.lease == leaseCancelling:
		switch rng.IntN(6) {
		case 0, 1:
			// Hold returned with a quarter of the term left at least.
			*expiry = now.Add(p.ttl - time.Duration(rng.Int64N(int64(p.ttl)*3/4+1)))
			m.held(1, *expiry)
		case 2:
			m.holdFailed(*now, &writefence.LeaseHeldError{Name: "wal", Holder: "b", Term: 1, Expiry: now.Add(time.Duration(rng.Int64N(int64(2 * p.ttl))))})
		case 3:
			m.holdFailed(*now, writefence.ErrTakeoverTimeout)
		case 4:
			if m.lease == leaseCancelling {
				m.holdFailed(*now, context.Canceled)
			} else {
				m.holdFailed(*now, errors.New("writefence: connection refused"))
			}
		default:
			*now = now.Add(time.Duration(rng.Int64N(int64(p.ttl))))
		}
		return
	case m.lease == leaseHeld && rng.IntN(8) == 0:
		m.leaseEnded(writefence.ErrLeaseLost) // a takeover seen
		return
	}
	if rng.IntN(25) == 0 {
		m.interrupt()
	}
	if !d.at.IsZero() && rng.IntN(2) == 0 {
		*now = d.at
	} else {
		*now = now.Add(time.Duration(rng.Int64N(int64(p.ttl / 2))))
	}
	if m.lease == leaseHeld {
		switch {
		case now.Before(*expiry) && rng.IntN(3) == 0:
			*expiry = now.Add(p.ttl) // a renewal landed
		case !now.Before(*expiry) && rng.IntN(2) == 0:
			m.leaseEnded(writefence.ErrLeaseExpired) // the renewer saw the expiry
		}
	}
}

// TestExecHelp: writefence help exec states the margin, the environment,
// the exit statuses and what exec cannot do.
func TestExecHelp(t *testing.T) {
	r := wf(t, "help", "exec")
	require.Equal(t, exitOK, r.code)
	for _, want := range []string{
		"-ttl/8 before the term ends", "SIGTERM", "SIGKILL",
		envStore, envPrefix, envLease, envHolder, envTerm, `push -term "$WRITEFENCE_TERM"`,
		"75 ", "126 ", "127 ", "130 ",
		"What exec cannot do: a supervisor that is itself paused", "it is the\nfence, not the supervisor, that keeps the store safe",
	} {
		assert.Contains(t, r.stdout, want)
	}
}
