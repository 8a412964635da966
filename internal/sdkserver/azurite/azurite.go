// Package azurite reaches the Azurite emulator the Azure Blob tests run
// against through the Azure SDK, beside package testserver, so that only
// the modules that test on Azure Blob link the SDK.
package azurite

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/service"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// Azurite is an Azure Blob Storage endpoint (the Azurite emulator, as
// .ci/run starts it) and the shared key of its account.
type Azurite struct {
	Endpoint string // the account's URL, e.g. http://127.0.0.1:10000/devstoreaccount1
	Account  string
	Key      string // base64, as Azure hands it out
}

// AzuriteServer returns the Azurite endpoint named by the environment:
// WRITEFENCE_AZURITE_ENDPOINT, WRITEFENCE_AZURITE_ACCOUNT and
// WRITEFENCE_AZURITE_KEY.
func AzuriteServer(t testing.TB) Azurite {
	t.Helper()
	return Azurite{
		Endpoint: testserver.Env(t, "WRITEFENCE_AZURITE_ENDPOINT"),
		Account:  testserver.Env(t, "WRITEFENCE_AZURITE_ACCOUNT"),
		Key:      testserver.Env(t, "WRITEFENCE_AZURITE_KEY"),
	}
}

// Service returns a client of the account with its shared key, sending
// through rt (nil: a transport whose idle connections close when the test
// ends).
func (a Azurite) Service(t testing.TB, rt http.RoundTripper) *service.Client {
	t.Helper()
	cred, err := service.NewSharedKeyCredential(a.Account, a.Key)
	require.NoError(t, err)
	if rt == nil {
		rt = testserver.HTTPTransport(t)
	}
	c, err := service.NewClientWithSharedKeyCredential(a.Endpoint, cred, &service.ClientOptions{
		ClientOptions: azcore.ClientOptions{Transport: &http.Client{Transport: rt}},
	})
	require.NoError(t, err)
	return c
}

// AzuriteContainer creates a container of the test's own through c and
// deletes it, with its blobs, when the test ends; it returns its name.
func AzuriteContainer(t testing.TB, c *service.Client) string {
	t.Helper()
	name := testserver.UniqueName(t)
	_, err := c.CreateContainer(context.Background(), name, nil)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := testserver.CleanupContext(t)
		defer cancel()
		if _, err := c.DeleteContainer(ctx, name, nil); err != nil {
			t.Errorf("cleanup: delete container %s: %v", name, err)
		}
	})
	return name
}

// DamageAzblob damages blobs of the container c reaches by writing the
// damaged bytes over them unconditionally, as a program that writes the
// blob directly would; the blob gets a new ETag.
func DamageAzblob(c *container.Client) testserver.Damager {
	return func(ctx context.Context, key string, f testserver.Fault) error {
		r, err := c.NewBlobClient(key).DownloadStream(ctx, nil)
		if err != nil {
			return err
		}
		data, err := io.ReadAll(r.Body)
		r.Body.Close()
		if err != nil {
			return err
		}
		_, err = c.NewBlockBlobClient(key).Upload(ctx, nopCloser{bytes.NewReader(f.Apply(data))}, &blockblob.UploadOptions{})
		return err
	}
}

type nopCloser struct{ io.ReadSeeker }

func (nopCloser) Close() error { return nil }
