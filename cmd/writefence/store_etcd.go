//go:build !writefence_noetcd && !writefence_nosdk

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/writefence/writefence/etcdstore"
	"github.com/writefence/writefence/internal/escape"
)

func init() {
	openers["etcd"] = openEtcd
	openers["etcds"] = openEtcd
}

// openEtcd opens etcd://host:port[/prefix][?max-request-bytes=N&tls=true],
// or etcds:// for TLS. The path, when there is one, is the etcd key prefix
// of the store's keys, with a "/" after it: etcd://h:2379/mirrors keeps
// them under "/mirrors/". Authentication comes from the environment, as
// etcdctl reads it: ETCDCTL_USER (name, or name:password) and
// ETCDCTL_PASSWORD; over TLS ETCDCTL_CACERT names the CA (else the host's
// CAs), ETCDCTL_CERT and ETCDCTL_KEY a client certificate.
func openEtcd(_ context.Context, u *url.URL) (*opened, error) {
	q, err := query(u, "max-request-bytes", "tls")
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return nil, usagef("writefence: store address: want %s://host:port[/prefix], with a port", u.Scheme)
	}
	prefix := ""
	if p := strings.TrimSuffix(u.Path, "/"); p != "" {
		prefix = p + "/"
	}
	useTLS, err := boolParam(q, "tls", u.Scheme == "etcds")
	if err != nil {
		return nil, err
	}
	if u.Scheme == "etcds" && !useTLS {
		return nil, usagef("writefence: store address: tls=false: etcds:// always uses TLS; use etcd:// for a plain connection")
	}
	var maxRequest int64
	if v := q.Get("max-request-bytes"); v != "" {
		maxRequest, err = strconv.ParseInt(v, 10, 64)
		if err != nil || maxRequest <= 0 {
			return nil, usagef("writefence: store address: max-request-bytes=%s: want the server's --max-request-bytes, a positive number", escape.String(v))
		}
	}
	cfg := clientv3.Config{
		Endpoints:   []string{u.Host},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(), // the command reports errors itself
	}
	cfg.Username, cfg.Password, _ = strings.Cut(os.Getenv("ETCDCTL_USER"), ":")
	if p := os.Getenv("ETCDCTL_PASSWORD"); p != "" {
		cfg.Password = p
	}
	if useTLS {
		info := transport.TLSInfo{
			TrustedCAFile: os.Getenv("ETCDCTL_CACERT"),
			CertFile:      os.Getenv("ETCDCTL_CERT"),
			KeyFile:       os.Getenv("ETCDCTL_KEY"),
		}
		var tc *tls.Config
		if info.CertFile != "" || info.TrustedCAFile != "" {
			if tc, err = info.ClientConfig(); err != nil {
				return nil, fmt.Errorf("writefence: etcd client: tls: %w", err)
			}
		} else {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tc.ServerName = host
		cfg.TLS = tc
	}
	client, err := clientv3.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("writefence: etcd client: %w", err)
	}
	s := etcdstore.New(client, prefix)
	s.MaxRequestBytes = maxRequest
	addr := u.String()
	return &opened{
		store: s,
		close: client.Close,
		audit: etcdAuditor(client),
		// The client waits for a connection until ctx ends, so an address
		// where nothing listens would take the whole -timeout to fail:
		// a refused connection fails at once.
		ready: func(ctx context.Context) error { return dialCheck(ctx, addr, true, u.Host) },
	}, nil
}
