//go:build !writefence_nodynamodb && !writefence_nosdk

package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/sdkserver/dynalite"
	"github.com/writefence/writefence/internal/testserver"
)

// TestDynamoDBLocalAsksNoMetadataService: with an endpoint that is not
// AWS's own and no credentials, the command asks no cloud metadata service
// (the AWS SDK's last resort) and says which credentials to set.
func TestDynamoDBLocalAsksNoMetadataService(t *testing.T) {
	endpoint := testserver.DynamoDBEndpoint(t)
	var asked atomic.Int64
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked.Add(1)
		w.WriteHeader(http.StatusForbidden)
	}))
	defer imds.Close()
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.URL)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "")
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_WEB_IDENTITY_TOKEN_FILE"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", "/nonexistent")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
	addr := "dynamodb://mirrors?" + url.Values{"endpoint": {endpoint}}.Encode()
	for _, args := range [][]string{{"latest", "wal", "s"}, {"push", "-writer", "a", "-epoch", "1", "-file", writeFile(t, "x"), "wal", "s"}} {
		r := wf(t, append(args, "-store", addr)...)
		assert.Equal(t, exitError, r.code, "%v: %s", args, r)
		assert.Contains(t, r.stderr, "writefence: dynamodb: no AWS credentials for "+endpoint+": set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (a local server takes any pair), or AWS_PROFILE", "%v", args)
		assert.Contains(t, r.stderr, "AWS_ACCESS_KEY_ID (unset)", "%v", args)
		assert.NotContains(t, r.stderr, "IMDS", "%v", args)
	}
	assert.Zero(t, asked.Load(), "the metadata service was asked")
}

// TestDynamoDBMissingTable: a table that does not exist is named, with the
// init command that creates it, not as a raw ResourceNotFoundException
// after ten attempts; init creates it, and then a push lands.
func TestDynamoDBMissingTable(t *testing.T) {
	addr := dynamoAddress(t)
	u, err := url.Parse(addr)
	require.NoError(t, err)
	table := u.Host
	c := dynalite.DynamoDBClient(t, u.Query().Get("endpoint"), nil)
	_, err = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	require.NoError(t, err)
	p := writeFile(t, "segment")
	for _, r := range assertMissing(t, addr, "table "+table, nil,
		[]string{"latest", "wal", "s"}, []string{"push", "-writer", "a", "-epoch", "1", "-file", p, "wal", "s"}, []string{"ls"}) {
		assert.NotContains(t, r.stderr, "ResourceNotFoundException", "%s", r)
	}
	assertInitCreates(t, addr, "table "+table, p)
}
