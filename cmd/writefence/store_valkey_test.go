//go:build !writefence_novalkey && !writefence_nosdk

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// TestValkeyAddress: a Valkey address's query sets the replicas every
// write waits for and how long, and TLS; a bad value is a usage error that
// names the parameter, before any I/O, and so is a malformed address,
// echoing no secret.
func TestValkeyAddress(t *testing.T) {
	ctx := context.Background()
	assertRefused(t,
		"valkey://127.0.0.1",
		"valkey://127.0.0.1:6379/zero",
		"valkey://127.0.0.1:6379/0?script=perhaps",
		"valkey://default:hunter2secret@127.0.0.1:6379/0",
		"valkey+cluster://127.0.0.1",
		"valkey+cluster://127.0.0.1:1,127.0.0.1",
		"valkey+cluster://127.0.0.1:1,",
		"valkey+cluster://127.0.0.1:1/0",
		"valkey+cluster://default:hunter2secret@127.0.0.1:1",
	)
	assertOpens(t, "*writefence.valkeyStore", "valkey://h:1/3?script=1", "redis://h:1")
	s, err := openStore(ctx, "valkey://h:1/3?script=1")
	require.NoError(t, err)
	defer func() { require.NoError(t, s.close()) }()
	assert.True(t, s.opts.Script)
	c, err := openStore(ctx, "valkey+cluster://h:1,h:2?script=1")
	require.NoError(t, err)
	defer func() { require.NoError(t, c.close()) }()
	assert.True(t, c.opts.Script)
	for addr, want := range map[string]struct {
		wait    int
		timeout time.Duration
	}{
		"valkey://h:1/0":                                  {},
		"valkey://h:1/0?wait=0":                           {},
		"valkey://h:1/0?wait=1":                           {wait: 1},
		"valkey://h:1/0?wait=2&wait-timeout=250ms":        {wait: 2, timeout: 250 * time.Millisecond},
		"valkeys://h:1/0?wait=1&wait-timeout=3s&script=1": {wait: 1, timeout: 3 * time.Second},
		"valkey://h:1/0?tls=true":                         {},
		"rediss://h:1":                                    {},
		"valkey+cluster://h:1,h:2":                        {},
		"valkey+cluster://h:1,h:2/?wait=1":                {wait: 1},
		"valkeys+cluster://h:1?wait=2&wait-timeout=250ms": {wait: 2, timeout: 250 * time.Millisecond},
		"valkey+cluster://h:1?script=1&tls=true&wait=1":   {wait: 1},
	} {
		s, err := openStore(ctx, addr)
		require.NoError(t, err, addr)
		assert.Equal(t, want.wait, s.opts.WaitReplicas, addr)
		assert.Equal(t, want.timeout, s.opts.WaitTimeout, addr)
		require.NoError(t, s.close(), addr)
	}
	assertRefusedSaying(t, map[string]string{
		"valkey://h:1/0?wait=-1":                   "wait=-1",
		"valkey://h:1/0?wait=one":                  "wait=one",
		"valkey://h:1/0?wait=1.5":                  "wait=1.5",
		"valkey://h:1/0?wait=99999999999":          "wait=99999999999",
		"valkey://h:1/0?wait=1&wait-timeout=soon":  "wait-timeout=soon",
		"valkey://h:1/0?wait=1&wait-timeout=0s":    "wait-timeout=0s",
		"valkey://h:1/0?wait=1&wait-timeout=-1s":   "wait-timeout=-1s",
		"valkey://h:1/0?wait-timeout=1s":           "wait-timeout=1s without wait=N",
		"valkey://h:1/0?wait=0&wait-timeout=1s":    "wait-timeout=1s without wait=N",
		"valkey://h:1/0?tls=maybe":                 "tls=maybe",
		"valkeys://h:1/0?tls=false":                "tls=false",
		"valkeys://h/0":                            "valkeys://host:port/db",
		"valkey://h:1/0?wiat=1":                    `"wiat"`,
		"valkey://h:1/0?wait=1&wait_timeout=100ms": `"wait_timeout"`,
		"valkey+cluster://h:1?wait=one":            "wait=one",
		"valkey+cluster://h:1?wait-timeout=1s":     "wait-timeout=1s without wait=N",
		"valkeys+cluster://h:1?tls=false":          "use valkey+cluster://",
		"valkey+cluster://h:1?db=3":                `"db"`,
	})
	r := wf(t, "help")
	for _, doc := range []string{"valkeys://host:port/db", "wait=N", "wait-timeout=D", "tls=true"} {
		assert.Contains(t, r.stdout, doc, "the store addresses in help")
	}
	for _, c := range []string{"push", "settle"} {
		assert.Contains(t, wf(t, "help", c).stdout, "'valkey://host:port/0?wait=1'", "help %s", c)
	}
}

// respServer answers every command with reply, as a Valkey server that
// requires a password answers a client that sent none with an error.
func respServer(t *testing.T, reply string) string {
	t.Helper()
	return tcpServer(t, func(c net.Conn) {
		r := bufio.NewReader(c)
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return
			}
			if strings.HasPrefix(line, "*") {
				if _, err := io.WriteString(c, reply); err != nil {
					return
				}
			}
		}
	})
}

// TestValkeyErrorAdvice: the Valkey errors a user fixes from the shell
// say how.
func TestValkeyErrorAdvice(t *testing.T) {
	t.Run("valkey NOAUTH names the variables read", func(t *testing.T) {
		noValkeyPassword(t)
		addr := respServer(t, "-NOAUTH Authentication required.\r\n")
		r := wf(t, "latest", "-timeout", "20s", "-store", "valkey://"+addr+"/0", "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		for _, v := range []string{"VALKEY_USERNAME (unset)", "VALKEY_PASSWORD (unset)", "REDISCLI_AUTH (unset)"} {
			assert.Contains(t, r.stderr, v)
		}
	})
	t.Run("timeout names the address and -timeout", func(t *testing.T) {
		addr, _ := silentServer(t)
		store := "valkey://" + addr + "/0"
		start := time.Now()
		r := wf(t, "latest", "-json", "-timeout", "200ms", "-store", store, "wal", "s")
		// go-redis's own read timeout is seconds; -timeout must win.
		assert.Less(t, time.Since(start), 3*time.Second, "the command gave up at -timeout")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.Contains(t, r.stderr, store)
		assert.Contains(t, r.stderr, "-timeout 200ms")
		assert.Contains(t, jsonOf(t, r)["error"], "raise -timeout")
	})
	t.Run("TLS to a plain server says so", func(t *testing.T) {
		// A plain server answers the TLS handshake's bytes with an error
		// line, as Valkey does when they hold a newline.
		plain := tcpServer(t, func(c net.Conn) { _, _ = io.WriteString(c, "-ERR unknown command\r\n") })
		silent, _ := silentServer(t)
		for _, store := range []string{"valkeys://" + plain + "/0", "valkey://" + plain + "/0?tls=true", "valkeys://" + silent + "/0"} {
			r := wf(t, "latest", "-timeout", "500ms", "-store", store, "wal", "s")
			assert.Equal(t, exitError, r.code, "%s: %s", store, r)
			assert.Contains(t, r.stderr, "does not speak TLS", store)
			assert.Contains(t, r.stderr, "use valkey:// without tls=true", store)
		}
	})
}

// wfProcess runs args as a process and returns its result.
func wfProcess(t *testing.T, args ...string) result {
	t.Helper()
	c := wfCommand(t, "", args...)
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	var exit *exec.ExitError
	if err != nil {
		require.ErrorAs(t, err, &exit)
	}
	return result{c.ProcessState.ExitCode(), stdout.String(), stderr.String()}
}

// TestRedisLogSilenced: go-redis's own log lines (pool.go: failed to
// dial) never reach stderr; the command reports the error once.
func TestRedisLogSilenced(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	r := wfProcess(t, "latest", "-timeout", "20s", "-store", "valkey://"+addr+"/0", "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.NotContains(t, r.stderr, "pool.go")
	assert.NotContains(t, r.stderr, "redis: 20", "a log line's timestamp")
	assert.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, "one line: %s", r.stderr)
}

func TestServerValkey(t *testing.T) {
	addr := testserver.ValkeyAddr(t)
	noValkeyPassword(t)
	for _, store := range []string{"valkey://" + addr + "/0", "valkey://" + addr + "/0?script=1"} {
		t.Run(store, func(t *testing.T) { serverScenario(t, store, testserver.ValkeyPrefix(t, addr)) })
	}
}

// TestServerValkeyDamage: a Valkey value edited by hand after the record's
// header is found damaged by the store's own check; latest still reads the
// header's epoch from it and prints a settle line above that epoch, in text
// and in -json, and the line replaces the value.
func TestServerValkeyDamage(t *testing.T) {
	addr := testserver.ValkeyAddr(t)
	noValkeyPassword(t)
	prefix := testserver.ValkeyPrefix(t, addr)
	store := []string{"-store", "valkey://" + addr + "/0", "-prefix", prefix}
	cmd := func(name string, args ...string) result {
		return wf(t, append(append([]string{name}, store...), args...)...)
	}
	p := writeFile(t, "segment 0001")
	require.Equal(t, exitOK, cmd("push", "-writer", "node-a", "-epoch", "5", "-file", p, "wal", "s").code)
	key, err := keys.Shard(prefix, "wal", "s")
	require.NoError(t, err)
	c := testserver.ValkeyClient(t, addr, "")
	v, err := c.Get(t.Context(), key).Bytes()
	require.NoError(t, err)
	require.NoError(t, c.Set(t.Context(), key, testserver.Flipped(v, len(v)-1), 0).Err()) // the payload's last byte

	r := cmd("latest", "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Contains(t, r.stdout, "\nepoch     5\n")
	m := regexp.MustCompile(`to overwrite it: writefence (settle .*)\n`).FindStringSubmatch(r.stderr)
	require.NotNil(t, m, "a settle line: %s", r)
	assert.Contains(t, m[1], " -epoch 6 ")
	r = cmd("latest", "-json", "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	j := jsonOf(t, r)
	assert.True(t, strings.HasPrefix(j["version"].(string), "damaged-"), "%v", j["version"])
	assert.Equal(t, "writefence "+m[1], j["settle"])

	line := strings.NewReplacer("-writer W", "-writer operator", "-file F", "-file "+p).Replace(m[1])
	r = wf(t, strings.Fields(line)...)
	require.Equal(t, exitOK, r.code, "%s: %s", line, r)
	r = cmd("latest", "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 6, jsonOf(t, r)["epoch"])
}

// startReplicated starts a private Valkey primary with one replica, waits
// until the primary counts the replica online (only then does WAIT count
// it) and returns the primary's address and a client of the replica. The
// primary serves the replica's first sync at once, not after the default
// delay of 5 s.
func startReplicated(t *testing.T) (primary string, replica *redis.Client) {
	t.Helper()
	primary = testserver.StartValkey(t, "", "--repl-diskless-sync-delay", "0")
	host, port, err := net.SplitHostPort(primary)
	require.NoError(t, err)
	replica = testserver.ValkeyClient(t, testserver.StartValkey(t, "", "--replicaof", host, port), "")
	p := testserver.ValkeyClient(t, primary, "")
	// Only the servers' replication state is polled: it changes on its own.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		link, err := replica.Info(t.Context(), "replication").Result()
		require.NoError(t, err)
		info, err := p.Info(t.Context(), "replication").Result()
		require.NoError(t, err)
		if strings.Contains(link, "master_link_status:up") && regexp.MustCompile(`\nslave0:[^\n]*state=online`).MatchString(info) {
			return primary, replica
		}
		require.False(t, time.Now().After(deadline), "the replica never came online:\n%s\n%s", link, info)
	}
}

// TestServerValkeyWait: with wait=1 in the address a push to a replicated
// Valkey returns only once the replica holds it; with wait=2 and one
// replica online no push could be confirmed, so the command refuses it
// before anything is read or written (exit 1), saying how many replicas
// there are, rather than waiting in vain and calling the outcome unknown
// (exit 8), which no repetition would change.
func TestServerValkeyWait(t *testing.T) {
	noValkeyPassword(t)
	primary, replica := startReplicated(t)
	p := writeFile(t, "segment 0001")
	push := func(store, epoch string) result {
		return wf(t, "push", "-store", store, "-writer", "a", "-epoch", epoch, "-file", p, "wal", "s")
	}

	r := push("valkey://"+primary+"/0?wait=1&wait-timeout=10s", "1")
	require.Equal(t, exitOK, r.code, "%s", r)
	key, err := keys.Shard("", "wal", "s")
	require.NoError(t, err)
	n, err := replica.Exists(t.Context(), key).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the replica holds the push once it returned")

	for _, store := range []string{"valkey://" + primary + "/0?wait=2&wait-timeout=100ms", "valkey://" + primary + "/0?wait=2&wait-timeout=100ms&script=1"} {
		r = push(store, "2")
		assert.Equal(t, exitError, r.code, "%s: %s", store, r)
		assert.Contains(t, r.stderr, "writefence: "+primary+" has 1 replicas online, fewer than wait=2 in the address: no write could be confirmed, so none was sent", store)
		assert.Contains(t, r.stderr, "replicaof", store)
	}
	r = wf(t, "latest", "-json", "-store", "valkey://"+primary+"/0?wait=1&wait-timeout=10s", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"], "an unconfirmed read decided nothing: no push was written")
}

// TestServerValkeyCluster: the scenario on the cluster .ci/run starts,
// through valkey+cluster:// naming two of its nodes, on both write paths:
// race and probe included, and ls over every primary.
func TestServerValkeyCluster(t *testing.T) {
	addrs := testserver.ValkeyClusterAddrs(t)
	noValkeyPassword(t)
	for _, store := range []string{"valkey+cluster://" + addrs[0] + "," + addrs[1], "valkey+cluster://" + addrs[2] + "?script=1"} {
		t.Run(store, func(t *testing.T) { serverScenario(t, store, testserver.ValkeyClusterPrefix(t, addrs, false)) })
	}
}

// TestServerValkeyClusterWait: on the cluster, where each primary has one
// replica, wait=1 lets a push return once the replica of the record's
// primary holds it; wait=2 is refused before the write (exit 1).
func TestServerValkeyClusterWait(t *testing.T) {
	addrs := testserver.ValkeyClusterAddrs(t)
	noValkeyPassword(t)
	prefix := testserver.ValkeyClusterPrefix(t, addrs, false)
	cluster := "valkey+cluster://" + strings.Join(addrs, ",")
	p := writeFile(t, "segment 0001")
	push := func(store, epoch string) result {
		return wf(t, "push", "-store", store, "-prefix", prefix, "-writer", "a", "-epoch", epoch, "-file", p, "wal", "s")
	}
	r := push(cluster+"?wait=1&wait-timeout=10s", "1")
	require.Equal(t, exitOK, r.code, "%s", r)
	key, err := keys.Shard(prefix, "wal", "s")
	require.NoError(t, err)
	c := testserver.ValkeyClusterClient(t, addrs)
	replica, err := c.SlaveForKey(t.Context(), key)
	require.NoError(t, err)
	conn := replica.Conn()
	defer conn.Close()
	require.NoError(t, conn.ReadOnly(t.Context()).Err())
	n, err := conn.Exists(t.Context(), key).Result()
	require.NoError(t, err)
	assert.EqualValues(t, 1, n, "the replica holds the push once it returned")

	for _, q := range []string{"?wait=2&wait-timeout=100ms", "?wait=2&wait-timeout=100ms&script=1"} {
		r = push(cluster+q, "2")
		assert.Equal(t, exitError, r.code, "%s: %s", q, r) // as in TestServerValkeyWait
		assert.Regexp(t, `writefence: 127\.0\.0\.1:\d+ has 1 replicas online, fewer than wait=2 in the address: no write could be confirmed, so none was sent`, r.stderr, q)
	}
	r = wf(t, "latest", "-json", "-prefix", prefix, "-store", cluster+"?wait=1&wait-timeout=10s", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"], "nothing was written")
}

// TestServerValkeyTLS: valkeys:// (and tls=true) speak TLS and check the
// server's certificate against the host's CAs, SSL_CERT_FILE included; a
// certificate of another CA and a server without TLS fail, saying so. The
// TLS server is a proxy to a private Valkey; the command runs as a process
// of its own, since Go reads SSL_CERT_FILE once per process.
func TestServerValkeyTLS(t *testing.T) {
	noValkeyPassword(t)
	backend := testserver.StartValkey(t, "")
	cert, caFile := selfSignedCert(t)
	addr := tlsProxy(t, backend, cert)
	p := writeFile(t, "segment 0001")

	t.Setenv("SSL_CERT_FILE", caFile)
	r := wfProcess(t, "push", "-store", "valkeys://"+addr+"/0", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = wfProcess(t, "latest", "-json", "-store", "valkey://"+addr+"/0?tls=true", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"])

	_, otherCA := selfSignedCert(t)
	t.Setenv("SSL_CERT_FILE", otherCA)
	r = wfProcess(t, "latest", "-timeout", "20s", "-store", "valkeys://"+addr+"/0", "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "certificate was not accepted")
	assert.Contains(t, r.stderr, "SSL_CERT_FILE")

	r = wf(t, "latest", "-timeout", "2s", "-store", "valkeys://"+backend+"/0", "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "does not speak TLS")
}

// selfSignedCert returns a certificate for 127.0.0.1 that is its own CA,
// and a PEM file holding it, for SSL_CERT_FILE.
func selfSignedCert(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "writefence test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	file := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, file
}

// tlsProxy serves TLS with cert on a loopback port and relays each
// connection to the plain server at target; it stops when the test ends.
func tlsProxy(t *testing.T, target string, cert tls.Certificate) string {
	t.Helper()
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	return tcpServer(t, func(c net.Conn) {
		b, err := net.Dial("tcp", target)
		if err != nil {
			return
		}
		tc := tls.Server(c, cfg)
		done := make(chan struct{})
		go func() {
			_, _ = io.Copy(b, tc)
			b.Close() // ends the copy below
			close(done)
		}()
		_, _ = io.Copy(tc, b)
		c.Close() // ends the copy above
		<-done
	})
}

// TestServerValkeyCredentialsNeverPrinted: wrong credentials from the
// environment fail with the plain error status, and the secret appears in
// no output.
func TestServerValkeyCredentialsNeverPrinted(t *testing.T) {
	const secret = "wrong-secret-d41d8cd9"
	addr := testserver.ValkeyAddr(t)
	// An unknown ACL user: a server without a password ignores a
	// password alone.
	t.Setenv("VALKEY_USERNAME", "writefence-nobody")
	t.Setenv("VALKEY_PASSWORD", secret)
	r := wf(t, "latest", "-store", "valkey://"+addr+"/0", "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.NotContains(t, r.stdout+r.stderr, secret)
	assert.Contains(t, r.stderr, "VALKEY_PASSWORD (set)", "the variables read are named")
}
