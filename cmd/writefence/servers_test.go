package main

import (
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
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/keys"
	"github.com/writefence/writefence/internal/testserver"
)

// s3Address creates a bucket of the test's own on the S3 server, removed
// with its objects afterwards, and returns its address. The command finds
// the credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
func s3Address(t *testing.T) string {
	s3 := testserver.S3Server(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	bucket := testserver.MinioBucket(t, s3.Client(t, nil))
	return "s3://" + bucket + "?endpoint=" + s3.Endpoint + "&secure=false"
}

// gcsBucket creates a bucket of the test's own on the emulator, removed
// with its objects afterwards, and returns its name and the endpoint.
func gcsBucket(t *testing.T) (bucket, endpoint string) {
	endpoint = testserver.GCSEndpoint(t)
	return testserver.GCSBucket(t, testserver.GCSClient(t, endpoint, nil)), endpoint
}

func TestServerS3(t *testing.T) {
	serverScenario(t, s3Address(t), "")
}

func TestServerGCS(t *testing.T) {
	bucket, endpoint := gcsBucket(t)
	serverScenario(t, "gs://"+bucket+"?endpoint="+endpoint, "")
}

// TestServerGCSEmulatorHost: with STORAGE_EMULATOR_HOST set, gs://bucket
// reaches the emulator without an endpoint in the address.
func TestServerGCSEmulatorHost(t *testing.T) {
	bucket, endpoint := gcsBucket(t)
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	t.Setenv("STORAGE_EMULATOR_HOST", u.Host)
	addr := "gs://" + bucket
	require.Equal(t, exitOK, wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s").code)
	r := wf(t, "latest", "-store", addr, "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"])
}

func TestServerValkey(t *testing.T) {
	addr := testserver.ValkeyAddr(t)
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
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
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
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
// replica no push can be confirmed, and the command says the outcome is
// unknown (exit 8) rather than reporting a push a failover could lose.
func TestServerValkeyWait(t *testing.T) {
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
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
		assert.Equal(t, exitUnknown, r.code, "%s: %s", store, r)
		assert.Contains(t, r.stderr, "1 of 2 replicas acknowledged", store)
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
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
	for _, store := range []string{"valkey+cluster://" + addrs[0] + "," + addrs[1], "valkey+cluster://" + addrs[2] + "?script=1"} {
		t.Run(store, func(t *testing.T) { serverScenario(t, store, testserver.ValkeyClusterPrefix(t, addrs, false)) })
	}
}

// TestServerValkeyClusterWait: on the cluster, where each primary has one
// replica, wait=1 lets a push return once the replica of the record's
// primary holds it; wait=2 is an unknown outcome (exit 8).
func TestServerValkeyClusterWait(t *testing.T) {
	addrs := testserver.ValkeyClusterAddrs(t)
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
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
		assert.Equal(t, exitUnknown, r.code, "%s: %s", q, r)
		assert.Contains(t, r.stderr, "1 of 2 replicas acknowledged", q)
	}
}

// TestServerValkeyTLS: valkeys:// (and tls=true) speak TLS and check the
// server's certificate against the host's CAs, SSL_CERT_FILE included; a
// certificate of another CA and a server without TLS fail, saying so. The
// TLS server is a proxy to a private Valkey; the command runs as a process
// of its own, since Go reads SSL_CERT_FILE once per process.
func TestServerValkeyTLS(t *testing.T) {
	t.Setenv("VALKEY_PASSWORD", "")
	t.Setenv("REDISCLI_AUTH", "")
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

// TestServerCredentialsNeverPrinted: wrong credentials from the
// environment fail with the plain error status, and the secret appears in
// no output.
func TestServerCredentialsNeverPrinted(t *testing.T) {
	const secret = "wrong-secret-d41d8cd9"
	t.Run("s3", func(t *testing.T) {
		addr := s3Address(t)
		t.Setenv("AWS_SECRET_ACCESS_KEY", secret)
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.NotContains(t, r.stdout+r.stderr, secret)
	})
	t.Run("s3 without credentials", func(t *testing.T) {
		addr := s3Address(t)
		for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"} {
			t.Setenv(v, "")
		}
		t.Setenv("HOME", t.TempDir()) // no ~/.aws/credentials
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "")
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.Contains(t, r.stderr, "AWS_ACCESS_KEY_ID (unset)", "%s", r)
		assert.Contains(t, r.stderr, "MINIO_ROOT_USER (unset)")
	})
	t.Run("valkey", func(t *testing.T) {
		addr := testserver.ValkeyAddr(t)
		// An unknown ACL user: a server without a password ignores a
		// password alone.
		t.Setenv("VALKEY_USERNAME", "writefence-nobody")
		t.Setenv("VALKEY_PASSWORD", secret)
		r := wf(t, "latest", "-store", "valkey://"+addr+"/0", "wal", "s")
		assert.Equal(t, exitError, r.code, "%s", r)
		assert.NotContains(t, r.stdout+r.stderr, secret)
		assert.Contains(t, r.stderr, "VALKEY_PASSWORD (set)", "the variables read are named")
	})
}

// serverScenario runs every subcommand against the store at addr, under
// prefix (the default when empty), and asserts each exit status.
func serverScenario(t *testing.T, addr, prefix string) {
	store := []string{"-store", addr}
	if prefix != "" {
		store = append(store, "-prefix", prefix)
	}
	cmd := func(name string, args ...string) result {
		return wf(t, append(append([]string{name}, store...), args...)...)
	}
	p := writeFile(t, "segment 0001")

	// latest and push: not found, landed, stale, the version shown.
	assert.Equal(t, exitNotFound, cmd("latest", "wal", "s").code)
	r := cmd("push", "-writer", "node-a", "-epoch", "2", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = cmd("push", "-json", "-writer", "zombie", "-epoch", "2", "-file", p, "wal", "s")
	assert.Equal(t, exitStale, r.code, "%s", r)
	assert.EqualValues(t, 2, jsonOf(t, r)["recorded_epoch"])
	r = cmd("latest", "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	m := jsonOf(t, r)
	assert.EqualValues(t, 2, m["epoch"])
	assert.Equal(t, "node-a", m["writer"])
	assert.EqualValues(t, 12, m["size"])
	assert.NotEmpty(t, m["version"])
	key := m["key"].(string)

	// ls: the store's own listing, names that need escaping included.
	require.Equal(t, exitOK, cmd("push", "-writer", "node-c", "-epoch", "4", "-file", p, "--", "wal/x", "a b").code)
	r = cmd("ls")
	require.Equal(t, exitOK, r.code, "%s", r)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	slices.Sort(lines) // Valkey's SCAN has no order
	assert.Equal(t, []string{"wal\ts\t2\tnode-a\tok\t0\t0\t0", "wal/x\ta b\t4\tnode-c\tok\t0\t0\t0"}, lines)
	r = cmd("ls", "-json", "wal/x")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "a b", jsonOf(t, r)["shard"])

	// brand: absent, installed, claimed, foreign.
	assert.Equal(t, exitWire, cmd("brand", "verify").code)
	r = cmd("brand", "install", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, true, jsonOf(t, r)["installed"])
	assert.Equal(t, exitOK, cmd("brand", "claim").code)
	assert.Equal(t, exitOK, cmd("brand", "verify").code)
	assert.Equal(t, exitWire, cmd("brand", "verify", "-identity", "other/v2").code)
	assert.Equal(t, exitOK, cmd("push", "-brand", "verify", "-writer", "node-a", "-epoch", "3", "-file", p, "wal", "s").code)

	// probe and race.
	r = cmd("probe", "-json")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, true, jsonOf(t, r)["trusted"])
	r = cmd("race", "-writers", "8", "-rounds", "5")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, "exactly one winner each")

	// settle: corrupt the record through the store itself, then settle it.
	ctx := t.Context()
	s, err := openStore(ctx, addr)
	require.NoError(t, err)
	defer s.close()
	data, v, err := s.store.Get(ctx, key)
	require.NoError(t, err)
	corruptV, err := s.store.PutIfVersion(ctx, key, data[:len(data)-1], v)
	require.NoError(t, err)
	r = cmd("latest", "-json", "wal", "s")
	require.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Equal(t, corruptV, jsonOf(t, r)["version"])
	r = cmd("ls", "wal")
	assert.Equal(t, exitCorrupt, r.code, "%s", r)
	assert.Equal(t, "wal\ts\t3\tnode-a\tcorrupt\t-\t-\t-\n", r.stdout, "listed with its header's epoch, not skipped")
	assert.Equal(t, exitCorrupt, cmd("push", "-writer", "node-b", "-epoch", "9", "-file", p, "wal", "s").code)
	r = cmd("settle", "-confirm-version", corruptV, "-writer", "operator", "-epoch", "10", "-file", p, "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	r = cmd("latest", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.True(t, strings.Contains(r.stdout, "epoch     10\n") && strings.Contains(r.stdout, "writer    operator\n"), "%s", r)
}
