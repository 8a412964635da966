//go:build !writefence_nominio && !writefence_nosdk

package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/lifecycle"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/writefence/writefence/internal/testserver"
)

// doctorS3 creates a bucket of the test's own on the S3 server (s3Bucket)
// and returns its address, a client of the server and the bucket. The
// command finds the credentials in the environment.
func doctorS3(t *testing.T) (addr string, c *minio.Client, bucket string) {
	t.Helper()
	s3 := testserver.S3Server(t)
	t.Setenv("AWS_ACCESS_KEY_ID", s3.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", s3.SecretKey)
	c = s3.Client(t, nil)
	bucket = s3Bucket(t, c)
	return "s3://" + bucket + "?endpoint=" + s3.Endpoint + "&secure=false", c, bucket
}

// TestDoctorS3Lifecycle: on MinIO, a lifecycle rule that expires current
// objects under the prefix is a risk (exit 11); one on other keys, on
// noncurrent versions only, filtered by a tag or disabled is not.
func TestDoctorS3Lifecycle(t *testing.T) {
	addr, c, bucket := doctorS3(t)
	ctx := t.Context()
	expire := func(id, prefix string) lifecycle.Rule {
		return lifecycle.Rule{ID: id, Status: "Enabled", RuleFilter: lifecycle.Filter{Prefix: prefix}, Expiration: lifecycle.Expiration{Days: 30}}
	}
	for _, tt := range []struct {
		name string
		rule lifecycle.Rule
		risk bool
	}{
		{"the prefix", expire("records", "writefence/"), true},
		{"the whole bucket", expire("all", ""), true},
		{"the blobs only", expire("blobs", "writefence/b/"), true},
		{"a shorter prefix", expire("short", "write"), true},
		{"another prefix", expire("logs", "logs/"), false},
		{"disabled", func() lifecycle.Rule { r := expire("off", "writefence/"); r.Status = "Disabled"; return r }(), false},
		{"a tag", lifecycle.Rule{ID: "tagged", Status: "Enabled", RuleFilter: lifecycle.Filter{Tag: lifecycle.Tag{Key: "tmp", Value: "1"}},
			Expiration: lifecycle.Expiration{Days: 1}}, false},
		{"noncurrent versions", lifecycle.Rule{ID: "old", Status: "Enabled", RuleFilter: lifecycle.Filter{Prefix: "writefence/"},
			NoncurrentVersionExpiration: lifecycle.NoncurrentVersionExpiration{NoncurrentDays: 7}}, false},
	} {
		cfg := lifecycle.NewConfiguration()
		cfg.Rules = []lifecycle.Rule{tt.rule}
		require.NoError(t, c.SetBucketLifecycle(ctx, bucket, cfg), tt.name)
		r := wf(t, "doctor", "-writes=false", "-json", "-store", addr)
		fs, _ := doctorLines(t, r)
		lc := findingsOf(fs, "s3.lifecycle")
		require.Len(t, lc, 1, "%s: %s", tt.name, r)
		if tt.risk {
			assert.Equal(t, exitAtRisk, r.code, "%s: %s", tt.name, r)
			assert.Equal(t, levelRisk, lc[0].Level, tt.name)
			assert.Contains(t, lc[0].Found, `rule "`+tt.rule.ID+`" expires`, tt.name)
			assert.Contains(t, lc[0].Found, "30 days after they are written", tt.name)
			assert.Contains(t, lc[0].Fix, `delete rule "`+tt.rule.ID+`"`, tt.name)
		} else {
			assert.Equal(t, exitOK, r.code, "%s: %s", tt.name, r)
			assert.Equal(t, levelOK, lc[0].Level, "%s: %+v", tt.name, lc[0])
		}
	}
	// Without a configuration at all.
	require.NoError(t, c.SetBucketLifecycle(ctx, bucket, lifecycle.NewConfiguration()))
	r := wf(t, "doctor", "-writes=false", "-json", "-store", addr)
	fs, _ := doctorLines(t, r)
	assert.Equal(t, []finding{{Check: "s3.lifecycle", Level: levelOK, Found: "the bucket has no lifecycle rules"}}, findingsOf(fs, "s3.lifecycle"))
}

// TestDoctorS3Versioning: versioning off or excluding the prefix is a
// warning; on, it is safe.
func TestDoctorS3Versioning(t *testing.T) {
	addr, c, bucket := doctorS3(t)
	ctx := t.Context()
	check := func(want level, found string) {
		t.Helper()
		r := wf(t, "doctor", "-writes=false", "-json", "-store", addr)
		fs, _ := doctorLines(t, r)
		v := findingsOf(fs, "s3.versioning")
		require.Len(t, v, 1, "%s", r)
		assert.Equal(t, want, v[0].Level, "%s", r)
		assert.Contains(t, v[0].Found, found)
	}
	check(levelWarn, "versioning is off")
	require.NoError(t, c.SetBucketVersioning(ctx, bucket, minio.BucketVersioningConfiguration{Status: "Enabled",
		ExcludedPrefixes: []minio.ExcludedPrefix{{Prefix: "writefence/"}}}))
	check(levelWarn, `versioning is on but excludes keys under "writefence/"`)
	require.NoError(t, c.EnableVersioning(ctx, bucket))
	check(levelOK, "versioning is on")
	require.NoError(t, c.SuspendVersioning(ctx, bucket))
	check(levelWarn, "versioning is suspended")
}

// TestDoctorS3Clean: a well-configured MinIO bucket (versioning on, no
// lifecycle rule) has no risk and nothing unreadable, and exits 0; what
// MinIO cannot do (refuse unconditional writes to its owner) stays a
// warning. Every scratch key is deleted afterwards.
func TestDoctorS3Clean(t *testing.T) {
	addr, c, bucket := doctorS3(t)
	require.NoError(t, c.EnableVersioning(t.Context(), bucket))
	r := wf(t, "doctor", "-json", "-overwrite", "2s", "-store", addr)
	require.Equal(t, exitOK, r.code, "%s", r)
	fs, res := doctorLines(t, r)
	assert.Equal(t, "ok", res["outcome"])
	levels := map[string]level{}
	for _, f := range fs {
		levels[f.Check] = f.Level
	}
	assert.Equal(t, map[string]level{
		"s3.lifecycle":           levelOK,
		"s3.versioning":          levelOK,
		"s3.policy":              levelWarn,
		"s3.unconditional-write": levelWarn,
		"reads.overwrite":        levelOK,
	}, levels, "%s", r)
	for o := range c.ListObjects(t.Context(), bucket, minio.ListObjectsOptions{Recursive: true}) {
		require.NoError(t, o.Err)
		t.Errorf("doctor left %s behind", o.Key)
	}
}

// TestDoctorS3Unreadable: a client that may read no setting (anonymous,
// on a bucket without a policy) gets each as unknown, with the permission
// that reads it, and exits 1; its unconditional write is refused, which
// doctor reports as the server refusing it.
func TestDoctorS3Unreadable(t *testing.T) {
	addr, _, _ := doctorS3(t)
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "MINIO_ROOT_USER", "MINIO_ROOT_PASSWORD", "MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", t.TempDir()+"/none")
	r := wf(t, "doctor", "-json", "-overwrite", "0", "-store", addr)
	assert.Equal(t, exitError, r.code, "%s", r)
	fs, _ := doctorLines(t, r)
	for check, permission := range map[string]string{"s3.lifecycle": "s3:GetLifecycleConfiguration", "s3.versioning": "s3:GetBucketVersioning", "s3.policy": "s3:GetBucketPolicy"} {
		f := findingsOf(fs, check)
		require.Len(t, f, 1, "%s: %s", check, r)
		assert.Equal(t, levelUnknown, f[0].Level, check)
		assert.Contains(t, f[0].Fix, permission, check)
	}
	u := findingsOf(fs, "s3.unconditional-write")
	require.Len(t, u, 1, "%s", r)
	assert.Equal(t, levelOK, u[0].Level, "%s", r)
	assert.Contains(t, u[0].Found, "refused")
}

// TestDoctorS3Policy: doctor reads the bucket policy: a Deny of
// unconditional deletes of records that MinIO accepts is seen as such,
// and the missing Deny of unconditional writes is named.
func TestDoctorS3Policy(t *testing.T) {
	addr, c, bucket := doctorS3(t)
	deletes := `{"Version": "2012-10-17", "Statement": [{"Effect": "Deny", "Principal": {"AWS": ["*"]}, "Action": ["s3:DeleteObject"],
		"Resource": ["arn:aws:s3:::` + bucket + `/writefence/s/*"]}]}`
	require.NoError(t, c.SetBucketPolicy(t.Context(), bucket, deletes))
	r := wf(t, "doctor", "-writes=false", "-json", "-store", addr)
	fs, _ := doctorLines(t, r)
	p := findingsOf(fs, "s3.policy")
	require.Len(t, p, 1, "%s", r)
	assert.Equal(t, levelWarn, p[0].Level)
	assert.Equal(t, "the bucket policy does not deny writes without If-Match or If-None-Match of records to every principal", p[0].Found)
	assert.Contains(t, p[0].Fix, "writefence policy s3 -bucket "+bucket+" -prefix writefence/")
}

// TestPolicyS3OnMinIO: what MinIO makes of the policy. It refuses the
// document as a whole, because it knows neither s3:if-match,
// s3:if-none-match nor s3:ObjectCreationOperation, so it enforces none of
// it. A Deny it can read (no condition) it enforces on other principals,
// never on its root user: an anonymous rm of a record is refused, a blob
// stays deletable, and the root user deletes the record anyway.
func TestPolicyS3OnMinIO(t *testing.T) {
	_, c, bucket := doctorS3(t)
	ctx := t.Context()
	r := wf(t, "policy", "s3", "-bucket", bucket)
	require.Equal(t, exitOK, r.code, "%s", r)
	err := c.SetBucketPolicy(ctx, bucket, r.stdout)
	require.Error(t, err, "MinIO accepted the policy: check what it enforces and update the docs")
	resp := minio.ToErrorResponse(err)
	assert.Equal(t, "MalformedPolicy", resp.Code, "%v", err)
	assert.Contains(t, resp.Message, "invalid condition key")
	got, err := c.GetBucketPolicy(ctx, bucket)
	require.NoError(t, err)
	assert.Empty(t, got, "nothing was applied")
	// Each of the policy's keys on its own, in the delete statement.
	for _, key := range []string{keyIfMatch, keyIfNoneMatch, keyCreation} {
		doc := s3Policy("aws", bucket, "writefence/")
		doc.Statement = []iamStatement{doc.Statement[1]}
		doc.Statement[0].Condition = map[string]map[string]string{"Null": {key: "true"}}
		b, err := json.Marshal(doc)
		require.NoError(t, err)
		err = c.SetBucketPolicy(ctx, bucket, string(b))
		assert.Equal(t, "MalformedPolicy", minio.ToErrorResponse(err).Code, "%s: %v", key, err)
		assert.Contains(t, minio.ToErrorResponse(err).Message, "invalid condition key '"+key+"'")
	}

	// A Deny without conditions, for everyone, beside an Allow for
	// anonymous requests.
	record := "writefence/s/wal/0"
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(`{"Version": "2012-10-17", "Statement": [
		{"Effect": "Allow", "Principal": {"AWS": ["*"]}, "Action": ["s3:PutObject", "s3:DeleteObject"], "Resource": ["arn:aws:s3:::`+bucket+`/*"]},
		{"Effect": "Deny", "Principal": {"AWS": ["*"]}, "Action": ["s3:DeleteObject"], "Resource": ["arn:aws:s3:::`+bucket+`/writefence/s/*"]}]}`), &doc))
	b, err := json.Marshal(doc)
	require.NoError(t, err)
	require.NoError(t, c.SetBucketPolicy(ctx, bucket, string(b)))
	for _, key := range []string{record, "writefence/b/wal/0/x"} {
		_, err = c.PutObject(ctx, bucket, key, strings.NewReader("x"), 1, minio.PutObjectOptions{})
		require.NoError(t, err)
	}
	anon, err := minio.New(testserver.S3Server(t).Endpoint, &minio.Options{Creds: credentials.NewStaticV4("", "", ""), Region: "us-east-1"})
	require.NoError(t, err)
	err = anon.RemoveObject(ctx, bucket, record, minio.RemoveObjectOptions{})
	assert.Equal(t, "AccessDenied", minio.ToErrorResponse(err).Code, "an anonymous rm of a record: %v", err)
	assert.NoError(t, anon.RemoveObject(ctx, bucket, "writefence/b/wal/0/x", minio.RemoveObjectOptions{}), "a blob stays deletable")
	assert.NoError(t, c.RemoveObject(ctx, bucket, record, minio.RemoveObjectOptions{}), "the root user is never bound by a bucket policy")
}

// TestS3RefusesCloudStorageXMLAPI: an s3:// address at Cloud Storage's
// XML API is a usage error, before any request: GCS ignores the S3
// conditional headers there.
func TestS3RefusesCloudStorageXMLAPI(t *testing.T) {
	for _, ep := range []string{"storage.googleapis.com", "STORAGE.googleapis.com:443", "mirrors.storage.googleapis.com", "storage.googleapis.com."} {
		r := wf(t, "latest", "-timeout", "5s", "-store", "s3://mirrors?endpoint="+ep, "wal", "s")
		assert.Equal(t, exitUsage, r.code, "%s: %s", ep, r)
		assert.Contains(t, r.stderr, "use gs://mirrors", ep)
	}
	assert.False(t, gcsXMLEndpoint("storage.googleapis.com.example.org"))
	assert.False(t, gcsXMLEndpoint("127.0.0.1:9000"))
}

// TestS3LifecycleFindings: the rules MinIO cannot hold without a remote
// tier (a transition) and the forms of a rule's filter, judged on their
// own.
func TestS3LifecycleFindings(t *testing.T) {
	date := lifecycle.ExpirationDate{Time: time.Date(2030, 1, 2, 0, 0, 0, 0, time.UTC)}
	cfg := &lifecycle.Configuration{Rules: []lifecycle.Rule{
		{ID: "cold", Status: "Enabled", RuleFilter: lifecycle.Filter{Prefix: "writefence/"}, Transition: lifecycle.Transition{StorageClass: "GLACIER", Days: 10}},
		{ID: "and", Status: "Enabled", RuleFilter: lifecycle.Filter{And: lifecycle.And{Prefix: "writefence/s/", ObjectSizeLessThan: 1 << 20}}, Expiration: lifecycle.Expiration{Date: date}},
		{ID: "legacy", Status: "Enabled", Prefix: "writefence", AllVersionsExpiration: lifecycle.AllVersionsExpiration{Days: 3}},
		{ID: "markers", Status: "Enabled", Expiration: lifecycle.Expiration{DeleteMarker: true}},
		{ID: "and-tags", Status: "Enabled", RuleFilter: lifecycle.Filter{And: lifecycle.And{Prefix: "writefence/", Tags: []lifecycle.Tag{{Key: "k", Value: "v"}}}}, Expiration: lifecycle.Expiration{Days: 1}},
	}}
	fs := s3LifecycleFindings(cfg, "writefence/")
	require.Len(t, fs, 3, "%+v", fs)
	assert.Equal(t, levelWarn, fs[0].Level)
	assert.Equal(t, `rule "cold" moves every object under "writefence/" to storage class "GLACIER" 10 days after they are written`, fs[0].Found)
	assert.Equal(t, levelRisk, fs[1].Level)
	assert.Equal(t, `rule "and" expires every object under "writefence/s/" (of size above 0 and below 1048576 bytes, 0: no bound) on 2030-01-02`, fs[1].Found)
	assert.Equal(t, levelRisk, fs[2].Level)
	assert.Equal(t, `rule "legacy" expires every object under "writefence" 3 days after they are written, every version`, fs[2].Found)
	assert.Equal(t, []finding{{Check: "s3.lifecycle", Level: levelOK, Found: `2 lifecycle rules, none expires or transitions current objects under "writefence/"`}},
		s3LifecycleFindings(&lifecycle.Configuration{Rules: cfg.Rules[3:]}, "writefence/"))
}
