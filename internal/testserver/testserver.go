// Package testserver starts and reaches the real servers the integration
// tests and benchmarks run against (Valkey, a Valkey cluster, MinIO, the
// GCS emulator, etcd, dynalite, Azurite, PostgreSQL), and damages what
// they hold as a test needs, so that the packages' tests, the command's
// tests and the benchmarks share one copy of each helper.
//
// The processes are started by the subpackage launch. The servers a whole
// run shares are named by the environment cmd/servers gives the command
// it runs (.ci/run runs the tests so):
// WRITEFENCE_S3_ENDPOINT, WRITEFENCE_S3_ACCESS_KEY,
// WRITEFENCE_S3_SECRET_KEY, WRITEFENCE_GCS_ENDPOINT,
// WRITEFENCE_VALKEY_ADDR, WRITEFENCE_VALKEY_CLUSTER,
// WRITEFENCE_ETCD_ENDPOINT, WRITEFENCE_DYNAMODB_ENDPOINT,
// WRITEFENCE_AZURITE_ENDPOINT (with its account and key) and
// WRITEFENCE_POSTGRES_URL. A test whose server is not named is skipped,
// unless WRITEFENCE_REQUIRE_SERVERS is set, in which case it fails.
package testserver

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/storage"
	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/redis/go-redis/v9"
	"google.golang.org/api/iterator"
	"google.golang.org/api/option"

	"github.com/writefence/writefence/internal/testserver/launch"
)

// Required reports whether a missing server fails a test instead of
// skipping it.
func Required() bool { return os.Getenv("WRITEFENCE_REQUIRE_SERVERS") != "" }

// Env returns the environment variable naming a real server. When it is
// unset the test is skipped, or fails when Required.
func Env(t testing.TB, name string) string {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		if Required() {
			t.Fatalf("%s is not set but WRITEFENCE_REQUIRE_SERVERS is: the server this test needs was not started", name)
		}
		t.Skipf("%s not set: start the servers with .ci/run (or export it) to run this test", name)
	}
	return v
}

// UniqueName returns a fresh random name for a test's keys or bucket, so
// integration tests never see each other's data.
func UniqueName(t testing.TB) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = crand.Read(b) // crypto/rand.Read never fails
	return "wf-" + hex.EncodeToString(b)
}

// CleanupContext bounds a cleanup of t: a test's own context is done by
// then. The bound is the test binary's own deadline (go test -timeout),
// less a margin for the report, not a fixed time: a loaded machine makes
// a cleanup of a thousand objects slow, never wrong, and a server that
// hangs still ends the run at that deadline, with every goroutine's
// stack. Every cleanup of a server's data uses it.
func CleanupContext(t testing.TB) (context.Context, context.CancelFunc) {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if end, ok := d.Deadline(); ok {
			if time.Until(end) > 2*cleanupMargin {
				end = end.Add(-cleanupMargin)
			}
			return context.WithDeadline(context.Background(), end)
		}
	}
	return context.WithTimeout(context.Background(), 10*time.Minute)
}

// cleanupMargin is the time CleanupContext leaves before the binary's
// deadline, for the cleanup's error to be reported before the binary is
// stopped; a cleanup that starts closer to the deadline than twice that
// runs to the deadline itself.
const cleanupMargin = 10 * time.Second

// cleanupWorkers is how many deletes a bucket's cleanup has in flight.
const cleanupWorkers = 8

// deleteAll deletes the objects of bucket: list calls send with each
// name, stopping when send returns false (the cleanup's ctx is done), and
// del deletes one, with cleanupWorkers in flight. It reports each failure
// on t and returns when every call has.
func deleteAll(ctx context.Context, t testing.TB, bucket string, list func(send func(name string) bool) error, del func(name string) error) {
	names := make(chan string)
	go func() {
		defer close(names)
		err := list(func(name string) bool {
			select {
			case names <- name:
				return true
			case <-ctx.Done():
				return false
			}
		})
		if err != nil {
			t.Errorf("cleanup: list %s: %v", bucket, err)
		}
	}()
	var wg sync.WaitGroup
	for range cleanupWorkers {
		wg.Go(func() {
			for name := range names {
				if err := del(name); err != nil {
					t.Errorf("cleanup: delete %s: %v", name, err)
				}
			}
		})
	}
	wg.Wait()
}

func check(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// S3 is an S3 server and how its clients reach it.
type S3 struct {
	Endpoint, AccessKey, SecretKey string // empty keys: anonymous requests
	MaxRetries                     int    // attempts per request; 0: the client's default
}

// S3Server returns the S3 server named by the environment.
func S3Server(t testing.TB) S3 {
	t.Helper()
	return S3{
		Endpoint:  Env(t, "WRITEFENCE_S3_ENDPOINT"),
		AccessKey: Env(t, "WRITEFENCE_S3_ACCESS_KEY"),
		SecretKey: Env(t, "WRITEFENCE_S3_SECRET_KEY"),
	}
}

// Client returns a client of the server with s's credentials, sending
// through rt (nil: the default transport). Its region is fixed, which
// spares it a bucket-location request.
func (s S3) Client(t testing.TB, rt http.RoundTripper) *minio.Client {
	t.Helper()
	c, err := minio.New(s.Endpoint, &minio.Options{
		Creds:      credentials.NewStaticV4(s.AccessKey, s.SecretKey, ""),
		Transport:  rt,
		Region:     "us-east-1",
		MaxRetries: s.MaxRetries,
	})
	check(t, err)
	return c
}

// MinioBucket creates a bucket of the test's own through c and removes it,
// with its objects, when the test ends.
func MinioBucket(t testing.TB, c *minio.Client) string {
	t.Helper()
	bucket := UniqueName(t)
	check(t, c.MakeBucket(context.Background(), bucket, minio.MakeBucketOptions{}))
	t.Cleanup(func() {
		ctx, cancel := CleanupContext(t)
		defer cancel()
		deleteAll(ctx, t, bucket, func(send func(string) bool) error {
			for o := range c.ListObjects(ctx, bucket, minio.ListObjectsOptions{Recursive: true}) {
				if o.Err != nil {
					return o.Err
				}
				if !send(o.Key) {
					return nil
				}
			}
			return nil
		}, func(key string) error {
			return c.RemoveObject(ctx, bucket, key, minio.RemoveObjectOptions{})
		})
		if err := c.RemoveBucket(ctx, bucket); err != nil {
			t.Errorf("cleanup: remove bucket %s: %v", bucket, err)
		}
	})
	return bucket
}

// GCSEndpoint returns the GCS emulator's address, e.g. http://127.0.0.1:4443.
func GCSEndpoint(t testing.TB) string { return Env(t, "WRITEFENCE_GCS_ENDPOINT") }

// GCSClient returns a client of the GCS emulator at endpoint, sending
// through rt (nil: the default transport), closed when the test ends.
func GCSClient(t testing.TB, endpoint string, rt http.RoundTripper) *storage.Client {
	t.Helper()
	opts := []option.ClientOption{option.WithEndpoint(endpoint + "/storage/v1/"), option.WithoutAuthentication()}
	if rt != nil {
		opts = append(opts, option.WithHTTPClient(&http.Client{Transport: rt}))
	}
	c, err := storage.NewClient(context.Background(), opts...)
	check(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// GCSBucket creates a bucket of the test's own through c and removes it,
// with its objects, when the test ends.
func GCSBucket(t testing.TB, c *storage.Client) string {
	t.Helper()
	name := UniqueName(t)
	b := c.Bucket(name)
	check(t, b.Create(context.Background(), "writefence-test", nil))
	t.Cleanup(func() {
		ctx, cancel := CleanupContext(t)
		defer cancel()
		deleteAll(ctx, t, name, func(send func(string) bool) error {
			for it := b.Objects(ctx, nil); ; {
				attrs, err := it.Next()
				if errors.Is(err, iterator.Done) {
					return nil
				}
				if err != nil {
					return err
				}
				if !send(attrs.Name) {
					return nil
				}
			}
		}, func(object string) error {
			if err := b.Object(object).Delete(ctx); err != nil && !errors.Is(err, storage.ErrObjectNotExist) {
				return err
			}
			return nil
		})
		if err := b.Delete(ctx); err != nil {
			t.Errorf("cleanup: delete bucket %s: %v", name, err)
		}
	})
	return name
}

// ValkeyAddr returns the address of the Valkey server named by the
// environment.
func ValkeyAddr(t testing.TB) string { return Env(t, "WRITEFENCE_VALKEY_ADDR") }

// ValkeyClient returns a client of the Valkey server at addr that never
// retries (a retried write would hide what the tests look at), closed when
// the test ends.
func ValkeyClient(t testing.TB, addr, password string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, Password: password, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// ValkeyPrefix returns a key prefix of the test's own on the Valkey server
// at addr; its keys are deleted when the test ends.
func ValkeyPrefix(t testing.TB, addr string) string {
	t.Helper()
	prefix := UniqueName(t) + "/"
	t.Cleanup(func() {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		ctx, cancel := CleanupContext(t)
		defer cancel()
		keys, err := c.Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Errorf("cleanup: keys %s*: %v", prefix, err)
			return
		}
		if len(keys) > 0 {
			if err := c.Del(ctx, keys...).Err(); err != nil {
				t.Errorf("cleanup: del: %v", err)
			}
		}
	})
	return prefix
}

// StartValkey starts a valkey-server of the test's own on a free port in
// 20000-32000 with the given extra arguments, waits until it answers
// (authenticating with password when set), stops it when the test ends,
// and returns its address. Without valkey-server on PATH the test is
// skipped, or fails when Required.
func StartValkey(t testing.TB, password string, args ...string) string {
	t.Helper()
	return startValkey(t, password, func() []string { return args })
}

// startValkey is StartValkey with the extra arguments args returns, asked
// afresh for each port tried (they may name a port of their own).
func startValkey(t testing.TB, password string, args func() []string) string {
	t.Helper()
	needProgram(t, "valkey-server")
	p, addr, err := launch.Valkey(t.TempDir(), password, args)
	check(t, err)
	t.Cleanup(p.Stop)
	return addr
}

// needProgram skips t, or fails it when Required, unless the program name
// is on PATH.
func needProgram(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		if Required() {
			t.Fatalf("%s is not on PATH but WRITEFENCE_REQUIRE_SERVERS is set (go run ./internal/testserver/cmd/servers -install installs it)", name)
		}
		t.Skipf("%s is not on PATH", name)
	}
}

// FreePort returns a loopback TCP port in 20000-32000 that was free a
// moment ago, for a server process a test starts; "" when it found none.
// It takes no testing.TB so that a TestMain can use it too.
func FreePort() string { return launch.FreePort() }

// KitOverwriteReads is the size of Get/UnderOverwrite
// (writefencetest.Options.OverwriteReads) in the conformance runs on the
// servers, but MinIO's: 3,000 reads under overwrite. A read path that
// takes bytes and version from two responses mispairs on a large share
// of them and fails every run; the full 21,000 is for a server that
// mispairs rarely, as some S3-compatible ones do, and runs on MinIO, in
// the kit's own tests and, with WRITEFENCE_LONG set, everywhere (0).
func KitOverwriteReads() int {
	if os.Getenv("WRITEFENCE_LONG") != "" {
		return 0
	}
	return 3000
}
