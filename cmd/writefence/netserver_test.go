//go:build (!writefence_nominio || !writefence_novalkey) && !writefence_nosdk

package main

import (
	"net"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// tcpServer accepts connections on a loopback port and hands each to
// serve, in a goroutine of its own; it returns the address. When the test
// ends the listener and every connection are closed and serve is waited
// for.
func tcpServer(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex // guards conns and closed
		conns  []net.Conn
		closed bool
	)
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			if closed {
				mu.Unlock()
				c.Close()
				return
			}
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { serve(c) })
		}
	})
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		closed = true
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return l.Addr().String()
}

// silentServer accepts TCP connections and never answers; accepted
// receives each of the first 16 connections once it is accepted.
func silentServer(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ch := make(chan net.Conn, 16)
	addr = tcpServer(t, func(c net.Conn) {
		select {
		case ch <- c:
		default:
		}
	})
	return addr, ch
}
