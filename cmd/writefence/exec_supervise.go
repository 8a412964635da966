package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
)

// leaseHolder is what the supervisor needs of a *writefence.Lease.
type leaseHolder interface {
	Hold(ctx context.Context, shards ...writefence.Shard) (context.Context, error)
	Held() (term uint64, expiry time.Time, ok bool)
	Release(ctx context.Context) error
}

// program is a started program: its process and the process group it
// leads.
type program interface {
	// Signal sends sig to the program's process group; a group that is
	// gone is no error.
	Signal(sig syscall.Signal) error
	// Done is closed once the program has exited and Status is known.
	Done() <-chan struct{}
	// Status is the program's exit status, 128+n when signal n ended it.
	Status() int
	Pid() int
}

// supervisor runs a program under a lease, as writefence exec does.
type supervisor struct {
	p      policy
	name   string // the lease's name, for the log
	shards []writefence.Shard
	// newLease returns a new Lease value: each term is taken by a value
	// of its own, so a term is never continued by a later program.
	newLease func() leaseHolder
	// start starts the program at term; its error is exitNoProgram,
	// exitCannotRun or another exit status, with what to say.
	start   func(term uint64) (program, int, error)
	signals <-chan os.Signal
	// terminating reports whether sig asks exec to end.
	terminating func(sig os.Signal) bool
	logf        func(format string, a ...any)
	// advise adds what to do to the error exec ends with.
	advise func(error) error
	// pause, when set, runs before each decision: a simulation blocks in
	// it to pause the supervisor, as SIGSTOP would.
	pause func()
}

type holdResult struct {
	held context.Context
	err  error
}

// run supervises until exec ends and returns its exit status. ctx being
// done asks it to end as a terminating signal does, without forwarding
// one: the command's signals come through s.signals.
func (s *supervisor) run(ctx context.Context) int {
	base := context.WithoutCancel(ctx)
	m := newMachine(s.p, time.Now())
	var (
		t          *tenure // the Lease value of the current term, or of the Hold in flight
		holds      <-chan holdResult
		prog       program
		progDone   <-chan struct{}
		quitting   = ctx.Done()
		waitingFor string // the holder and term last said to hold the lease
	)
	defer func() {
		if t != nil {
			t.cancel()
		}
	}()
	for {
		if s.pause != nil {
			s.pause()
		}
		now := time.Now()
		if m.lease == leaseHeld {
			if _, expiry, ok := t.lease.Held(); ok {
				m.renewed(expiry)
			}
			if t.held.Err() != nil {
				m.leaseEnded(context.Cause(t.held))
			}
		}
		d := m.next(now)
		switch d.act {
		case actAcquire:
			t = s.acquire(base)
			holds = t.result
			m.acquiring()
		case actCancel:
			t.cancel()
			m.cancelling()
		case actStart:
			p, code, err := s.start(m.term)
			if err != nil {
				s.logf("%s", message(err))
				m.startFailed(code)
				break
			}
			prog, progDone = p, p.Done()
			s.logf("lease %s: term %d: sealed %s; started the program (pid %d)", s.name, m.term, shardList(s.shards), p.Pid())
			m.started()
		case actTerm:
			s.logf("lease %s: %s: stopping the program (pid %d): SIGTERM, SIGKILL in %v", s.name, d.why, prog.Pid(), d.killBy.Sub(now).Round(time.Millisecond))
			s.signal(prog, syscall.SIGTERM)
			m.terminating(d.killBy, d.why)
		case actKill:
			s.logf("lease %s: the program (pid %d) is still running: SIGKILL", s.name, prog.Pid())
			s.signal(prog, syscall.SIGKILL)
			m.killing()
		case actRelease:
			term := m.term
			rctx, cancel := context.WithTimeout(base, s.p.ttl/4)
			err := t.lease.Release(rctx)
			cancel()
			t.cancel()
			var lost *writefence.LeaseLostError
			switch {
			case err == nil:
				s.logf("lease %s: term %d released", s.name, term)
			case errors.As(err, &lost) && lost.Holder != "":
				s.logf("lease %s: term %d was taken over by %s at term %d", s.name, term, escape.String(lost.Holder), lost.NewTerm)
			case !errors.Is(err, writefence.ErrLeaseLost):
				s.logf("lease %s: term %d: release failed, the record names this holder until the term ends: %s", s.name, term, message(err))
			}
			t = nil
			m.released(time.Now())
		case actExit:
			if d.err != nil {
				err := s.advise(d.err)
				s.logf("%s", message(err))
				if d.code == exitError {
					d.code, _ = classify(err) // 130 when the advice found a signal behind it
				}
			} else if d.why != "" {
				s.logf("%s", d.why)
			}
			return d.code
		case actWait:
			var wake <-chan time.Time
			timer := (*time.Timer)(nil)
			if !d.at.IsZero() {
				timer = time.NewTimer(d.at.Sub(now))
				wake = timer.C
			}
			var heldDone <-chan struct{}
			if m.lease == leaseHeld {
				heldDone = t.held.Done()
			}
			select {
			case r := <-holds:
				holds = nil
				if r.err != nil {
					s.holdFailed(m, r.err, &waitingFor)
					break
				}
				t.held = r.held
				term, expiry, ok := t.lease.Held()
				m.held(term, expiry)
				if !ok {
					m.leaseEnded(context.Cause(t.held))
				}
				waitingFor = ""
			case <-heldDone:
				m.leaseEnded(context.Cause(t.held))
				if m.child == childNone {
					s.logf("lease %s: %s, before the program started", s.name, endedWhy(m.term, m.ended))
				}
			case <-progDone:
				progDone = nil
				// What the program left running in its group goes too:
				// nothing it started outlives its lease.
				_ = prog.Signal(syscall.SIGKILL)
				s.logf("lease %s: the program (pid %d) exited with status %d", s.name, prog.Pid(), prog.Status())
				m.exited(prog.Status())
			case sig := <-s.signals:
				if progDone != nil {
					if ss, ok := sig.(syscall.Signal); ok {
						s.signal(prog, ss)
					}
				}
				if s.terminating(sig) {
					m.interrupt()
				}
			case <-quitting:
				quitting = nil
				m.interrupt()
			case <-wake:
			}
			if timer != nil {
				timer.Stop()
			}
		}
	}
}

// tenure is one Lease value: the Hold it runs, under a context of its
// own, and the Hold's result.
type tenure struct {
	lease  leaseHolder
	cancel context.CancelFunc // ends the Hold, in flight or returned
	result chan holdResult
	held   context.Context // the Hold's context, once it returned
}

// acquire starts a Hold with a new Lease value.
func (s *supervisor) acquire(base context.Context) *tenure {
	t := &tenure{lease: s.newLease(), result: make(chan holdResult, 1)}
	ctx, cancel := context.WithCancel(base)
	t.cancel = cancel
	go func() {
		h, err := t.lease.Hold(ctx, s.shards...)
		t.result <- holdResult{h, err}
	}()
	return t
}

// signal sends sig to the program's group, saying so if it fails.
func (s *supervisor) signal(p program, sig syscall.Signal) {
	if err := p.Signal(sig); err != nil {
		s.logf("signal %v to the program (pid %d): %v", sig, p.Pid(), err)
	}
}

// holdFailed tells m that Hold failed with err and says why on the log:
// who holds the lease once per holder and term, every other failure.
func (s *supervisor) holdFailed(m *machine, err error, waitingFor *string) {
	now := time.Now()
	m.holdFailed(now, err)
	var held *writefence.LeaseHeldError
	switch {
	case m.final != nil, m.quit, errors.Is(err, context.Canceled):
	case errors.As(err, &held):
		who := fmt.Sprintf("%s at term %d", escape.String(held.Holder), held.Term)
		if who != *waitingFor {
			*waitingFor = who
			s.logf("lease %s: held by %s, until %s by its clock; waiting", s.name, who, held.Expiry.Format("15:04:05.000"))
		}
	default:
		*waitingFor = ""
		s.logf("%s; trying again in %v", describe(err), m.retryAt.Sub(now).Round(time.Millisecond))
	}
}

// shardList names shards for the log, or says there are none.
func shardList(shards []writefence.Shard) string {
	if len(shards) == 0 {
		return "no shard"
	}
	s := ""
	for i, sh := range shards {
		if i > 0 {
			s += ", "
		}
		s += escape.String(sh.Plugin) + "/" + escape.String(sh.Shard)
	}
	return s
}
