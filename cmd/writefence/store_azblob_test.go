//go:build !writefence_noazblob && !writefence_nosdk

package main

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/sdkserver/azurite"
)

// TestAzblobAddress: azblob://container with endpoint= opens an Azure Blob
// store; a malformed address is a usage error before any I/O that never
// echoes a secret; missing credentials name the variables read.
func TestAzblobAddress(t *testing.T) {
	azureSharedKey(t, "devstoreaccount1", "a2V5")
	assertOpens(t, "*azblobstore.Store", "azblob://mirrors", "azblob://mir-rors-01?endpoint=http://127.0.0.1:1/devstoreaccount1")
	assertRefusedSaying(t, map[string]string{
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
	})
	r := wf(t, "latest", "-store", "azblob://mirrors?endpoint=http://h/?sig=abc", "wal", "s")
	assert.NotContains(t, r.stderr+r.stdout, "sig=abc", "a SAS in the endpoint is not echoed")

	// The credentials, each case's variables set in turn over the last's.
	for _, c := range []struct {
		env  map[string]string
		addr string
		code int
		says string
	}{
		{map[string]string{"AZURE_STORAGE_CONNECTION_STRING": "AccountName=a;AccountKey=hunter2secret"}, "azblob://mirrors?endpoint=http://h", exitUsage, "give one of them"},
		{map[string]string{"AZURE_STORAGE_CONNECTION_STRING": "not a connection string hunter2secret"}, "azblob://mirrors", exitError, ""},
		{map[string]string{"AZURE_STORAGE_CONNECTION_STRING": "", "AZURE_STORAGE_KEY": ""}, "azblob://mirrors", exitError, "AZURE_STORAGE_ACCOUNT (set), AZURE_STORAGE_KEY (unset)"},
		{map[string]string{"AZURE_STORAGE_KEY": "not base64 hunter2secret!"}, "azblob://mirrors", exitError, ""},
	} {
		for k, v := range c.env {
			t.Setenv(k, v)
		}
		r := wf(t, "latest", "-store", c.addr, "wal", "s")
		assert.Equal(t, c.code, r.code, "%v: %s", c.env, r)
		assert.Contains(t, r.stderr, c.says, "%v", c.env)
		assert.NotContains(t, r.stderr, "hunter2secret", "%v", c.env)
	}
}

// azblobAddress creates a container of the test's own on Azurite, deleted
// afterwards, and returns its address; the shared key is in the
// environment the command reads.
func azblobAddress(t *testing.T) (addr string, az azurite.Azurite) {
	t.Helper()
	az = azurite.AzuriteServer(t)
	azureSharedKey(t, az.Account, az.Key)
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
