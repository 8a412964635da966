//go:build !writefence_noazblob && !writefence_nosdk

package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/sdkserver/azurite"
)

// TestAzblobMissingContainer: a container that does not exist is named,
// with the init command that creates it, after one request: no retries;
// init creates it, and then a push lands.
func TestAzblobMissingContainer(t *testing.T) {
	az := azurite.AzuriteServer(t)
	azureSharedKey(t, az.Account, az.Key)
	svc := az.Service(t, nil)
	name := azurite.AzuriteContainer(t, svc)
	_, err := svc.DeleteContainer(context.Background(), name, nil)
	require.NoError(t, err)
	u, account, _ := cutAccount(az.Endpoint)
	proxy, requests := countingProxy(t, u)
	addr := "azblob://" + name + "?endpoint=http://" + proxy + "/" + account
	p := writeFile(t, "segment")
	assertMissing(t, addr, "container "+name, requests,
		[]string{"latest", "wal", "s"},
		[]string{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"},
	)
	assertInitCreates(t, addr, "container "+name, p)
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
