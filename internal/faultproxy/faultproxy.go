// Package faultproxy is a TCP proxy between a test's client and a real
// server that injects faults into the requests it relays: a delay, a reset
// before the request reaches the server, a reply dropped after the server
// acted on it, an outage. The root package's tests on the servers run the
// stores through it to lose replies of writes that landed.
package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Kind is what the fault proxy does to one request: the bytes a client
// sends after the server's last reply on that connection (or the first
// bytes of a connection). The proxy knows nothing of HTTP or RESP; a
// request is whatever the client writes before it waits for an answer.
type Kind int

const (
	None Kind = iota
	// Delay holds the request for up to Rates.MaxDelay before
	// forwarding it. Delays stay well below the clients' timeouts, so a
	// delayed request is never one its client already gave up on.
	Delay
	// Reset resets both sides before any byte of the request reaches
	// the server: the request certainly did not happen.
	Reset
	// DropReply forwards the request, waits for the server's first
	// reply byte (so the server certainly received and acted on it) and
	// Then resets the client without forwarding any of the reply.
	DropReply
	// Blackout drops the reply as DropReply does, then makes the
	// store unreachable: every connection is reset until the outage ends.
	Blackout
	numKinds
)

var kindNames = [numKinds]string{"none", "delay", "reset", "drop-reply", "blackout"}

func (k Kind) String() string { return kindNames[k] }

// Rates are the per-request probabilities of each fault.
type Rates struct {
	Delay, Reset, DropReply, Blackout float64
	MaxDelay                          time.Duration
	// Outage is how long a blackout lasts; zero means until heal is called.
	Outage time.Duration
}

// Proxy is a TCP proxy from a loopback listener to a real server that
// injects Rates' faults, drawn from a seeded generator. With several
// connections at once the order of the draws depends on scheduling, so a
// seed replays the fault mix exactly only for a single sequential client.
type Proxy struct {
	ln     net.Listener
	target string
	seed   uint64
	done   chan struct{} // closed by close

	mu        sync.Mutex // guards everything below
	rng       *rand.Rand
	rates     Rates
	now       func() time.Time // the clock of timed outages; time.Now unless a test sets one
	down      bool             // refusing every connection
	downUntil time.Time        // end of a timed outage, by now; zero means until heal
	conns     map[*proxyConn]struct{}
	requests  int
	counts    [numKinds]int
	refused   int
	closed    bool
	// drops, when its match is set, picks requests whose reply is
	// dropped whatever the rates say (see dropReplies).
	drops Drop

	wg sync.WaitGroup // the accept loop and every connection's pumps
}

// seedOf returns the seed of a test's fault generator:
// WRITEFENCE_FAULT_SEED when set, else a fresh one. It is logged so that a
// failing run can be repeated.
func seedOf(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv("WRITEFENCE_FAULT_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "WRITEFENCE_FAULT_SEED")
		return seed
	}
	return rand.Uint64()
}

// New starts a proxy to target (host:port) that injects faults at
// rates. It is closed, with every connection through it, when the test ends.
func New(t testing.TB, target string, rates Rates) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	seed := seedOf(t)
	t.Logf("fault proxy to %s: seed %d (WRITEFENCE_FAULT_SEED=%d repeats it)", target, seed, seed)
	p := &Proxy{
		ln:     ln,
		target: target,
		seed:   seed,
		done:   make(chan struct{}),
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		rates:  rates,
		now:    time.Now,
		conns:  make(map[*proxyConn]struct{}),
	}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Seed is the seed of the proxy's fault generator, which a test may use
// to seed its own draws.
func (p *Proxy) Seed() uint64 { return p.seed }

// Target is the address of the server the proxy relays to.
func (p *Proxy) Target() string { return p.target }

// Addr is the address clients dial instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetRates replaces the fault rates and returns the previous ones; the
// zero value makes the proxy a faithful relay.
func (p *Proxy) SetRates(r Rates) Rates {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.rates
	p.rates = r
	return old
}

// SetClock makes now the clock that ends timed outages, so that a test
// decides when an outage is over instead of racing it.
func (p *Proxy) SetClock(now func() time.Time) {
	p.mu.Lock()
	p.now = now
	p.mu.Unlock()
}

// DropReplyWhen makes the proxy drop the reply of every request for which
// match (given the request's first bytes) reports true, calling then in
// between: the request has reached the server and been answered, and the
// client has not yet seen its connection reset.
func (p *Proxy) DropReplyWhen(match func(req []byte) bool, then func()) {
	p.DropReplies(Drop{Match: match, Then: then})
}

// Drop says which replies the proxy drops, and when.
type Drop struct {
	// Match picks, from its bytes, a request whose reply is dropped.
	Match func(req []byte) bool
	// Whole, when set, reports whether the bytes of a request read so
	// far are enough for Match (a pipeline whose command that Match
	// looks for may come after a large value): the proxy holds them back
	// from the server until then.
	Whole func(req []byte) bool
	// End, when set, reports whether the bytes of the reply held back so
	// far are all of it (every command of a pipeline or a transaction
	// answered, which the server may do in more than one write); when
	// nil, the reply is dropped at its first byte.
	End func(reply []byte) bool
	// Then, when set, runs once the reply is held back (Whole, as End
	// says) and before the client learns that it is lost.
	Then func()
	// Hold, when set, makes the proxy hold a request Match picks back
	// from the server instead, and reset its client at once: the client
	// cannot tell whether it reached the server. Hold is handed, before
	// the reset, the function that sends it later, as a network that
	// delayed it past the client's giving up would, on the connection it
	// came on, and returns once the server answered it whole (as End
	// says; the reply goes nowhere), or an error when it could not.
	Hold func(deliver func() error)
}

// DropReplies makes the proxy drop replies as d says, from the next
// request on.
func (p *Proxy) DropReplies(d Drop) {
	p.mu.Lock()
	p.drops = d
	p.mu.Unlock()
}

// wholeRequest is the drops' whole, nil when it has none.
func (p *Proxy) wholeRequest() func(req []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drops.Match == nil {
		return nil
	}
	return p.drops.Whole
}

// Unreachable makes the store unreachable for d (until heal when d is
// zero): every open connection is reset and every new one refused.
func (p *Proxy) Unreachable(d time.Duration) {
	p.mu.Lock()
	p.down = true
	p.downUntil = time.Time{}
	if d > 0 {
		p.downUntil = p.now().Add(d)
	}
	conns := p.connsLocked()
	p.mu.Unlock()
	for _, c := range conns {
		c.kill()
	}
}

// Heal ends an outage.
func (p *Proxy) Heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

// IsDown reports whether the proxy refuses connections now: an outage
// that heal has not ended and whose time, if it has one, has not run out.
func (p *Proxy) IsDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down && !p.downUntil.IsZero() && p.now().After(p.downUntil) {
		p.down = false
	}
	return p.down
}

func (p *Proxy) connsLocked() []*proxyConn {
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

// Stats summarises the faults injected so far.
func (p *Proxy) Stats() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("%d requests", p.requests)
	for k := Delay; k < numKinds; k++ {
		s += fmt.Sprintf(", %d %s", p.counts[k], k)
	}
	return s + fmt.Sprintf(", %d connections refused", p.refused)
}

// Count is how many requests met the fault k so far.
func (p *Proxy) Count(k Kind) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[k]
}

// draw picks the fault for a request starting with req, and the delay for
// Delay; the last is the drops, when their match picked the request.
func (p *Proxy) draw(req []byte) (Kind, time.Duration, Drop) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if p.drops.Match != nil && p.drops.Match(req) {
		p.counts[DropReply]++
		return DropReply, 0, p.drops
	}
	r := p.rng.Float64()
	kind := None
	for _, c := range []struct {
		kind Kind
		rate float64
	}{{Delay, p.rates.Delay}, {Reset, p.rates.Reset}, {DropReply, p.rates.DropReply}, {Blackout, p.rates.Blackout}} {
		if r < c.rate {
			kind = c.kind
			break
		}
		r -= c.rate
	}
	p.counts[kind]++
	var delay time.Duration
	if kind == Delay && p.rates.MaxDelay > 0 {
		delay = time.Duration(p.rng.Int64N(int64(p.rates.MaxDelay))) + 1
	}
	return kind, delay, Drop{}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // the listener was closed
		}
		client := c.(*net.TCPConn)
		if p.IsDown() {
			p.mu.Lock()
			p.refused++
			p.mu.Unlock()
			resetConn(client)
			continue
		}
		s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			resetConn(client)
			continue
		}
		pc := &proxyConn{p: p, client: client, server: s.(*net.TCPConn), awaiting: true}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pc.kill()
			return
		}
		p.conns[pc] = struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go pc.pump(pc.client, pc.server, pc.request)
		go func() {
			defer pc.closeServer() // also when it held a request back
			pc.pump(pc.server, pc.client, pc.reply)
		}()
	}
}

// close stops the proxy, resets every connection through it and waits for
// its goroutines.
func (p *Proxy) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	conns := p.connsLocked()
	p.mu.Unlock()
	_ = p.ln.Close()
	for _, c := range conns {
		c.kill()
		c.closeServer()
	}
	p.wg.Wait()
}

// proxyConn is one client connection and its connection to the server.
type proxyConn struct {
	p              *Proxy
	client, server *net.TCPConn

	mu       sync.Mutex // guards awaiting, drop, dropping, held, holding, answered and heldAnswered
	awaiting bool       // the client's next bytes begin a new request
	drop     Kind       // DropReply or Blackout: reset at the first reply byte, or at dropping.End
	dropping Drop       // how a reply the proxy's drops picked is dropped
	held     []byte     // the reply held back until dropping.End reports it whole

	pending []byte // the start of a request held back until the drops' whole reports it enough; the request pump's own

	holding      bool          // a request is held back (dropping.Hold), its server connection spared until it is answered
	answered     chan struct{} // closed once the held request is answered, or its connection closed
	heldAnswered bool          // the held request was answered

	killOnce, serverOnce sync.Once
}

// pump copies src to dst, handing each chunk read to onRead, which
// returns what to copy (the chunk, nothing while it holds bytes back, or
// the bytes it held back and the chunk), until either side fails or
// onRead says to stop; then it kills the connection.
func (c *proxyConn) pump(src, dst *net.TCPConn, onRead func(p []byte) (out []byte, more bool)) {
	defer c.p.wg.Done()
	defer c.kill()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			out, more := onRead(buf[:n])
			if !more {
				return
			}
			if len(out) == 0 {
				continue // held back: dst may be gone
			}
			if _, err := dst.Write(out); err != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// request sees the client's bytes on their way to the server and decides a
// fault at the start of each request, once the drops' whole says it has
// enough of it; more false stops the relay.
func (c *proxyConn) request(p []byte) (out []byte, more bool) {
	c.mu.Lock()
	start := c.awaiting
	c.awaiting = false
	c.mu.Unlock()
	if !start && c.pending == nil {
		return p, true
	}
	if whole := c.p.wholeRequest(); whole != nil {
		c.pending = append(c.pending, p...)
		if !whole(c.pending) {
			return nil, true
		}
		p, c.pending = c.pending, nil
	}
	kind, delay, d := c.p.draw(p)
	switch kind {
	case Delay:
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.p.done:
			t.Stop()
			return nil, false
		}
	case Reset:
		return nil, false
	case DropReply, Blackout:
		hold := kind == DropReply && d.Hold != nil
		answered := make(chan struct{})
		c.mu.Lock()
		c.drop, c.dropping = kind, d
		if hold {
			c.holding, c.answered = true, answered
		}
		c.mu.Unlock()
		if hold {
			req := bytes.Clone(p)
			d.Hold(func() error { return c.deliver(req, answered) })
			return nil, false // the client is reset; the server connection waits
		}
	}
	return p, true
}

// deliver sends req, a request held back, to the server and waits until
// the server answered it (answered is closed).
func (c *proxyConn) deliver(req []byte, answered <-chan struct{}) error {
	if _, err := c.server.Write(req); err != nil {
		c.closeServer()
		return fmt.Errorf("deliver the held request: %w", err)
	}
	select {
	case <-answered:
	case <-c.p.done:
		return errors.New("deliver the held request: the proxy closed")
	case <-time.After(30 * time.Second):
		return errors.New("deliver the held request: no reply in 30 s")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.heldAnswered {
		return errors.New("deliver the held request: the server connection closed before its reply")
	}
	return nil
}

// reply sees the server's bytes on their way to the client; for a reply
// chosen to be lost it holds them back, and stops the relay before any of
// it is forwarded: at its first byte, or once dropping.End reports it
// whole.
func (c *proxyConn) reply(p []byte) (out []byte, more bool) {
	c.mu.Lock()
	if c.holding {
		// The reply to the request held back and delivered late.
		c.held = append(c.held, p...)
		if c.dropping.End != nil && !c.dropping.End(c.held) {
			c.mu.Unlock()
			return nil, true
		}
		c.holding, c.heldAnswered = false, true
		c.mu.Unlock()
		close(c.answered)
		c.closeServer()
		return nil, false
	}
	drop, d := c.drop, c.dropping
	if drop == DropReply && d.End != nil {
		c.held = append(c.held, p...)
		if !d.End(c.held) {
			c.mu.Unlock()
			return nil, true
		}
	}
	c.awaiting = true
	c.mu.Unlock()
	switch drop {
	case DropReply:
		if d.Then != nil {
			d.Then()
		}
		return nil, false
	case Blackout:
		c.p.Unreachable(c.p.outage())
		return nil, false
	}
	return p, true
}

func (p *Proxy) outage() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rates.Outage
}

// kill resets the client (so it sees a reset, not an orderly end of the
// reply) and closes the server side, unless it holds a request back.
func (c *proxyConn) kill() {
	c.killOnce.Do(func() {
		resetConn(c.client)
		c.mu.Lock()
		spare := c.holding
		c.mu.Unlock()
		if !spare {
			c.closeServer()
		}
	})
}

// closeServer closes the server side, and forgets the connection.
func (c *proxyConn) closeServer() {
	c.serverOnce.Do(func() {
		resetConn(c.server)
		c.mu.Lock()
		if c.holding {
			c.holding = false
			close(c.answered) // never answered
		}
		c.mu.Unlock()
		c.p.mu.Lock()
		delete(c.p.conns, c)
		c.p.mu.Unlock()
	})
}

// resetConn closes c with an RST rather than a FIN.
func resetConn(c *net.TCPConn) {
	_ = c.SetLinger(0)
	_ = c.Close()
}
