//go:build !writefence_nodynamodb && !writefence_nosdk

package main

import (
	"fmt"
	"hash/crc32"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/writefence/writefence/internal/testserver"
)

// TestDoctorDynamoDBServer: on dynalite, a table without time to live
// that is no global table is clean, reads under overwrite included, and
// exits 0; a table that does not exist is unreadable (exit 1) and said
// so. dynalite answers DescribeTimeToLive (always disabled) but has no
// UpdateTimeToLive and no global tables: TestDoctorDynamoDBSettings
// checks those.
func TestDoctorDynamoDBServer(t *testing.T) {
	fs := assertDoctorClean(t, dynamoAddress(t), "dynamodb.ttl", "dynamodb.replicas", "reads.overwrite")
	assert.Equal(t, []finding{{Check: "dynamodb.ttl", Level: levelOK, Found: "time to live is off"}}, findingsOf(fs, "dynamodb.ttl"))
	assert.Equal(t, []finding{{Check: "dynamodb.replicas", Level: levelOK, Found: "not a global table: one region decides every conditional write"}}, findingsOf(fs, "dynamodb.replicas"))

	missing := "dynamodb://no-such-table-" + testserver.UniqueName(t) + "?" + url.Values{"endpoint": {testserver.DynamoDBEndpoint(t)}}.Encode()
	r := wf(t, "doctor", "-writes=false", "-json", "-store", missing)
	assert.Equal(t, exitError, r.code, "%s", r)
	fs, _ = doctorLines(t, r)
	for _, f := range fs {
		assert.Equal(t, levelUnknown, f.Level, "%+v", f)
		assert.Contains(t, f.Fix, "the table does not exist")
	}
}

// fakeDynamoDB answers DescribeTimeToLive and DescribeTable of DynamoDB's
// JSON API with ttl and table.
func fakeDynamoDB(t *testing.T, ttl, table string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body string
		switch target := r.Header.Get("X-Amz-Target"); target {
		case "DynamoDB_20120810.DescribeTimeToLive":
			body = ttl
		case "DynamoDB_20120810.DescribeTable":
			body = table
		default:
			t.Errorf("unexpected request %s", target)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		// DynamoDB sends a CRC-32 of each body, which the SDK checks.
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE([]byte(body))), 10))
		fmt.Fprint(w, body)
	}))
	t.Cleanup(srv.Close)
	awsCredentials(t, testserver.DynamoDBAccessKey, testserver.DynamoDBSecretKey)
	return "dynamodb://mirrors?" + url.Values{"endpoint": {srv.URL}}.Encode()
}

// TestDoctorDynamoDBSettings: through a fake of DynamoDB's API at the
// calls doctor makes, a time to live on the table is a risk, and so is a
// global table with eventual consistency between regions (exit 11); a
// global table with multi-Region strong consistency is not.
func TestDoctorDynamoDBSettings(t *testing.T) {
	addr := fakeDynamoDB(t, `{"TimeToLiveDescription": {"AttributeName": "expires", "TimeToLiveStatus": "ENABLED"}}`,
		`{"Table": {"TableName": "mirrors", "Replicas": [{"RegionName": "eu-west-1"}, {"RegionName": "us-east-1"}]}}`)
	ttl := assertFinding(t, addr, "dynamodb.ttl", exitAtRisk, levelRisk, "time to live is enabled, on the attribute expires")
	assert.Contains(t, ttl.Fix, "aws dynamodb update-time-to-live --table-name mirrors --time-to-live-specification Enabled=false,AttributeName=expires")
	assertFinding(t, addr, "dynamodb.replicas", exitAtRisk, levelRisk, "a global table replicated to eu-west-1, us-east-1, with eventual consistency between regions")

	addr = fakeDynamoDB(t, `{"TimeToLiveDescription": {"AttributeName": "expires", "TimeToLiveStatus": "DISABLED"}}`,
		`{"Table": {"TableName": "mirrors", "MultiRegionConsistency": "STRONG", "Replicas": [{"RegionName": "eu-west-1"}, {"RegionName": "eu-west-2"}]}}`)
	r := wf(t, "doctor", "-writes=false", "-json", "-store", addr)
	assert.Equal(t, exitOK, r.code, "%s", r)
	fs, _ := doctorLines(t, r)
	assert.Equal(t, []finding{
		{Check: "dynamodb.ttl", Level: levelOK, Found: "time to live is off"},
		{Check: "dynamodb.replicas", Level: levelOK, Found: "a global table in eu-west-1, eu-west-2 with multi-Region strong consistency"},
	}, fs)
}
