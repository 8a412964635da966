package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// policyGrammar is the part of AWS's IAM policy grammar a bucket policy's
// document follows: the elements a policy and a statement may hold, and
// the condition operators this policy uses.
var (
	policyElements    = []string{"Version", "Id", "Statement"}
	statementElements = []string{"Sid", "Effect", "Principal", "NotPrincipal", "Action", "NotAction", "Resource", "NotResource", "Condition"}
	sidPattern        = regexp.MustCompile(`^[A-Za-z0-9]+$`) // a Sid is ASCII letters and digits
)

// TestPolicyS3Document: the document follows AWS's grammar for a bucket
// policy: Version 2012-10-17, statements that each deny every principal
// one action on objects of the bucket under the prefix, with Null
// conditions on s3:if-match and s3:if-none-match.
func TestPolicyS3Document(t *testing.T) {
	r := wf(t, "policy", "s3", "-bucket", "mirrors", "-prefix", "wal")
	require.Equal(t, exitOK, r.code, "%s", r)
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &doc), "%s", r)
	for k := range doc {
		assert.Contains(t, policyElements, k, "a policy element")
	}
	assert.Equal(t, "2012-10-17", doc["Version"])
	stmts, ok := doc["Statement"].([]any)
	require.True(t, ok, "Statement is a list: %v", doc["Statement"])

	byAction := map[string]map[string]any{}
	for _, s := range stmts {
		st := s.(map[string]any)
		for k := range st {
			assert.Contains(t, statementElements, k, "a statement element")
		}
		assert.Regexp(t, sidPattern, st["Sid"])
		assert.Equal(t, "Deny", st["Effect"])
		assert.Equal(t, "*", st["Principal"], "every principal")
		action, ok := st["Action"].(string)
		require.True(t, ok, "one action per statement: %v", st["Action"])
		resources, ok := st["Resource"].([]any)
		require.True(t, ok, "Resource is a list: %v", st["Resource"])
		require.NotEmpty(t, resources)
		for _, res := range resources {
			assert.True(t, strings.HasPrefix(res.(string), "arn:aws:s3:::mirrors/wal/"), "an object ARN of the bucket under the prefix: %s", res)
		}
		if c, has := st["Condition"]; has {
			for op, keys := range c.(map[string]any) {
				assert.Contains(t, []string{"Null", "Bool"}, op)
				for _, v := range keys.(map[string]any) {
					assert.Equal(t, "true", v, "condition values are strings")
				}
			}
		}
		byAction[action] = st
	}
	require.ElementsMatch(t, []string{"s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"}, keysOf(byAction))

	put := byAction["s3:PutObject"]
	assert.Equal(t, []any{"arn:aws:s3:::mirrors/wal/*"}, put["Resource"], "every object under the prefix")
	assert.Equal(t, map[string]any{
		"Null": map[string]any{"s3:if-match": "true", "s3:if-none-match": "true"},
		"Bool": map[string]any{"s3:ObjectCreationOperation": "true"},
	}, put["Condition"], "denied when neither header is there, sparing the multipart steps that take none")

	records := []any{"arn:aws:s3:::mirrors/wal/s/*", "arn:aws:s3:::mirrors/wal/_brand", "arn:aws:s3:::mirrors/wal/_lease/*", "arn:aws:s3:::mirrors/wal/_settled/*"}
	del := byAction["s3:DeleteObject"]
	assert.Equal(t, records, del["Resource"], "records, the brand, leases and settle logs; not blobs, probe keys or the clock")
	assert.Equal(t, map[string]any{"Null": map[string]any{"s3:if-match": "true"}}, del["Condition"])
	ver := byAction["s3:DeleteObjectVersion"]
	assert.Equal(t, records, ver["Resource"])
	assert.NotContains(t, ver, "Condition", "removing a version is refused outright")
}

func keysOf[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// TestPolicyS3Flags: the default prefix, another partition, -json on one
// line, and the usage errors.
func TestPolicyS3Flags(t *testing.T) {
	r := wf(t, "policy", "s3", "-bucket", "mirrors")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Contains(t, r.stdout, `"arn:aws:s3:::mirrors/writefence/*"`)

	r = wf(t, "policy", "s3", "-json", "-partition", "aws-cn", "-bucket", "mirrors", "-prefix", "a/c/")
	require.Equal(t, exitOK, r.code, "%s", r)
	assert.Equal(t, 1, strings.Count(r.stdout, "\n"), "one line")
	assert.Contains(t, r.stdout, `"arn:aws-cn:s3:::mirrors/a/c/*"`)

	for _, args := range [][]string{
		{},
		{"-bucket", "Mirrors"},
		{"-bucket", "ab"},
		{"-bucket", "mirrors", "-prefix", "wal*"},
		{"-bucket", "mirrors", "-prefix", "a/b/"}, // no Fence writes under it: its b/ is a/'s blob space
		{"-bucket", "mirrors", "-prefix", "${aws:username}"},
		{"-bucket", "mirrors", "-partition", "azure"},
		{"-bucket", "mirrors", "extra"},
	} {
		r := wf(t, append([]string{"policy", "s3"}, args...)...)
		assert.Equal(t, exitUsage, r.code, "%v: %s", args, r)
		assert.Empty(t, r.stdout, "%v", args)
	}
	r = wf(t, "policy")
	assert.Equal(t, exitUsage, r.code, "%s", r)
	assert.Contains(t, r.stderr, "want a command: s3")
}

// TestPolicyDenies: the document denies what it should and nothing the
// library does, as policyDenies reads it; and policyDenies reads other
// policies as AWS does, counting a statement it cannot evaluate as not
// denying.
func TestPolicyDenies(t *testing.T) {
	doc, err := json.Marshal(s3Policy("aws", "b", "wf/"))
	require.NoError(t, err)
	obj := func(key string) string { return "arn:aws:s3:::b/" + key }
	create := map[string]string{keyCreation: "true"}
	with := func(k, v string) map[string]string { return map[string]string{keyCreation: "true", k: v} }
	for _, tt := range []struct {
		name   string
		r      s3Request
		denied bool
	}{
		{"a plain upload of a record", s3Request{"s3:PutObject", obj("wf/s/wal/0"), create}, true},
		{"a plain upload of a blob", s3Request{"s3:PutObject", obj("wf/b/wal/0/x"), create}, true},
		{"a create-only write", s3Request{"s3:PutObject", obj("wf/s/wal/0"), with(keyIfNoneMatch, "*")}, false},
		{"a conditional update", s3Request{"s3:PutObject", obj("wf/s/wal/0"), with(keyIfMatch, `"e"`)}, false},
		{"a multipart upload's parts", s3Request{"s3:PutObject", obj("wf/b/wal/0/x"), map[string]string{keyCreation: "false"}}, false},
		{"a plain upload outside the prefix", s3Request{"s3:PutObject", obj("other/x"), create}, false},
		{"a plain upload beside the prefix", s3Request{"s3:PutObject", obj("wfx/s/wal/0"), create}, false},
		{"an rm of a record", s3Request{"s3:DeleteObject", obj("wf/s/wal/0"), nil}, true},
		{"an rm of the brand", s3Request{"s3:DeleteObject", obj("wf/_brand"), nil}, true},
		{"an rm of a lease", s3Request{"s3:DeleteObject", obj("wf/_lease/l"), nil}, true},
		{"a conditional delete of a record", s3Request{"s3:DeleteObject", obj("wf/s/wal/0"), map[string]string{keyIfMatch: `"e"`}}, false},
		{"gc's delete of a blob", s3Request{"s3:DeleteObject", obj("wf/b/wal/0/x"), nil}, false},
		{"probe's delete of its scratch key", s3Request{"s3:DeleteObject", obj("wf/_probe-{ab}"), nil}, false},
		{"a delete of a record's version", s3Request{"s3:DeleteObjectVersion", obj("wf/s/wal/0"), map[string]string{keyIfMatch: `"e"`}}, true},
		{"a read", s3Request{"s3:GetObject", obj("wf/s/wal/0"), nil}, false},
	} {
		got, err := policyDenies(doc, tt.r)
		require.NoError(t, err)
		assert.Equal(t, tt.denied, got, tt.name)
	}

	record := s3Request{"s3:DeleteObject", obj("wf/s/wal/0"), map[string]string{}}
	for _, tt := range []struct {
		name, doc string
		denied    bool
	}{
		{"one statement, not a list", `{"Statement": {"Effect": "Deny", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::b/*"}}`, true},
		{"lists and AWS principal", `{"Statement": [{"Effect": "Deny", "Principal": {"AWS": ["*"]}, "Action": ["s3:GetObject", "s3:Delete*"], "Resource": ["arn:aws:s3:::b/wf/?/*"]}]}`, true},
		{"NotAction", `{"Statement": [{"Effect": "Deny", "Principal": "*", "NotAction": "s3:GetObject", "Resource": "arn:aws:s3:::b/*"}]}`, true},
		{"NotResource elsewhere", `{"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "NotResource": "arn:aws:s3:::b/other/*"}]}`, true},
		{"an Allow", `{"Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::b/*"}]}`, false},
		{"one principal only", `{"Statement": [{"Effect": "Deny", "Principal": {"AWS": "arn:aws:iam::1:user/a"}, "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::b/*"}]}`, false},
		{"NotPrincipal", `{"Statement": [{"Effect": "Deny", "NotPrincipal": {"AWS": "arn:aws:iam::1:root"}, "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::b/*"}]}`, false},
		{"an operator it cannot evaluate", `{"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::b/*", "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}]}`, false},
		{"another bucket", `{"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::c/*"}]}`, false},
		{"a resource that is case-sensitive", `{"Statement": [{"Effect": "Deny", "Principal": "*", "Action": "S3:DELETEOBJECT", "Resource": "arn:aws:s3:::b/WF/*"}]}`, false},
	} {
		got, err := policyDenies([]byte(tt.doc), record)
		require.NoError(t, err, tt.name)
		assert.Equal(t, tt.denied, got, tt.name)
	}
	_, err = policyDenies([]byte(`{"Statement": 7}`), record)
	assert.Error(t, err)
}
