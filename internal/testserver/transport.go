package testserver

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// HTTPTransport returns a clone of the default transport whose idle
// connections are closed when the test ends, so that no goroutine of an
// SDK client built on it outlives the test.
func HTTPTransport(t testing.TB) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// Transport is an http.RoundTripper that counts the requests it sends, the
// writes among them (PUT and POST, the writes of either API) and the
// response body bytes its client reads.
type Transport struct {
	base  *http.Transport
	reqs  atomic.Int64
	puts  atomic.Int64
	read  atomic.Int64
	reads atomic.Int64 // GET response body bytes only
}

// NewTransport returns a counting transport over HTTPTransport(t).
func NewTransport(t testing.TB) *Transport { return &Transport{base: HTTPTransport(t)} }

// RoundTrip implements http.RoundTripper.
func (c *Transport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.reqs.Add(1)
	if r.Method == http.MethodPut || r.Method == http.MethodPost {
		c.puts.Add(1)
	}
	resp, err := c.base.RoundTrip(r)
	if resp != nil {
		body := &countingBody{ReadCloser: resp.Body, n: &c.read}
		if r.Method == http.MethodGet {
			body.get = &c.reads
		}
		resp.Body = body
	}
	return resp, err
}

// Requests returns the requests sent so far.
func (c *Transport) Requests() int64 { return c.reqs.Load() }

// Writes returns the PUT and POST requests sent so far.
func (c *Transport) Writes() int64 { return c.puts.Load() }

// BytesRead returns the response body bytes read so far.
func (c *Transport) BytesRead() int64 { return c.read.Load() }

// GetBytesRead returns the GET response body bytes read so far.
func (c *Transport) GetBytesRead() int64 { return c.reads.Load() }

type countingBody struct {
	io.ReadCloser
	n, get *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	if b.get != nil {
		b.get.Add(int64(n))
	}
	return n, err
}
