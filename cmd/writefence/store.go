package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"
	"github.com/redis/go-redis/v9"
	"google.golang.org/api/option"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

// storeFlags are the flags every command that opens a store shares.
type storeFlags struct {
	inv     *invocation // told the address and timeout, for error advice
	addr    string
	prefix  string
	timeout time.Duration
	json    bool
}

// defaultTimeout is the default -timeout of a command that makes a few
// requests.
const defaultTimeout = time.Minute

// addStoreFlags adds -store, -prefix, -timeout and -json to fs. The global
// -store, when given, is the default.
func addStoreFlags(fs *flag.FlagSet, inv *invocation, timeout time.Duration) *storeFlags {
	sf := &storeFlags{inv: inv}
	fs.StringVar(&sf.addr, "store", inv.store, "store `address` (default $WRITEFENCE_STORE, else the state directory)")
	fs.Var((*prefixValue)(&sf.prefix), "prefix", "key `prefix`, a directory: myapp means myapp/ (default "+keys.DefaultPrefix+")")
	fs.DurationVar(&sf.timeout, "timeout", timeout, "give up after this long (0: never)")
	fs.BoolVar(&sf.json, "json", false, "print JSON on stdout, one object per line")
	return sf
}

// prefixValue is -prefix. The prefix names a directory of keys, so one
// given without a trailing "/" gets one: -prefix myapp writes under
// myapp/s/..., never under myapps/.... A prefix that ends in "/" is kept
// as given, and an empty one leaves the default.
type prefixValue string

func (p *prefixValue) String() string { return string(*p) }

func (p *prefixValue) Set(s string) error {
	if s != "" && !strings.HasSuffix(s, "/") {
		s += "/"
	}
	*p = prefixValue(s)
	return nil
}

// opened is an open store and what releases its client.
type opened struct {
	store writefence.ConditionalStore
	addr  string // the address as given; openStore refuses one with credentials
	close func() error
}

// output is where the command reports, as -json asks.
func (sf *storeFlags) output() *output { return &output{inv: sf.inv, json: sf.json} }

// withStore opens the store (the default when -store is empty), runs use
// on it with ctx bounded by -timeout, closes it and returns use's exit
// status; a store that does not open fails the command through o. With
// readOnly the store is opened for a command that only reads: it creates
// nothing and needs no write permission, and a directory that holds no
// store is an error. Otherwise a missing directory store is created.
func (sf *storeFlags) withStore(ctx context.Context, o *output, readOnly bool, use func(ctx context.Context, s *opened) int) int {
	if sf.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, sf.timeout)
		defer cancel()
	}
	sf.inv.timeout = sf.timeout
	addr, err := storeAddress(sf.addr)
	if err != nil {
		return o.fail(err)
	}
	s, err := openStoreMode(ctx, addr, readOnly)
	if err != nil {
		return o.fail(err)
	}
	defer s.close()
	sf.inv.addr = addr
	return use(ctx, s)
}

// storeAddress returns addr, or the default address when addr is empty.
func storeAddress(addr string) (string, error) {
	if addr != "" {
		return addr, nil
	}
	if env := os.Getenv("WRITEFENCE_STORE"); env != "" {
		return env, nil
	}
	dir, err := defaultDir()
	if err != nil {
		return "", err
	}
	return (&url.URL{Scheme: "file", Path: dir}).String(), nil
}

// defaultDir is the persistent default store: the XDG state directory,
// because records are state that should outlive a reboot, unlike a cache.
func defaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "writefence"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("writefence: no default store: %w; pass -store", err)
	}
	return filepath.Join(home, ".local", "state", "writefence"), nil
}

// openers maps an address scheme to what opens it. Tests add their own.
var openers = map[string]func(ctx context.Context, u *url.URL) (*opened, error){
	"mem":             openMem,
	"file":            openFile,
	"s3":              openS3,
	"gs":              openGCS,
	"valkey":          openValkey,
	"valkeys":         openValkey,
	"redis":           openValkey,
	"rediss":          openValkey,
	"valkey+cluster":  openValkeyCluster,
	"valkeys+cluster": openValkeyCluster,
	// Stores in packages of their own (store_<name>.go).
	"dynamodb": openDynamoDB,
	"etcd":     openEtcd,
	"etcds":    openEtcd,
}

// userInAddress holds the schemes whose addresses may name a user (never
// a password): a user name is no secret, and PostgreSQL's URLs carry one.
var userInAddress = map[string]bool{}

// readOpeners maps a scheme whose read-only open differs to it.
var readOpeners = map[string]func(ctx context.Context, u *url.URL) (*opened, error){
	"file": openFileRead,
}

// openStore opens the store addr names for writing.
func openStore(ctx context.Context, addr string) (*opened, error) {
	return openStoreMode(ctx, addr, false)
}

// openStoreMode opens the store addr names, for reading only when
// readOnly is set. A malformed address is a usageError, reported without
// echoing the address: it may hold a secret typed by mistake.
func openStoreMode(ctx context.Context, addr string, readOnly bool) (*opened, error) {
	u, err := url.Parse(addr)
	if err != nil {
		return nil, usagef("writefence: store address: cannot parse it as a URL")
	}
	if _, hasPassword := u.User.Password(); u.User != nil && (hasPassword || !userInAddress[u.Scheme]) {
		return nil, usagef("writefence: store address: credentials are not accepted in the address; set them in the environment (writefence help stores)")
	}
	open, ok := openers[u.Scheme]
	if ro, has := readOpeners[u.Scheme]; has && readOnly {
		open = ro
	}
	if !ok {
		return nil, usagef("writefence: store address: unknown scheme %q (want one of %s)", escape.String(u.Scheme), strings.Join(slices.Sorted(maps.Keys(openers)), ", "))
	}
	s, err := open(ctx, u)
	if err != nil {
		return nil, err
	}
	s.addr = addr
	return s, nil
}

// query returns the address's query, refusing parameters not in allowed
// so that a misspelt one is not silently ignored.
func query(u *url.URL, allowed ...string) (url.Values, error) {
	q := u.Query()
	for k := range q {
		if !slices.Contains(allowed, k) {
			return nil, usagef("writefence: store address: %s:// takes no parameter %q", u.Scheme, escape.String(k))
		}
	}
	return q, nil
}

func boolParam(q url.Values, name string, def bool) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, usagef("writefence: store address: %s=%s: want true or false", name, escape.String(v))
	}
	return b, nil
}

func noClose() error { return nil }

func openMem(_ context.Context, u *url.URL) (*opened, error) {
	if u.Host != "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		return nil, usagef("writefence: store address: mem:// takes no host, path or parameters")
	}
	return &opened{store: &writefence.MemStore{}, close: noClose}, nil
}

// openS3 opens s3://bucket?endpoint=host:port&secure=false&region=r.
// Credentials come from the environment, in minio-go's usual order.
func openS3(_ context.Context, u *url.URL) (*opened, error) {
	q, err := query(u, "endpoint", "secure", "region")
	if err != nil {
		return nil, err
	}
	bucket := u.Host
	if bucket == "" || strings.Trim(u.Path, "/") != "" {
		return nil, usagef("writefence: store address: want s3://bucket[?endpoint=host:port], the bucket as the host and no path")
	}
	if err := s3utils.CheckValidBucketNameStrict(bucket); err != nil {
		return nil, usagef("writefence: store address: bucket %s: %v", escape.String(bucket), err)
	}
	endpoint := q.Get("endpoint")
	if endpoint == "" {
		endpoint = "s3.amazonaws.com"
	}
	if strings.Contains(endpoint, "/") {
		return nil, usagef("writefence: store address: endpoint=%s: want host:port, without a scheme (use secure=false for http)", escape.String(endpoint))
	}
	secure, err := boolParam(q, "secure", true)
	if err != nil {
		return nil, err
	}
	creds := credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.EnvMinio{},
		&credentials.FileAWSCredentials{},
	})
	client, err := minio.New(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: q.Get("region")})
	if err != nil {
		return nil, fmt.Errorf("writefence: s3 client: %w", err)
	}
	return &opened{store: writefence.NewMinioConditionalStore(client, bucket), close: noClose}, nil
}

// openGCS opens gs://bucket[?endpoint=http://host:port]. With an endpoint
// (an emulator) no credentials are used; otherwise the client finds
// application default credentials, or STORAGE_EMULATOR_HOST.
func openGCS(ctx context.Context, u *url.URL) (*opened, error) {
	q, err := query(u, "endpoint")
	if err != nil {
		return nil, err
	}
	bucket := u.Host
	if bucket == "" || strings.Trim(u.Path, "/") != "" {
		return nil, usagef("writefence: store address: want gs://bucket[?endpoint=http://host:port], the bucket as the host and no path")
	}
	if !validGCSBucket(bucket) {
		return nil, usagef("writefence: store address: bucket %s: want 3 to 63 lower-case letters, digits, '-', '_' or '.', starting and ending with a letter or digit", escape.String(bucket))
	}
	var opts []option.ClientOption
	if ep := q.Get("endpoint"); ep != "" {
		e, err := url.Parse(ep)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" {
			return nil, usagef("writefence: store address: endpoint=%s: want http://host:port or https://host:port", escape.String(ep))
		}
		if e.Path == "" || e.Path == "/" {
			e.Path = "/storage/v1/"
		}
		opts = append(opts, option.WithEndpoint(e.String()), option.WithoutAuthentication())
	}
	client, err := storage.NewClient(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("writefence: cloud storage client: %w", err)
	}
	client.SetRetry(storage.WithErrorFunc(gcsRetryable))
	return &opened{store: writefence.NewGCSConditionalStore(client, bucket), close: client.Close}, nil
}

// gcsRetryable is the client's retry policy (storage.ShouldRetry) except
// that a refused connection is final: nothing listens at the endpoint, and
// retrying would wait out the whole -timeout before saying so, where the
// other stores fail at once.
func gcsRetryable(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return false
	}
	return storage.ShouldRetry(err)
}

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
	}
	if p.tls {
		opts.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	client := redis.NewClient(opts)
	return &opened{store: p.store(client), close: client.Close}, nil
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
	if p.tls {
		host, _, _ := net.SplitHostPort(addrs[0])
		opts.TLSConfig = &tls.Config{ServerName: host, MinVersion: tls.VersionTLS12}
	}
	client := redis.NewClusterClient(opts)
	return &opened{store: p.store(client), close: client.Close}, nil
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

// store returns a store over client with p's settings.
func (p valkeyQuery) store(client redis.UniversalClient) *writefence.ValkeyConditionalStore {
	s := writefence.NewValkeyConditionalStore(client)
	s.Script = p.script
	s.WaitReplicas, s.WaitTimeout = p.wait, p.waitTimeout
	return s
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
// (ValkeyConditionalStore.WaitReplicas), and wait-timeout=D, how long each
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

// validGCSBucket applies Cloud Storage's naming rules for buckets without
// dots, and the 222-byte limit of dotted names; the server decides the rest.
func validGCSBucket(b string) bool {
	max := 63
	if strings.Contains(b, ".") {
		max = 222
	}
	if len(b) < 3 || len(b) > max {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(b); i++ {
		if c := b[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return alnum(b[0]) && alnum(b[len(b)-1])
}
