//go:build !writefence_noazblob && !writefence_nosdk

package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/sdkserver/azurite"
)

// TestAzblobMissingContainer: a container that does not exist is named,
// with the init command that creates it, after one request: no retries;
// init creates it, and then a push lands.
func TestAzblobMissingContainer(t *testing.T) {
	az := azurite.AzuriteServer(t)
	t.Setenv("AZURE_STORAGE_CONNECTION_STRING", "")
	t.Setenv("AZURE_STORAGE_ACCOUNT", az.Account)
	t.Setenv("AZURE_STORAGE_KEY", az.Key)
	svc := az.Service(t, nil)
	name := azurite.AzuriteContainer(t, svc)
	_, err := svc.DeleteContainer(context.Background(), name, nil)
	require.NoError(t, err)
	u, account, _ := cutAccount(az.Endpoint)
	proxy, requests := countingProxy(t, u)
	addr := "azblob://" + name + "?endpoint=http://" + proxy + "/" + account
	p := writeFile(t, "segment")
	for _, args := range [][]string{
		{"latest", "wal", "s"},
		{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
	} {
		before := requests()
		r := wf(t, append(args, "-store", addr)...)
		assert.Equal(t, exitError, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "writefence: container "+name+" does not exist ("+addr+")", "%v", args)
		assert.Contains(t, r.stderr, "to create it, run: writefence init -store '"+addr+"'", "%v", args)
		assert.EqualValues(t, 1, requests()-before, "%v: one request, nothing retried", args)
	}
	r := wf(t, "init", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, "created: "+addr+" (container "+name+")\n", r.stdout)
	r = wf(t, "push", "-store", addr, "-writer", "a", "-epoch", "1", "-file", p, "wal", "s")
	assert.Equal(t, exitOK, r.code, "%s", r)
}

// cutAccount splits Azurite's account URL, http://host:port/account, into
// the server's URL and the account.
func cutAccount(endpoint string) (server, account string, ok bool) {
	i := len(endpoint) - 1
	for i >= 0 && endpoint[i] != '/' {
		i--
	}
	return endpoint[:max(i, 0)], endpoint[i+1:], i > 0
}
