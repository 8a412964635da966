package writefence_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// faultKind is what the fault proxy does to one request: the bytes a client
// sends after the server's last reply on that connection (or the first
// bytes of a connection). The proxy knows nothing of HTTP or RESP; a
// request is whatever the client writes before it waits for an answer.
type faultKind int

const (
	faultNone faultKind = iota
	// faultDelay holds the request for up to faultRates.MaxDelay before
	// forwarding it. Delays stay well below the clients' timeouts, so a
	// delayed request is never one its client already gave up on.
	faultDelay
	// faultReset resets both sides before any byte of the request reaches
	// the server: the request certainly did not happen.
	faultReset
	// faultDropReply forwards the request, waits for the server's first
	// reply byte (so the server certainly received and acted on it) and
	// then resets the client without forwarding any of the reply.
	faultDropReply
	// faultBlackout drops the reply as faultDropReply does, then makes the
	// store unreachable: every connection is reset until the outage ends.
	faultBlackout
	numFaultKinds
)

var faultNames = [numFaultKinds]string{"none", "delay", "reset", "drop-reply", "blackout"}

func (k faultKind) String() string { return faultNames[k] }

// faultRates are the per-request probabilities of each fault.
type faultRates struct {
	Delay, Reset, DropReply, Blackout float64
	MaxDelay                          time.Duration
	// Outage is how long a blackout lasts; zero means until heal is called.
	Outage time.Duration
}

// faultProxy is a TCP proxy from a loopback listener to a real server that
// injects faultRates' faults, drawn from a seeded generator. With several
// connections at once the order of the draws depends on scheduling, so a
// seed replays the fault mix exactly only for a single sequential client.
type faultProxy struct {
	ln     net.Listener
	target string
	seed   uint64
	done   chan struct{} // closed by close

	mu        sync.Mutex // guards everything below
	rng       *rand.Rand
	rates     faultRates
	now       func() time.Time // the clock of timed outages; time.Now unless a test sets one
	down      bool             // refusing every connection
	downUntil time.Time        // end of a timed outage, by now; zero means until heal
	conns     map[*proxyConn]struct{}
	requests  int
	counts    [numFaultKinds]int
	refused   int
	closed    bool
	// drops, when its match is set, picks requests whose reply is
	// dropped whatever the rates say (see dropReplies).
	drops replyDrop

	wg sync.WaitGroup // the accept loop and every connection's pumps
}

// faultSeed returns the seed of a test's fault generator:
// WRITEFENCE_FAULT_SEED when set, else a fresh one. It is logged so that a
// failing run can be repeated.
func faultSeed(t testing.TB) uint64 {
	t.Helper()
	if s := os.Getenv("WRITEFENCE_FAULT_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "WRITEFENCE_FAULT_SEED")
		return seed
	}
	return rand.Uint64()
}

// newFaultProxy starts a proxy to target (host:port) that injects faults at
// rates. It is closed, with every connection through it, when the test ends.
func newFaultProxy(t testing.TB, target string, rates faultRates) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	seed := faultSeed(t)
	t.Logf("fault proxy to %s: seed %d (WRITEFENCE_FAULT_SEED=%d repeats it)", target, seed, seed)
	p := &faultProxy{
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

// addr is the address clients dial instead of the server's.
func (p *faultProxy) addr() string { return p.ln.Addr().String() }

// setRates replaces the fault rates and returns the previous ones; the
// zero value makes the proxy a faithful relay.
func (p *faultProxy) setRates(r faultRates) faultRates {
	p.mu.Lock()
	defer p.mu.Unlock()
	old := p.rates
	p.rates = r
	return old
}

// setClock makes now the clock that ends timed outages, so that a test
// decides when an outage is over instead of racing it.
func (p *faultProxy) setClock(now func() time.Time) {
	p.mu.Lock()
	p.now = now
	p.mu.Unlock()
}

// dropReplyWhen makes the proxy drop the reply of every request for which
// match (given the request's first bytes) reports true, calling then in
// between: the request has reached the server and been answered, and the
// client has not yet seen its connection reset.
func (p *faultProxy) dropReplyWhen(match func(req []byte) bool, then func()) {
	p.dropReplies(replyDrop{match: match, then: then})
}

// replyDrop says which replies the proxy drops, and when.
type replyDrop struct {
	// match picks, from its bytes, a request whose reply is dropped.
	match func(req []byte) bool
	// whole, when set, reports whether the bytes of a request read so
	// far are enough for match (a pipeline whose command that match
	// looks for may come after a large value): the proxy holds them back
	// from the server until then.
	whole func(req []byte) bool
	// end, when set, reports whether the bytes of the reply held back so
	// far are all of it (every command of a pipeline or a transaction
	// answered, which the server may do in more than one write); when
	// nil, the reply is dropped at its first byte.
	end func(reply []byte) bool
	// then, when set, runs once the reply is held back (whole, as end
	// says) and before the client learns that it is lost.
	then func()
	// hold, when set, makes the proxy hold a request match picks back
	// from the server instead, and reset its client at once: the client
	// cannot tell whether it reached the server. hold is handed, before
	// the reset, the function that sends it later, as a network that
	// delayed it past the client's giving up would, on the connection it
	// came on, and returns once the server answered it whole (as end
	// says; the reply goes nowhere), or an error when it could not.
	hold func(deliver func() error)
}

// dropReplies makes the proxy drop replies as d says, from the next
// request on.
func (p *faultProxy) dropReplies(d replyDrop) {
	p.mu.Lock()
	p.drops = d
	p.mu.Unlock()
}

// wholeRequest is the drops' whole, nil when it has none.
func (p *faultProxy) wholeRequest() func(req []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drops.match == nil {
		return nil
	}
	return p.drops.whole
}

// unreachable makes the store unreachable for d (until heal when d is
// zero): every open connection is reset and every new one refused.
func (p *faultProxy) unreachable(d time.Duration) {
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

// heal ends an outage.
func (p *faultProxy) heal() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *faultProxy) isDown() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down && !p.downUntil.IsZero() && p.now().After(p.downUntil) {
		p.down = false
	}
	return p.down
}

func (p *faultProxy) connsLocked() []*proxyConn {
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	return conns
}

// stats summarises the faults injected so far.
func (p *faultProxy) stats() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := fmt.Sprintf("%d requests", p.requests)
	for k := faultDelay; k < numFaultKinds; k++ {
		s += fmt.Sprintf(", %d %s", p.counts[k], k)
	}
	return s + fmt.Sprintf(", %d connections refused", p.refused)
}

func (p *faultProxy) count(k faultKind) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.counts[k]
}

// draw picks the fault for a request starting with req, and the delay for
// faultDelay; the last is the drops, when their match picked the request.
func (p *faultProxy) draw(req []byte) (faultKind, time.Duration, replyDrop) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if p.drops.match != nil && p.drops.match(req) {
		p.counts[faultDropReply]++
		return faultDropReply, 0, p.drops
	}
	r := p.rng.Float64()
	kind := faultNone
	for _, c := range []struct {
		kind faultKind
		rate float64
	}{{faultDelay, p.rates.Delay}, {faultReset, p.rates.Reset}, {faultDropReply, p.rates.DropReply}, {faultBlackout, p.rates.Blackout}} {
		if r < c.rate {
			kind = c.kind
			break
		}
		r -= c.rate
	}
	p.counts[kind]++
	var delay time.Duration
	if kind == faultDelay && p.rates.MaxDelay > 0 {
		delay = time.Duration(p.rng.Int64N(int64(p.rates.MaxDelay))) + 1
	}
	return kind, delay, replyDrop{}
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // the listener was closed
		}
		client := c.(*net.TCPConn)
		if p.isDown() {
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
func (p *faultProxy) close() {
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
	p              *faultProxy
	client, server *net.TCPConn

	mu       sync.Mutex // guards awaiting, drop, dropping, held, holding, answered and heldAnswered
	awaiting bool       // the client's next bytes begin a new request
	drop     faultKind  // faultDropReply or faultBlackout: reset at the first reply byte, or at dropping.end
	dropping replyDrop  // how a reply the proxy's drops picked is dropped
	held     []byte     // the reply held back until dropping.end reports it whole

	pending []byte // the start of a request held back until the drops' whole reports it enough; the request pump's own

	holding      bool          // a request is held back (dropping.hold), its server connection spared until it is answered
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
	case faultDelay:
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.p.done:
			t.Stop()
			return nil, false
		}
	case faultReset:
		return nil, false
	case faultDropReply, faultBlackout:
		hold := kind == faultDropReply && d.hold != nil
		answered := make(chan struct{})
		c.mu.Lock()
		c.drop, c.dropping = kind, d
		if hold {
			c.holding, c.answered = true, answered
		}
		c.mu.Unlock()
		if hold {
			req := bytes.Clone(p)
			d.hold(func() error { return c.deliver(req, answered) })
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
// it is forwarded: at its first byte, or once dropping.end reports it
// whole.
func (c *proxyConn) reply(p []byte) (out []byte, more bool) {
	c.mu.Lock()
	if c.holding {
		// The reply to the request held back and delivered late.
		c.held = append(c.held, p...)
		if c.dropping.end != nil && !c.dropping.end(c.held) {
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
	if drop == faultDropReply && d.end != nil {
		c.held = append(c.held, p...)
		if !d.end(c.held) {
			c.mu.Unlock()
			return nil, true
		}
	}
	c.awaiting = true
	c.mu.Unlock()
	switch drop {
	case faultDropReply:
		if d.then != nil {
			d.then()
		}
		return nil, false
	case faultBlackout:
		c.p.unreachable(c.p.outage())
		return nil, false
	}
	return p, true
}

func (p *faultProxy) outage() time.Duration {
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

// TestFaultProxy checks each fault against a server that records what
// reaches it and answers every request, so the faults the other tests rely
// on are the faults they think they are.
func TestFaultProxy(t *testing.T) {
	srv := newRecordingServer(t)

	roundTrip := func(t *testing.T, p *faultProxy, req string) (string, error) {
		t.Helper()
		c, err := net.DialTimeout("tcp", p.addr(), 5*time.Second)
		if err != nil {
			return "", err // a refused connection may already fail here
		}
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		if _, err := c.Write([]byte(req)); err != nil {
			return "", err
		}
		reply := make([]byte, len("ok:")+len(req))
		_, err = io.ReadFull(c, reply)
		return string(reply), err
	}

	t.Run("relay", func(t *testing.T) {
		p := newFaultProxy(t, srv.addr(), faultRates{})
		reply, err := roundTrip(t, p, "relay")
		require.NoError(t, err)
		assert.Equal(t, "ok:relay", reply)
		assert.True(t, srv.received("relay"))
	})
	t.Run("delay", func(t *testing.T) {
		p := newFaultProxy(t, srv.addr(), faultRates{Delay: 1, MaxDelay: 200 * time.Millisecond})
		reply, err := roundTrip(t, p, "delayed")
		require.NoError(t, err)
		assert.Equal(t, "ok:delayed", reply)
		assert.Equal(t, 1, p.count(faultDelay))
	})
	t.Run("reset before the server", func(t *testing.T) {
		srv := newRecordingServer(t) // of its own, so that ended is this connection's
		p := newFaultProxy(t, srv.addr(), faultRates{Reset: 1})
		_, err := roundTrip(t, p, "never-sent")
		require.Error(t, err)
		// The server has read all it will ever read of the connection once
		// it has seen the proxy close it.
		select {
		case <-srv.ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the proxy never closed its connection to the server")
		}
		assert.False(t, srv.received("never-sent"), "a reset request reached the server")
	})
	t.Run("drop reply", func(t *testing.T) {
		p := newFaultProxy(t, srv.addr(), faultRates{DropReply: 1})
		reply, err := roundTrip(t, p, "lost-reply")
		require.Error(t, err)
		assert.NotContains(t, reply, "ok:", "part of the reply was forwarded")
		assert.True(t, srv.received("lost-reply"), "the request must reach the server before its reply is dropped")
	})
	t.Run("drop a reply once whole", func(t *testing.T) {
		// A server that answers in two writes, the second only once the
		// proxy has held back the first: then must run after both.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { _ = ln.Close() })
		second := make(chan struct{})
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			buf := make([]byte, 64)
			if _, err := c.Read(buf); err != nil {
				return
			}
			_, _ = c.Write([]byte("first;"))
			<-second
			_, _ = c.Write([]byte("second;"))
			_, _ = c.Read(buf) // until the proxy closes
		}()
		p := newFaultProxy(t, ln.Addr().String(), faultRates{})
		var seen []string // by the proxy, read once thenRan is closed
		var thenSaw string
		thenRan := make(chan struct{})
		p.dropReplies(replyDrop{
			match: func(req []byte) bool { return string(req) == "two-part" },
			end: func(reply []byte) bool {
				seen = append(seen, string(reply))
				if string(reply) == "first;" {
					close(second)
				}
				return strings.HasSuffix(string(reply), "second;")
			},
			then: func() { thenSaw = seen[len(seen)-1]; close(thenRan) },
		})
		_, err = roundTrip(t, p, "two-part")
		require.Error(t, err, "the reply is lost")
		select {
		case <-thenRan:
		case <-time.After(10 * time.Second):
			t.Fatal("then never ran")
		}
		assert.Equal(t, []string{"first;", "first;second;"}, seen, "the reply is held back until whole")
		assert.Equal(t, "first;second;", thenSaw, "then runs once the reply is whole")
		assert.Equal(t, 1, p.count(faultDropReply))
	})
	t.Run("drop the reply of a request matched whole", func(t *testing.T) {
		// A request in two writes, the second only once the proxy holds
		// back the first: match sees both.
		p := newFaultProxy(t, srv.addr(), faultRates{})
		held := make(chan struct{})
		matched := make(chan string, 2)
		p.dropReplies(replyDrop{
			whole: func(req []byte) bool {
				if string(req) == "head;" {
					close(held)
				}
				return strings.HasSuffix(string(req), "tail;")
			},
			match: func(req []byte) bool {
				matched <- string(req)
				return true
			},
		})
		c, err := net.DialTimeout("tcp", p.addr(), 5*time.Second)
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		_, err = c.Write([]byte("head;"))
		require.NoError(t, err)
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Fatal("the proxy never held the request's start back")
		}
		_, err = c.Write([]byte("tail;"))
		require.NoError(t, err)
		_, err = io.ReadFull(c, make([]byte, 1))
		require.Error(t, err, "the reply is lost")
		assert.Equal(t, "head;tail;", <-matched, "match sees the request whole")
		assert.Empty(t, matched, "once")
		assert.Equal(t, 1, p.count(faultDropReply))
	})
	t.Run("hold a request, deliver it late", func(t *testing.T) {
		srv := newRecordingServer(t) // of its own, so that ended is this connection's
		p := newFaultProxy(t, srv.addr(), faultRates{})
		delivers := make(chan func() error, 1)
		p.dropReplies(replyDrop{
			match: func(req []byte) bool { return string(req) == "late" },
			hold:  func(deliver func() error) { delivers <- deliver },
		})
		_, err := roundTrip(t, p, "late")
		require.Error(t, err, "the client is reset")
		deliver := <-delivers
		assert.False(t, srv.received("late"), "held back from the server")
		require.NoError(t, deliver())
		assert.True(t, srv.received("late"), "delivered, on the connection it came on")
		select {
		case <-srv.ended:
		case <-time.After(10 * time.Second):
			t.Fatal("the proxy never closed the held request's connection once answered")
		}
		assert.Equal(t, 1, p.count(faultDropReply))
	})
	t.Run("blackout until healed", func(t *testing.T) {
		p := newFaultProxy(t, srv.addr(), faultRates{Blackout: 1})
		_, err := roundTrip(t, p, "blackout")
		require.Error(t, err)
		assert.True(t, srv.received("blackout"))
		p.setRates(faultRates{})
		_, err = roundTrip(t, p, "refused")
		require.Error(t, err, "the store must stay unreachable until healed")
		assert.False(t, srv.received("refused"))
		p.heal()
		reply, err := roundTrip(t, p, "healed")
		require.NoError(t, err)
		assert.Equal(t, "ok:healed", reply)
	})
	t.Run("timed outage", func(t *testing.T) {
		p := newFaultProxy(t, srv.addr(), faultRates{})
		// The outage ends by a clock the test moves, however slowly the
		// round trips run.
		var mu sync.Mutex
		now := time.Unix(1_000_000, 0)
		p.setClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

		p.unreachable(100 * time.Millisecond)
		_, err := roundTrip(t, p, "during")
		require.Error(t, err)
		advance(100 * time.Millisecond)
		_, err = roundTrip(t, p, "at its end")
		require.Error(t, err, "the outage lasts all of its 100 ms")
		advance(time.Millisecond)
		reply, err := roundTrip(t, p, "after")
		require.NoError(t, err)
		assert.Equal(t, "ok:after", reply)
		assert.False(t, srv.received("during") || srv.received("at its end"), "a request reached the server during the outage")
		assert.Contains(t, p.stats(), "2 connections refused")
	})
}

// recordingServer answers each read of a connection with "ok:" and the
// bytes read, and remembers what it received.
type recordingServer struct {
	ln    net.Listener
	wg    sync.WaitGroup
	ended chan struct{} // receives once each connection's serving ends

	mu   sync.Mutex // guards seen and open
	seen map[string]bool
	open map[net.Conn]struct{}
}

func newRecordingServer(t *testing.T) *recordingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &recordingServer{ln: ln, ended: make(chan struct{}, 64), seen: make(map[string]bool), open: make(map[net.Conn]struct{})}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.open[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Add(1)
			go s.serve(c)
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		s.mu.Lock()
		for c := range s.open {
			_ = c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *recordingServer) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.open, c)
		s.mu.Unlock()
		_ = c.Close()
		select {
		case s.ended <- struct{}{}:
		default:
		}
	}()
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			s.mu.Lock()
			s.seen[string(buf[:n])] = true
			s.mu.Unlock()
			if _, werr := c.Write(append([]byte("ok:"), buf[:n]...)); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (s *recordingServer) addr() string { return s.ln.Addr().String() }

func (s *recordingServer) received(req string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[req]
}
