package azblobstore_test

import (
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence"
	"github.com/writefence/writefence/azblobstore"
	"github.com/writefence/writefence/internal/modeltest"
	"github.com/writefence/writefence/internal/probecheck"
	"github.com/writefence/writefence/internal/pushbench"
	"github.com/writefence/writefence/internal/sdkserver/azurite"
	"github.com/writefence/writefence/internal/testserver"
	"github.com/writefence/writefence/internal/testserver/kit"
)

// The integration tests run against the Azure Blob endpoint named by
// WRITEFENCE_AZURITE_ENDPOINT (Azurite, as .ci/run starts it).

// kitReadLimit is the read limit the conformance run sets, so the suite
// checks ErrTooLarge without writing 64 MiB.
const kitReadLimit = 2 << 20

// newStore returns a store over a container of the test's own, deleted
// with its blobs when the test ends, and the container's client. rt, when
// set, carries the store's requests.
func newStore(t *testing.T, rt http.RoundTripper) (*azblobstore.Store, *container.Client) {
	t.Helper()
	svc := azurite.AzuriteServer(t).Service(t, rt)
	c := svc.NewContainerClient(azurite.AzuriteContainer(t, svc))
	return azblobstore.New(c), c
}

// TestMain sets rapid's flags for the model test and checks for leaked
// goroutines (modeltest.Main).
func TestMain(m *testing.M) { modeltest.Main(m) }

// TestConformance runs the exported conformance suite over one container;
// damage is an unconditional overwrite by a client of its own.
func TestConformance(t *testing.T) {
	store, c := newStore(t, nil)
	store.MaxObjectSize = kitReadLimit
	kit.Run(t, store, azurite.DamageAzblob(c), kitReadLimit)
}

// TestProbe: the probe trusts Azurite, and leaves no blob behind.
func TestProbe(t *testing.T) {
	store, _ := newStore(t, nil)
	kit.Probe(t, store)
}

// TestModel runs the model (internal/modeltest) on Azure Blob on
// Azurite, damaged by raw overwrites.
func TestModel(t *testing.T) {
	t.Parallel()
	modeltest.Run(t, func(t *testing.T) modeltest.Target {
		store, c := newStore(t, nil)
		return modeltest.Target{Name: "azblob", Rewrites: true, Store: store, Damage: azurite.DamageAzblob(c)}
	})
}

// preconditionProxy forwards to target and, while strip is set, removes
// the precondition headers, as a service that ignores them would; it
// counts the headers it removed.
type preconditionProxy struct {
	srv      *httptest.Server
	strip    bool
	stripped atomic.Int64
}

func newPreconditionProxy(t *testing.T, target string, strip bool) *preconditionProxy {
	t.Helper()
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &preconditionProxy{strip: strip}
	p.srv = httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(u)
		r.Out.URL.Path = r.In.URL.Path // the account is already in the path
		if !p.strip {
			return
		}
		for _, h := range []string{"If-Match", "If-None-Match"} {
			if r.Out.Header.Get(h) != "" {
				r.Out.Header.Del(h)
				p.stripped.Add(1)
			}
		}
	}})
	t.Cleanup(p.srv.Close)
	return p
}

// proxiedStore returns a store over a container of its own reached through
// a precondition proxy. Its client authenticates with a SAS token in the
// URL, which, unlike a shared key signature, does not cover the headers:
// a proxy stripping them from a shared-key request would be refused for a
// bad signature, not ignored.
func proxiedStore(t *testing.T, strip bool) (*azblobstore.Store, *azblobstore.Store, *preconditionProxy) {
	t.Helper()
	az := azurite.AzuriteServer(t)
	svc := az.Service(t, nil)
	name := azurite.AzuriteContainer(t, svc)
	direct := svc.NewContainerClient(name)
	cred, err := service.NewSharedKeyCredential(az.Account, az.Key)
	require.NoError(t, err)
	perms := sas.ContainerPermissions{Read: true, Write: true, Create: true, Delete: true, List: true}
	q, err := sas.BlobSignatureValues{
		Protocol:      sas.ProtocolHTTPSandHTTP,
		ExpiryTime:    time.Now().Add(time.Hour),
		ContainerName: name,
		Permissions:   perms.String(),
	}.SignWithSharedKey(cred)
	require.NoError(t, err)
	p := newPreconditionProxy(t, az.Endpoint, strip)
	u, err := url.Parse(az.Endpoint)
	require.NoError(t, err)
	proxied, err := container.NewClientWithNoCredential(p.srv.URL+u.Path+"/"+name+"?"+q.Encode(), &container.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: testserver.HTTPTransport(t)}},
	})
	require.NoError(t, err)
	return azblobstore.New(proxied), azblobstore.New(direct), p
}

// TestProbeThroughProxy: through a proxy that passes the preconditions
// the probe trusts the store; through one that strips them it refuses it,
// and a Fence with Probe set writes nothing.
func TestProbeThroughProxy(t *testing.T) {
	t.Run("passing", func(t *testing.T) {
		store, _, p := proxiedStore(t, false)
		require.NoError(t, writefence.Probe(t.Context(), store, "probe"))
		assert.Zero(t, p.stripped.Load())
	})
	t.Run("stripping", func(t *testing.T) {
		store, direct, p := proxiedStore(t, true)
		err := writefence.Probe(t.Context(), store, "probe")
		require.ErrorIs(t, err, writefence.ErrUntrustedStore)
		var pe *writefence.ProbeError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, probecheck.CreateRefused, pe.Check)
		assert.Positive(t, p.stripped.Load())
		assert.Empty(t, testserver.Keys(t, direct), "the probe cleans up")

		f := &writefence.Fence{Store: store, Probe: true}
		require.ErrorIs(t, f.Push(t.Context(), "wal", "0", "w", 1, []byte("x")), writefence.ErrUntrustedStore)
		assert.Empty(t, testserver.Keys(t, direct), "no record and no scratch blob")
	})
}

// TestRoundTrips: a steady push (the Fence conditions its write on the
// version it last wrote) is exactly one request, a Put Blob; a push by a
// fresh Fence adds one ranged read of the record's head, of at most 4 KiB
// whatever the record's size.
func TestRoundTrips(t *testing.T) {
	wire := testserver.NewTransport(t)
	store, _ := newStore(t, wire)
	ctx := t.Context()
	f := &writefence.Fence{Store: store}
	require.NoError(t, f.Push(ctx, "wal", "0", "w", 1, make([]byte, 1024)))
	const pushes = 50
	reqs, writes := wire.Requests(), wire.Writes()
	for e := uint64(2); e < 2+pushes; e++ {
		require.NoError(t, f.Push(ctx, "wal", "0", "w", e, make([]byte, 1024)))
	}
	assert.Equal(t, 1.0, float64(wire.Requests()-reqs)/pushes, "requests per steady push")
	assert.Equal(t, 1.0, float64(wire.Writes()-writes)/pushes, "Put Blobs per steady push")

	reqs = wire.Requests()
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 100, make([]byte, 1024)))
	assert.EqualValues(t, 2, wire.Requests()-reqs, "a cold push: one read, one write")

	// Over a 16 MiB record, a cold push reads the record's head alone.
	big := make([]byte, 16<<20)
	require.NoError(t, f.Push(ctx, "wal", "1", "w", 1, big))
	reqs, read := wire.Requests(), wire.GetBytesRead()
	require.NoError(t, (&writefence.Fence{Store: store}).Push(ctx, "wal", "1", "w", 2, big))
	assert.EqualValues(t, 2, wire.Requests()-reqs, "a cold push over a 16 MiB record: one ranged read, one write")
	assert.LessOrEqual(t, wire.GetBytesRead()-read, int64(4096), "bytes a cold push over a 16 MiB record reads")
}

// TestPermission: a wrong account key is refused by the service (403);
// every operation's error matches fs.ErrPermission, reaches the SDK's
// *azcore.ResponseError, and holds neither the key nor the signature, and
// a Fence gives up at once.
func TestPermission(t *testing.T) {
	az := azurite.AzuriteServer(t)
	name := azurite.AzuriteContainer(t, az.Service(t, nil))
	// A well-formed key of the right length that is not the account's.
	wrong := "d3Jvbmcta2V5LWQ0MWQ4Y2Q5OGYwMGIyMDRlOTgwMDk5OGVjZjg0MjdlLXdyb25nLWtleQ=="
	bad := az
	bad.Key = wrong
	wire := testserver.NewTransport(t)
	store := azblobstore.New(bad.Service(t, wire).NewContainerClient(name))
	ctx := t.Context()

	check := func(op string, err error) {
		t.Helper()
		kit.Permission(t, err, "azblob "+op)
		var re *azcore.ResponseError
		require.ErrorAs(t, err, &re, op)
		assert.Equal(t, http.StatusForbidden, re.StatusCode, op)
		msg := err.Error()
		// Neither key, nor a SAS signature, nor the response body (XML).
		for _, secret := range []string{wrong, az.Key, "sig=", "<"} {
			assert.NotContains(t, msg, secret, op)
		}
		assert.NotContains(t, msg, "\n", "one line: %s", msg)
		t.Logf("%s: %v", op, err)
	}
	kit.EachOp(ctx, store, check)

	reqs := wire.Requests()
	err := (&writefence.Fence{Store: store}).Push(ctx, "wal", "0", "w", 1, []byte("x"))
	require.ErrorIs(t, err, fs.ErrPermission)
	assert.EqualValues(t, 1, wire.Requests()-reqs, "refused credentials are final: no retry")
}

// TestMissingContainer: a container that does not exist is neither a
// missing key nor a conflict: it is a misconfiguration, and nothing may
// take it for "no record yet".
func TestMissingContainer(t *testing.T) {
	svc := azurite.AzuriteServer(t).Service(t, nil)
	store := azblobstore.New(svc.NewContainerClient(testserver.UniqueName(t)))
	ctx := t.Context()
	_, _, err := store.Get(ctx, "k")
	require.Error(t, err)
	assert.NotErrorIs(t, err, writefence.ErrNotFound)
	_, err = store.PutIfVersion(ctx, "k", []byte("x"), "")
	require.Error(t, err)
	assert.NotErrorIs(t, err, writefence.ErrConflict)
	assert.Contains(t, err.Error(), "ContainerNotFound")
}

// TestConflictAnswers: Azurite's two answers to a refused precondition,
// 409 BlobAlreadyExists to a create-only put and 412 ConditionNotMet to a
// stale If-Match, are both conflicts, with the SDK's error reachable.
func TestConflictAnswers(t *testing.T) {
	store, _ := newStore(t, nil)
	ctx := t.Context()
	v1, err := store.PutIfVersion(ctx, "k", []byte("one"), "")
	require.NoError(t, err)
	_, err = store.PutIfVersion(ctx, "k", []byte("two"), v1)
	require.NoError(t, err)
	for _, c := range []struct {
		expect string
		status int
		code   string
	}{{"", http.StatusConflict, "BlobAlreadyExists"}, {v1, http.StatusPreconditionFailed, "ConditionNotMet"}} {
		_, err := store.PutIfVersion(ctx, "k", []byte("three"), c.expect)
		require.ErrorIs(t, err, writefence.ErrConflict)
		var re *azcore.ResponseError
		require.ErrorAs(t, err, &re)
		assert.Equal(t, c.status, re.StatusCode)
		assert.Equal(t, c.code, re.ErrorCode)
		assert.True(t, strings.HasPrefix(err.Error(), "writefence: azblob put k: version conflict: http "), err.Error())
	}
	data, _, err := store.Get(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "two", string(data))
	_, err = store.PutIfVersion(ctx, "missing", []byte("x"), v1)
	require.ErrorIs(t, err, writefence.ErrConflict, "If-Match on a missing blob")
	_, _, err = store.Get(ctx, "missing")
	require.ErrorIs(t, err, writefence.ErrNotFound, "and creates nothing")
	require.False(t, errors.Is(err, writefence.ErrConflict))
}

// BenchmarkPush is pushbench.Run, the raw conditional write beside a
// steady Fence.Push; roundtrips/op counts the HTTP requests sent. Read the
// implementations side by side with benchstat.
func BenchmarkPush(b *testing.B) {
	wire := testserver.NewTransport(b)
	svc := azurite.AzuriteServer(b).Service(b, wire)
	store := azblobstore.New(svc.NewContainerClient(azurite.AzuriteContainer(b, svc)))
	pushbench.Run(b, store, wire.Requests)
}
