//go:build !writefence_novalkey && !writefence_nosdk

package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
)

func init() {
	for _, scheme := range []string{"valkey", "valkeys", "redis", "rediss"} {
		openers[scheme] = openValkey
	}
	for _, scheme := range []string{"valkey+cluster", "valkeys+cluster"} {
		openers[scheme] = openValkeyCluster
	}
	advisers = append(advisers, adviseValkey)
	// go-redis logs dial failures on its own (pool.go: ... failed to
	// dial); the command reports the error once, itself.
	redis.SetLogger(quietLogger{})
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// openValkey opens valkey://host:port/db[?script=1&wait=N&wait-timeout=D&tls=true],
// or valkeys:// for TLS. The password comes from VALKEY_PASSWORD, or
// REDISCLI_AUTH as valkey-cli reads it, and the ACL user from
// VALKEY_USERNAME. Over TLS the server's certificate is checked against
// the host's CAs (SSL_CERT_FILE or SSL_CERT_DIR name others).
func openValkey(_ context.Context, u *url.URL) (*opened, error) {
	p, err := valkeyParams(u)
	if err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return nil, usagef("writefence: store address: want %s://host:port/db, with a port", u.Scheme)
	}
	db := 0
	if p := strings.Trim(u.Path, "/"); p != "" {
		db, err = strconv.Atoi(p)
		if err != nil || db < 0 {
			return nil, usagef("writefence: store address: database %s: want a number", escape.String(p))
		}
	}
	username, password := valkeyCredentials()
	opts := &redis.Options{
		Addr:     u.Host,
		DB:       db,
		Username: username,
		Password: password,
		// Reads and writes end at the command's -timeout: without this
		// go-redis waits out its own timeouts (seconds) whatever ctx says.
		ContextTimeoutEnabled: true,
		TLSConfig:             p.tlsConfig(host),
	}
	client := redis.NewClient(opts)
	return p.opened(client, func(ctx context.Context) error {
		if err := dialCheck(ctx, u.String(), false, u.Host); err != nil {
			return err
		}
		return valkeyServerReady(ctx, client, u, p.wait)
	}), nil
}

// openValkeyCluster opens valkey+cluster://host:port,host:port[?script=1&wait=N&wait-timeout=D&tls=true],
// a Valkey or Redis cluster reached through any of the nodes listed (the
// client learns the others from them), or valkeys+cluster:// for TLS,
// with the certificates of every node checked against the first host's
// name. Credentials come from the environment as for valkey://. A cluster
// has one database: the address takes no path. Each wait= counts the
// replicas of the primary that owns the record's slot.
func openValkeyCluster(_ context.Context, u *url.URL) (*opened, error) {
	p, err := valkeyParams(u)
	if err != nil {
		return nil, err
	}
	want := usagef("writefence: store address: want %s://host:port,host:port,..., each node with a port, and no path (a cluster has one database)", u.Scheme)
	if strings.Trim(u.Path, "/") != "" {
		return nil, want
	}
	addrs := strings.Split(u.Host, ",")
	for _, a := range addrs {
		if host, port, err := net.SplitHostPort(a); err != nil || host == "" || port == "" {
			return nil, want
		}
	}
	username, password := valkeyCredentials()
	opts := &redis.ClusterOptions{
		Addrs:                 addrs,
		Username:              username,
		Password:              password,
		ContextTimeoutEnabled: true, // as for valkey://
	}
	host, _, _ := net.SplitHostPort(addrs[0])
	opts.TLSConfig = p.tlsConfig(host)
	client := redis.NewClusterClient(opts)
	return p.opened(client, func(ctx context.Context) error {
		if err := dialCheck(ctx, u.String(), false, addrs...); err != nil {
			return err
		}
		if p.wait == 0 {
			return nil
		}
		return client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			return valkeyReplicasReady(ctx, c, u, p.wait)
		})
	}), nil
}

// opened returns the store over client with p's settings; ready checks,
// before the command's first request, that the server answers as p asks.
func (p valkeyQuery) opened(client redis.UniversalClient, ready func(ctx context.Context) error) *opened {
	return &opened{
		store: writefence.NewValkeyConditionalStore(client, p.options()),
		opts:  *p.options(),
		close: client.Close,
		audit: valkeyAuditor(client, p.wait),
		ready: ready,
	}
}

// tlsConfig returns the TLS settings of a connection to host, nil when p
// asks for none: the server's certificate is checked against host.
func (p valkeyQuery) tlsConfig(host string) *tls.Config {
	if !p.tls {
		return nil
	}
	return &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
}

// valkeyQuery is the settings of a Valkey address's query.
type valkeyQuery struct {
	script      bool
	wait        int
	waitTimeout time.Duration
	tls         bool
}

// valkeyParams reads script=, wait=, wait-timeout= and tls= from u, whose
// scheme ends in "s" (or "s+cluster") for TLS.
func valkeyParams(u *url.URL) (valkeyQuery, error) {
	var p valkeyQuery
	q, err := query(u, "script", "wait", "wait-timeout", "tls")
	if err != nil {
		return p, err
	}
	if p.script, err = boolParam(q, "script", false); err != nil {
		return p, err
	}
	if p.wait, p.waitTimeout, err = waitParams(q); err != nil {
		return p, err
	}
	base := strings.TrimSuffix(u.Scheme, "+cluster")
	tlsScheme := base == "valkeys" || base == "rediss"
	if p.tls, err = boolParam(q, "tls", tlsScheme); err != nil {
		return p, err
	}
	if tlsScheme && !p.tls {
		plain := strings.TrimSuffix(base, "s") + strings.TrimPrefix(u.Scheme, base)
		return p, usagef("writefence: store address: tls=false: %s:// always uses TLS; use %s:// for a plain connection", u.Scheme, plain)
	}
	return p, nil
}

// options returns the store settings of p.
func (p valkeyQuery) options() *writefence.StoreOptions {
	return &writefence.StoreOptions{Script: p.script, WaitReplicas: p.wait, WaitTimeout: p.waitTimeout}
}

// valkeyCredentials returns the ACL user and the password from the
// environment: VALKEY_USERNAME, and VALKEY_PASSWORD or else REDISCLI_AUTH,
// as valkey-cli reads it.
func valkeyCredentials() (username, password string) {
	password = os.Getenv("VALKEY_PASSWORD")
	if password == "" {
		password = os.Getenv("REDISCLI_AUTH")
	}
	return os.Getenv("VALKEY_USERNAME"), password
}

// waitParams reads wait=N, the replicas that must acknowledge each write
// (StoreOptions.WaitReplicas), and wait-timeout=D, how long each
// WAIT may take (WaitTimeout, zero for the store's default).
func waitParams(q url.Values) (int, time.Duration, error) {
	wait := 0
	if v := q.Get("wait"); v != "" {
		n, err := strconv.ParseUint(v, 10, 31)
		if err != nil {
			return 0, 0, usagef("writefence: store address: wait=%s: want the number of replicas that must acknowledge each write, in decimal digits", escape.String(v))
		}
		wait = int(n)
	}
	var timeout time.Duration
	if v := q.Get("wait-timeout"); v != "" {
		d, err := time.ParseDuration(v)
		switch {
		case err != nil || d <= 0:
			return 0, 0, usagef("writefence: store address: wait-timeout=%s: want a positive duration, such as 500ms or 2s", escape.String(v))
		case wait == 0:
			// Without wait= nothing waits, and a timeout given for
			// nothing is more likely a forgotten wait=.
			return 0, 0, usagef("writefence: store address: wait-timeout=%s without wait=N: no write waits for replicas", escape.String(v))
		}
		timeout = d
	}
	return wait, timeout, nil
}

// adviseValkey names the variables read when the server refused the
// credentials.
func adviseValkey(err error, _ *invocation) error {
	if !redis.IsAuthError(err) {
		return nil
	}
	return &advisedError{err, "the Valkey server refused the credentials; the command read " +
		envList("VALKEY_USERNAME", "VALKEY_PASSWORD", "REDISCLI_AUTH") + ": export the password (and the ACL user)"}
}

// valkeyServerReady refuses, before any key is read or written, a
// valkey:// address of a cluster node (the store serves standalone servers
// there, and a cluster needs valkey+cluster://) and, with wait=N, a
// server with fewer than N replicas online, whose every write would wait
// in vain and end with an unknown outcome. A server that does not answer
// INFO (an ACL without +info) is left to the store's own checks.
func valkeyServerReady(ctx context.Context, c *redis.Client, u *url.URL, wait int) error {
	info, err := c.Info(ctx).Result()
	if err != nil {
		return ctx.Err()
	}
	if enabled, ok := infoFields(info)["cluster_enabled"]; ok && enabled != "0" {
		cluster := "valkey+cluster"
		if strings.HasSuffix(u.Scheme, "s") {
			cluster = "valkeys+cluster"
		}
		return usagef("writefence: store address: %s is a node of a cluster (cluster_enabled:%s), which %s:// does not serve: "+
			"address the cluster as '%s://%s' (any of its nodes; the cluster has one database, so no /db)",
			escape.String(u.Host), escape.String(enabled), u.Scheme, cluster, escape.String(u.Host))
	}
	return replicasEnough(info, c.Options().Addr, u, wait)
}

// valkeyReplicasReady refuses a primary with fewer than wait replicas
// online, as valkeyServerReady does.
func valkeyReplicasReady(ctx context.Context, c *redis.Client, u *url.URL, wait int) error {
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return ctx.Err()
	}
	return replicasEnough(info, c.Options().Addr, u, wait)
}

// replicasEnough reads the replicas online from the INFO output of the
// server at node and refuses fewer than wait.
func replicasEnough(info, node string, u *url.URL, wait int) error {
	if wait == 0 {
		return nil
	}
	online := 0
	for k, v := range infoFields(info) {
		if strings.HasPrefix(k, "slave") && strings.Trim(k[len("slave"):], "0123456789") == "" && slices.Contains(strings.Split(v, ","), "state=online") {
			online++
		}
	}
	if online >= wait {
		return nil
	}
	return &fewReplicasError{fmt.Errorf("writefence: %s has %d replicas online, fewer than wait=%d in the address: no write could be confirmed, "+
		"so none was sent (it would end with an unknown outcome, and so would every retry); attach replicas to it "+
		"(on each: replicaof %s), or give wait= the number of replicas the server has (none: leave wait= out)",
		escape.String(node), online, wait, strings.Replace(escape.String(node), ":", " ", 1))}
}
