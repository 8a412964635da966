package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
)

// The decisions of writefence exec's supervisor: when to acquire the
// lease, when to start the program, when to stop it, when to give up. The
// machine holds what the supervisor knows (its lease, its program, a
// request to quit) and does no I/O: the supervisor reports what happened
// (a Hold returned, the lease ended, the program exited, a signal came),
// asks next for the action to take now, takes it, and reports that it
// did. A simulation on virtual time drives it the same way.

// Exit statuses of exec beyond the command's others: the program's own
// status passes through.
const (
	// exitLeaseEnded: the lease was lost or about to expire and exec
	// stopped the program (without -restart), or -timeout passed before
	// the lease was held. EX_TEMPFAIL of sysexits(3): try again later.
	exitLeaseEnded = 75
	// exitCannotRun: the program was found but could not be started.
	exitCannotRun = 126
	// exitNoProgram: the program was not found.
	exitNoProgram = 127
)

// policy is exec's configuration of time.
type policy struct {
	ttl     time.Duration // the lease's TTL
	grace   time.Duration // from SIGTERM to SIGKILL; at most margin
	restart bool          // after a stop for the lease, acquire it again and run the program anew
	wait    time.Duration // give up waiting for the lease after this long; 0: never
}

// margin is how long before its term ends, by the supervisor's clock, the
// program is killed: an eighth of the TTL.
func (p policy) margin() time.Duration { return p.ttl / 8 }

// stopLeft is how much of the term is left when SIGTERM is sent.
func (p policy) stopLeft() time.Duration { return p.margin() + p.grace }

// startLeft is how much of the term must be left to start the program: half
// the TTL, so that it runs a quarter TTL at least even if no renewal lands.
func (p policy) startLeft() time.Duration { return p.ttl / 2 }

// poll is how often a supervisor that holds the lease but has too little
// of the term left to start looks again, for a renewal to land.
func (p policy) poll() time.Duration { return p.ttl / 16 }

type leasePhase uint8

const (
	leaseIdle       leasePhase = iota // not held, no Hold in flight
	leaseAcquiring                    // a Hold is in flight
	leaseCancelling                   // a Hold is in flight, cancelled
	leaseHeld                         // Hold returned: every shard sealed at the term
	leaseEnded                        // the Hold's context is done: lost, expired, released
)

type childPhase uint8

const (
	childNone     childPhase = iota // not started in this term
	childRunning                    // started
	childStopping                   // SIGTERM sent
	childKilled                     // SIGKILL sent
	childExited                     // exited; its status is known
)

type act uint8

const (
	actWait    act = iota // until the decision's at, or an event
	actAcquire            // start a Hold with a new Lease value
	actCancel             // cancel the Hold in flight
	actStart              // start the program
	actTerm               // send SIGTERM to the program's process group
	actKill               // send SIGKILL to it
	actRelease            // release the lease
	actExit               // end exec with code
)

var actNames = [...]string{"wait", "acquire", "cancel", "start", "term", "kill", "release", "exit"}

func (a act) String() string { return actNames[a] }

// decision is what the supervisor does next.
type decision struct {
	act    act
	at     time.Time // actWait: wake by then at the latest; zero: on an event only
	killBy time.Time // actTerm: when SIGKILL follows
	code   int       // actExit
	own    bool      // actExit: code is the program's own status
	err    error     // actExit: what exec reports on stderr; nil when nothing failed
	why    string    // for the log: actTerm, actExit
}

// machine is the supervisor's state.
type machine struct {
	p policy

	lease    leasePhase
	term     uint64    // leaseHeld, leaseEnded
	expiry   time.Time // leaseHeld, leaseEnded: the term's last known end by this clock
	ended    error     // leaseEnded: why the Hold's context is done
	retryAt  time.Time // leaseIdle: acquire no sooner
	terms    int       // terms held so far
	waitFrom time.Time // when the wait for the lease began
	final    error     // a failure retrying cannot change: give up with it
	stale    int       // Holds in a row whose seal was refused as stale

	child   childPhase
	stopped string    // why the supervisor stopped the program, "" when it did not
	killBy  time.Time // childStopping
	status  int       // childExited
	// unstarted: the program could not be started; status is exec's.
	unstarted bool

	quit bool // a terminating signal came: end once the program has
}

func newMachine(p policy, now time.Time) *machine {
	return &machine{p: p, waitFrom: now, retryAt: now}
}

// next returns the action to take at now.
func (m *machine) next(now time.Time) decision {
	switch m.child {
	case childRunning:
		deadline := m.expiry.Add(-m.p.margin())
		if m.lease != leaseHeld {
			return m.stop(now, deadline, endedWhy(m.term, m.ended))
		}
		if at := deadline.Add(-m.p.grace); now.Before(at) {
			return decision{act: actWait, at: at}
		}
		left := m.expiry.Sub(now).Round(time.Millisecond)
		if left < 0 {
			return m.stop(now, deadline, fmt.Sprintf("term %d ended %v ago by this clock, no renewal landed", m.term, -left))
		}
		return m.stop(now, deadline, fmt.Sprintf("term %d ends in %v by this clock, no renewal landed", m.term, left))
	case childStopping:
		if now.Before(m.killBy) {
			return decision{act: actWait, at: m.killBy}
		}
		return decision{act: actKill}
	case childKilled:
		return decision{act: actWait}
	case childExited:
		if m.lease == leaseHeld || m.lease == leaseEnded {
			return decision{act: actRelease}
		}
		if m.stopped == "" {
			return decision{act: actExit, code: m.status, own: !m.unstarted}
		}
		// released would have gone back to acquiring with -restart.
		return decision{act: actExit, code: exitLeaseEnded, why: fmt.Sprintf("exit %d: the program was stopped for the lease", exitLeaseEnded)}
	}

	// No program runs.
	timeout := time.Time{}
	if m.p.wait > 0 {
		timeout = m.waitFrom.Add(m.p.wait)
	}
	end := func(code int, err error, why string) decision {
		switch m.lease {
		case leaseAcquiring:
			return decision{act: actCancel}
		case leaseCancelling:
			return decision{act: actWait}
		case leaseHeld, leaseEnded:
			return decision{act: actRelease}
		}
		return decision{act: actExit, code: code, err: err, why: why}
	}
	switch {
	case m.final != nil:
		code, _ := classify(m.final)
		return end(code, m.final, "")
	case m.quit:
		return end(exitInterrupted, nil, "interrupted before the program started")
	case !timeout.IsZero() && !now.Before(timeout):
		return end(exitLeaseEnded, fmt.Errorf("writefence exec: the lease was not held within -timeout %v; run exec again, or raise -timeout (0 waits as long as it takes)", m.p.wait), "")
	}
	soonest := func(t time.Time) time.Time {
		if !timeout.IsZero() && (t.IsZero() || timeout.Before(t)) {
			return timeout
		}
		return t
	}
	switch m.lease {
	case leaseIdle:
		if now.Before(m.retryAt) {
			return decision{act: actWait, at: soonest(m.retryAt)}
		}
		return decision{act: actAcquire}
	case leaseHeld:
		if m.expiry.Sub(now) >= m.p.startLeft() {
			return decision{act: actStart}
		}
		return decision{act: actWait, at: soonest(now.Add(m.p.poll()))}
	case leaseEnded:
		return decision{act: actRelease}
	}
	return decision{act: actWait, at: soonest(time.Time{})} // a Hold is in flight
}

// stop is the decision to stop the running program: SIGTERM now, SIGKILL
// grace later, but never later than deadline (margin before the term
// ends) when the stop begins before it. A stop that begins after it (the
// supervisor did not run in time: it was paused) gives the program its
// grace all the same; the fence, not the supervisor, guards the store then.
func (m *machine) stop(now, deadline time.Time, why string) decision {
	killBy := now.Add(m.p.grace)
	if now.Before(deadline) && deadline.Before(killBy) {
		killBy = deadline
	}
	return decision{act: actTerm, killBy: killBy, why: why}
}

// acquiring: a Hold is in flight.
func (m *machine) acquiring() { m.lease = leaseAcquiring }

// cancelling: the Hold in flight was cancelled.
func (m *machine) cancelling() { m.lease = leaseCancelling }

// held: Hold returned with every shard sealed at term, which ends at
// expiry by this clock unless renewed.
func (m *machine) held(term uint64, expiry time.Time) {
	m.lease, m.term, m.expiry, m.ended, m.stale = leaseHeld, term, expiry, nil, 0
	m.terms++
}

// renewed: the term now ends at expiry.
func (m *machine) renewed(expiry time.Time) {
	if m.lease == leaseHeld {
		m.expiry = expiry
	}
}

// leaseEnded: the Hold's context is done, with cause.
func (m *machine) leaseEnded(cause error) {
	if m.lease == leaseHeld {
		m.lease, m.ended = leaseEnded, cause
	}
}

// holdFailed: Hold returned err at now. A lease held by another is tried
// again when its holder's term would end, at most a quarter TTL on (the
// holder may release it); a takeover that lost its term, after an eighth
// TTL. A seal refused as stale is tried again the same way, as another
// holder may have overtaken a slow takeover, but a third in a row is final:
// the shard records an epoch of a term the lease has not reached (its
// record was deleted or rolled back, or another epoch source writes the
// shard), which takes an operator. A failure retrying cannot change is
// final, and so is any other before the first term (a wrong address fails
// fast); after it, it is tried again every quarter TTL.
func (m *machine) holdFailed(now time.Time, err error) {
	cancelled := m.lease == leaseCancelling
	m.lease = leaseIdle
	if errors.Is(err, writefence.ErrStaleEpoch) {
		m.stale++
	} else {
		m.stale = 0
	}
	var held *writefence.LeaseHeldError
	switch {
	case m.stale >= staleHolds:
		m.final = err
	case m.stale > 0:
		m.retryAt = now.Add(m.p.ttl / 8)
	case cancelled && errors.Is(err, context.Canceled):
		m.retryAt = now // quit or -timeout decides
	case errors.As(err, &held):
		m.retryAt = held.Expiry
		if lo := now.Add(m.p.ttl / 16); m.retryAt.Before(lo) {
			m.retryAt = lo
		}
		if hi := now.Add(m.p.ttl / 4); m.retryAt.After(hi) {
			m.retryAt = hi
		}
	case errors.Is(err, writefence.ErrTakeoverTimeout), errors.Is(err, writefence.ErrLeaseLost), errors.Is(err, writefence.ErrLeaseExpired):
		m.retryAt = now.Add(m.p.ttl / 8)
	case finalHoldError(err), m.terms == 0:
		m.final = err
	default:
		m.retryAt = now.Add(m.p.ttl / 4)
	}
}

// staleHolds is how many Holds in a row refused as stale make exec give up.
const staleHolds = 3

// finalHoldError reports whether a Hold that failed with err fails the
// same way every time: a damaged lease record, another wire identity, an
// invalid name, a store that ignores preconditions.
func finalHoldError(err error) bool {
	for _, target := range []error{writefence.ErrCorrupt, writefence.ErrWire, writefence.ErrInvalidArgument, writefence.ErrUntrustedStore} {
		if errors.Is(err, target) {
			return true
		}
	}
	return isUsage(err)
}

// started: the program runs.
func (m *machine) started() { m.child, m.stopped = childRunning, "" }

// startFailed: the program could not be started; exec ends with code
// once the lease is released.
func (m *machine) startFailed(code int) {
	m.child, m.status, m.stopped, m.unstarted = childExited, code, "", true
}

// terminating: SIGTERM was sent, for why; SIGKILL follows at killBy.
func (m *machine) terminating(killBy time.Time, why string) {
	m.child, m.killBy, m.stopped = childStopping, killBy, why
}

// killing: SIGKILL was sent.
func (m *machine) killing() { m.child = childKilled }

// exited: the program exited with status.
func (m *machine) exited(status int) { m.child, m.status = childExited, status }

// interrupt: a terminating signal came (it was forwarded to the program).
func (m *machine) interrupt() { m.quit = true }

// released: the lease was released (or found lost). A program the
// supervisor stopped for its lease runs again in a new term with
// -restart, unless exec was asked to quit.
func (m *machine) released(now time.Time) {
	m.lease, m.term, m.expiry, m.ended, m.retryAt = leaseIdle, 0, time.Time{}, nil, now
	if m.child == childExited && m.stopped != "" && m.p.restart && !m.quit {
		m.child, m.stopped, m.waitFrom = childNone, "", now
	}
}

// describe is err's message for the log, "unknown" for none.
func describe(err error) string {
	if err == nil {
		return "unknown"
	}
	return strings.TrimPrefix(message(err), "writefence: ")
}

// endedWhy says why the Hold of term ended, for the log.
func endedWhy(term uint64, cause error) string {
	var lost *writefence.LeaseLostError
	switch {
	case errors.As(cause, &lost) && lost.Holder != "":
		return fmt.Sprintf("term %d was taken over by %s at term %d", term, escape.String(lost.Holder), lost.NewTerm)
	case errors.Is(cause, writefence.ErrLeaseExpired):
		return fmt.Sprintf("term %d expired by this clock, no renewal landed", term)
	}
	return fmt.Sprintf("term %d ended: %s", term, describe(cause))
}
