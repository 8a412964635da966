//go:build (!writefence_nominio || !writefence_nogcs || !writefence_novalkey || !writefence_nodynamodb || !writefence_noetcd || !writefence_noazblob || !writefence_nopostgres) && !writefence_nosdk

package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"syscall"

	"github.com/writefence/writefence/internal/escape"
)

// unreachableError is a store address whose server cannot be reached at
// all: nothing listens on its port, or its host has no address. Retrying
// does not help, and the stores' clients would spend their retries (or
// the whole -timeout, for etcd) before saying so.
type unreachableError struct {
	addr     string // the store's address
	hostport string
	err      error
}

func (e *unreachableError) Error() string {
	var dns *net.DNSError
	if errors.As(e.err, &dns) {
		return fmt.Sprintf("writefence: no host %s (from %s): %v; check the host in -store and $WRITEFENCE_STORE",
			escape.String(dns.Name), escape.String(e.addr), dns.Err)
	}
	return fmt.Sprintf("writefence: nothing listens at %s (from %s): connection refused; check the host and port in -store and $WRITEFENCE_STORE, and that the server is up",
		escape.String(e.hostport), escape.String(e.addr))
}

func (e *unreachableError) Unwrap() error { return e.err }

// dialCheck connects to each of hostports over TCP, closing at once, and
// returns an *unreachableError when none can be reached because every one
// refuses the connection or names no host. Any other outcome (a
// connection, a timeout, an unreachable network) is left to the store's
// own client, which says more about it. With viaHTTP the store's client
// honours $HTTPS_PROXY and the like: a host it would reach through a proxy
// is not dialled, as the proxy decides.
func dialCheck(ctx context.Context, addr string, viaHTTP bool, hostports ...string) error {
	var first error
	for _, hp := range hostports {
		if viaHTTP {
			if p, err := http.ProxyFromEnvironment(&http.Request{URL: &url.URL{Scheme: "https", Host: hp}}); err != nil || p != nil {
				return nil
			}
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", hp)
		if err == nil {
			c.Close()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var dns *net.DNSError
		if !errors.Is(err, syscall.ECONNREFUSED) && !(errors.As(err, &dns) && dns.IsNotFound) {
			return nil
		}
		if first == nil {
			first = &unreachableError{addr: addr, hostport: hp, err: err}
		}
	}
	return first
}

// withPort returns host with port when it names none.
func withPort(host, port string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	return net.JoinHostPort(host, port)
}

// endpointHostPort returns the host:port of an http(s) endpoint URL.
func endpointHostPort(endpoint string) (string, bool) {
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" {
		return "", false
	}
	port := "443"
	if u.Scheme == "http" {
		port = "80"
	}
	return withPort(u.Host, port), true
}
