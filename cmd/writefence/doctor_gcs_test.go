//go:build !writefence_nogcs && !writefence_nosdk

package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"cloud.google.com/go/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDoctorGCSEmulator: on fake-gcs-server, a bucket with versioning
// on, no lifecycle rule, no retention and no holds is clean (exit 0),
// reads under overwrite included; with versioning off, that is a
// warning. The emulator keeps no lifecycle rules, retention policy or
// holds (it accepts and drops them): TestDoctorGCSSettings checks those.
func TestDoctorGCSEmulator(t *testing.T) {
	bucket, endpoint, c := gcsBucket(t)
	addr := "gs://" + bucket + "?endpoint=" + endpoint

	assertFinding(t, addr, "gcs.versioning", exitOK, levelWarn, "neither object versioning nor soft delete is on")

	_, err := c.Bucket(bucket).Update(t.Context(), storage.BucketAttrsToUpdate{VersioningEnabled: true})
	require.NoError(t, err)
	assertDoctorClean(t, addr, "gcs.lifecycle", "gcs.retention", "gcs.versioning", "gcs.holds", "reads.overwrite")
}

// TestDoctorGCSSettings: the settings the emulator does not keep, served
// by a fake of Cloud Storage's JSON API: a lifecycle rule that deletes
// live objects under the prefix is a risk (exit 11), one on noncurrent
// generations, on another prefix or changing the storage class is not; a
// retention policy, a default event-based hold and held objects are
// warnings; soft delete counts as recoverable.
func TestDoctorGCSSettings(t *testing.T) {
	const bucket = "mirrors"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/storage/v1/b/" + bucket:
			fmt.Fprint(w, `{"name": "mirrors", "lifecycle": {"rule": [
				{"action": {"type": "Delete"}, "condition": {"age": 30, "matchesPrefix": ["writefence/"]}},
				{"action": {"type": "Delete"}, "condition": {"isLive": false, "numNewerVersions": 3}},
				{"action": {"type": "Delete"}, "condition": {"age": 1, "matchesPrefix": ["logs/"]}},
				{"action": {"type": "SetStorageClass", "storageClass": "COLDLINE"}, "condition": {"age": 5}},
				{"action": {"type": "Delete"}, "condition": {"createdBefore": "2024-01-02"}}]},
				"retentionPolicy": {"retentionPeriod": "86400", "effectiveTime": "2024-01-01T00:00:00Z", "isLocked": true},
				"defaultEventBasedHold": true,
				"softDeletePolicy": {"retentionDurationSeconds": "604800"}}`)
		case "/storage/v1/b/" + bucket + "/o":
			if got := r.URL.Query().Get("prefix"); got != "writefence/" {
				t.Errorf("listed prefix %q, want the store's prefix", got)
			}
			fmt.Fprint(w, `{"kind": "storage#objects", "items": [
				{"name": "writefence/s/wal/0", "bucket": "mirrors", "generation": "1", "eventBasedHold": true},
				{"name": "writefence/s/wal/1", "bucket": "mirrors", "generation": "2"}]}`)
		default:
			t.Errorf("unexpected request %s %s", r.Method, r.URL)
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()

	r := wf(t, "doctor", "-writes=false", "-json", "-store", "gs://"+bucket+"?endpoint="+srv.URL)
	assert.Equal(t, exitAtRisk, r.code, "%s", r)
	fs, res := doctorLines(t, r)
	assert.EqualValues(t, 2, res["risks"], "%s", r)
	assert.Equal(t, []finding{{Check: "gcs.lifecycle", Level: levelRisk,
		Found:       `lifecycle rule 1 deletes objects under "writefence/" 30 days after they are written`,
		Consequence: "Cloud Storage deletes records and blobs: a shard whose record is gone looks new, and a deposed writer's push lands as if it were the first",
		Fix:         `remove the rule, or give it a matchesPrefix that no key under "writefence/" starts with (gcloud storage buckets update gs://mirrors ...), or keep the records in a bucket without it`,
	}, {Check: "gcs.lifecycle", Level: levelRisk,
		Found:       "lifecycle rule 5 deletes every object in the bucket created before 2024-01-02",
		Consequence: "Cloud Storage deletes records and blobs: a shard whose record is gone looks new, and a deposed writer's push lands as if it were the first",
		Fix:         `remove the rule, or give it a matchesPrefix that no key under "writefence/" starts with (gcloud storage buckets update gs://mirrors ...), or keep the records in a bucket without it`,
	}}, findingsOf(fs, "gcs.lifecycle"))

	ret := findingsOf(fs, "gcs.retention")
	require.Len(t, ret, 2, "%s", r)
	assert.Equal(t, levelWarn, ret[0].Level)
	assert.Equal(t, "a retention policy of 24h0m0s, locked", ret[0].Found)
	assert.Contains(t, ret[0].Fix, "a locked retention policy cannot be removed")
	assert.Equal(t, levelWarn, ret[1].Level)
	assert.Contains(t, ret[1].Found, "default event-based hold")

	assert.Equal(t, []finding{{Check: "gcs.versioning", Level: levelOK, Found: "soft delete keeps a deleted record for 168h0m0s"}}, findingsOf(fs, "gcs.versioning"))
	h := findingsOf(fs, "gcs.holds")
	require.Len(t, h, 1, "%s", r)
	assert.Equal(t, levelWarn, h[0].Level)
	assert.Equal(t, "1 of the 2 objects under the prefix have a hold or a retention, e.g. writefence/s/wal/0", h[0].Found)
}
