package faultproxy

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFaultProxy checks each fault against a server that records what
// reaches it and answers every request, so the faults the other tests rely
// on are the faults they think they are.
func TestFaultProxy(t *testing.T) {
	srv := newRecordingServer(t)

	roundTrip := func(t *testing.T, p *Proxy, req string) (string, error) {
		t.Helper()
		c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
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
		p := New(t, srv.Addr(), Rates{})
		reply, err := roundTrip(t, p, "relay")
		require.NoError(t, err)
		assert.Equal(t, "ok:relay", reply)
		assert.True(t, srv.received("relay"))
	})
	t.Run("delay", func(t *testing.T) {
		p := New(t, srv.Addr(), Rates{Delay: 1, MaxDelay: 200 * time.Millisecond})
		reply, err := roundTrip(t, p, "delayed")
		require.NoError(t, err)
		assert.Equal(t, "ok:delayed", reply)
		assert.Equal(t, 1, p.Count(Delay))
	})
	t.Run("reset before the server", func(t *testing.T) {
		srv := newRecordingServer(t) // of its own, so that ended is this connection's
		p := New(t, srv.Addr(), Rates{Reset: 1})
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
		p := New(t, srv.Addr(), Rates{DropReply: 1})
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
		p := New(t, ln.Addr().String(), Rates{})
		var seen []string // by the proxy, read once thenRan is closed
		var thenSaw string
		thenRan := make(chan struct{})
		p.DropReplies(Drop{
			Match: func(req []byte) bool { return string(req) == "two-part" },
			End: func(reply []byte) bool {
				seen = append(seen, string(reply))
				if string(reply) == "first;" {
					close(second)
				}
				return strings.HasSuffix(string(reply), "second;")
			},
			Then: func() { thenSaw = seen[len(seen)-1]; close(thenRan) },
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
		assert.Equal(t, 1, p.Count(DropReply))
	})
	t.Run("drop the reply of a request matched whole", func(t *testing.T) {
		// A request in two writes, the second only once the proxy holds
		// back the first: match sees both.
		p := New(t, srv.Addr(), Rates{})
		held := make(chan struct{})
		matched := make(chan string, 2)
		p.DropReplies(Drop{
			Whole: func(req []byte) bool {
				if string(req) == "head;" {
					close(held)
				}
				return strings.HasSuffix(string(req), "tail;")
			},
			Match: func(req []byte) bool {
				matched <- string(req)
				return true
			},
		})
		c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
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
		assert.Equal(t, 1, p.Count(DropReply))
	})
	t.Run("hold a request, deliver it late", func(t *testing.T) {
		srv := newRecordingServer(t) // of its own, so that ended is this connection's
		p := New(t, srv.Addr(), Rates{})
		delivers := make(chan func() error, 1)
		p.DropReplies(Drop{
			Match: func(req []byte) bool { return string(req) == "late" },
			Hold:  func(deliver func() error) { delivers <- deliver },
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
		assert.Equal(t, 1, p.Count(DropReply))
	})
	t.Run("blackout until healed", func(t *testing.T) {
		p := New(t, srv.Addr(), Rates{Blackout: 1})
		_, err := roundTrip(t, p, "blackout")
		require.Error(t, err)
		assert.True(t, srv.received("blackout"))
		p.SetRates(Rates{})
		_, err = roundTrip(t, p, "refused")
		require.Error(t, err, "the store must stay unreachable until healed")
		assert.False(t, srv.received("refused"))
		p.Heal()
		reply, err := roundTrip(t, p, "healed")
		require.NoError(t, err)
		assert.Equal(t, "ok:healed", reply)
	})
	t.Run("timed outage", func(t *testing.T) {
		p := New(t, srv.Addr(), Rates{})
		// The outage ends by a clock the test moves, however slowly the
		// round trips run.
		var mu sync.Mutex
		now := time.Unix(1_000_000, 0)
		p.SetClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
		advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

		p.Unreachable(100 * time.Millisecond)
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
		assert.Contains(t, p.Stats(), "2 connections refused")
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

func (s *recordingServer) Addr() string { return s.ln.Addr().String() }

func (s *recordingServer) received(req string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[req]
}
