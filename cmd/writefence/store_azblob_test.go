//go:build !writefence_noazblob && !writefence_nosdk

package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/azblobstore"
	"github.com/writefence/writefence/internal/sdkserver/azurite"
)

// TestAzblobAddress: azblob://container with endpoint= opens an Azure Blob
// store; a malformed address is a usage error before any I/O that never
// echoes a secret; missing credentials name the variables read.
func TestAzblobAddress(t *testing.T) {
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_ACCOUNT", "devstoreaccount1")
	t.Setenv("AZURE_STORAGE_KEY", "a2V5")
	for _, addr := range []string{"azblob://mirrors", "azblob://mir-rors-01?endpoint=http://127.0.0.1:1/devstoreaccount1"} {
		s, err := openStore(context.Background(), addr)
		require.NoError(t, err, addr)
		assert.IsType(t, &azblobstore.Store{}, s.store, addr)
		require.NoError(t, s.close())
	}
	for addr, says := range map[string]string{
		"azblob://":             "azblob://container",
		"azblob://ab":           "container ab",
		"azblob://Mirrors":      "container Mirrors",
		"azblob://a--b":         "container a--b",
		"azblob://-ab":          "container -ab",
		"azblob://mirrors/path": "no path",
		"azblob://mirrors?endpoint=127.0.0.1:10000":   "endpoint: want the account's URL",
		"azblob://mirrors?endpoint=http://h/?sig=abc": "without a query",
		"azblob://mirrors?endpiont=http://h":          `"endpiont"`,
		"azblob://account:hunter2secret@mirrors":      "credentials are not accepted",
	} {
		r := wf(t, "latest", "-store", addr, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s: %s", addr, r)
		assert.Contains(t, r.stderr, says, addr)
		assert.NotContains(t, r.stderr+r.stdout, "hunter2secret", addr)
		assert.NotContains(t, r.stderr+r.stdout, "sig=abc", addr)
	}

	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "AccountName=a;AccountKey=hunter2secret")
	r := wf(t, "latest", "-store", "azblob://mirrors?endpoint=http://h", "wal", "s")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "give one of them")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "not a connection string hunter2secret")
	r = wf(t, "latest", "-store", "azblob://mirrors", "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.NotContains(t, r.stderr, "hunter2secret")

	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_KEY", "")
	r = wf(t, "latest", "-store", "azblob://mirrors", "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.Contains(t, r.stderr, "AZURE_STORAGE_ACCOUNT (set), AZURE_STORAGE_KEY (unset)")
	t.Setenv("AZURE_STORAGE_KEY", "not base64 hunter2secret!")
	r = wf(t, "latest", "-store", "azblob://mirrors", "wal", "s")
	assert.Equal(t, exitError, r.code, "%s", r)
	assert.NotContains(t, r.stderr, "hunter2secret")
}

// azblobAddress creates a container of the test's own on Azurite, deleted
// afterwards, and returns its address; the shared key is in the
// environment the command reads.
func azblobAddress(t *testing.T) (addr string, az azurite.Azurite) {
	t.Helper()
	az = azurite.AzuriteServer(t)
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_ACCOUNT", az.Account)
	t.Setenv("AZURE_STORAGE_KEY", az.Key)
	name := azurite.AzuriteContainer(t, az.Service(t, nil))
	return "azblob://" + name + "?endpoint=" + az.Endpoint, az
}

// TestServerAzblob runs every subcommand, probe and race included,
// against a container on Azurite.
func TestServerAzblob(t *testing.T) {
	addr, _ := azblobAddress(t)
	serverScenario(t, addr, "")
}

// TestServerAzblobConnectionString: the credentials and the endpoint can
// come from a connection string instead.
func TestServerAzblobConnectionString(t *testing.T) {
	addr, az := azblobAddress(t)
	container, _, _ := strings.Cut(strings.TrimPrefix(addr, "azblob://"), "?")
	t.Setenv("AZURE_STORAGE_ACCOUNT", "")
	t.Setenv("AZURE_STORAGE_KEY", "")
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "DefaultEndpointsProtocol=http;AccountName="+az.Account+";AccountKey="+az.Key+";BlobEndpoint="+az.Endpoint+";")
	store := "azblob://" + container
	require.Equal(t, exitOK, wf(t, "push", "-store", store, "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s").code)
	r := wf(t, "latest", "-store", store, "-json", "wal", "s")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.EqualValues(t, 1, jsonOf(t, r)["epoch"])
}

// TestServerAzblobCredentialsNeverPrinted: a wrong account key is refused
// with the plain error status; the key appears in no output, and the
// variables read are named.
func TestServerAzblobCredentialsNeverPrinted(t *testing.T) {
	addr, az := azblobAddress(t)
	const wrong = "d3Jvbmcta2V5LWQ0MWQ4Y2Q5OGYwMGIyMDRlOTgwMDk5OGVjZjg0MjdlLXdyb25nLWtleQ=="
	t.Setenv("AZURE_STORAGE_KEY", wrong)
	for _, args := range [][]string{{"latest", "wal", "s"}, {"push", "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s"}} {
		r := wf(t, append([]string{args[0], "-store", addr}, args[1:]...)...)
		assert.Equal(t, exitError, r.code, "%s", r)
		for _, secret := range []string{wrong, az.Key} {
			assert.NotContains(t, r.stdout+r.stderr, secret)
		}
		assert.Contains(t, r.stderr, "AZURE_STORAGE_KEY (set)", "%s", r)
	}
}
