package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strings"

	"github.com/writefence/writefence/internal/escape"
	"github.com/writefence/writefence/internal/keys"
)

var policyS3Command = command{
	name:    "policy s3",
	args:    "",
	nargs:   0,
	summary: "print an S3 bucket policy that refuses unconditional writes and deletes of records",
	help: `
Prints a bucket policy (JSON) that makes Amazon S3 itself refuse, under the
prefix, what could replace or delete a record behind the fence's back:

  - s3:PutObject without If-Match or If-None-Match: PutObject, CopyObject and
    CompleteMultipartUpload are all s3:PutObject in a policy; the
    s3:ObjectCreationOperation key exempts CreateMultipartUpload, UploadPart
    and UploadPartCopy, which take no conditional header. Every write the
    library makes carries one of the two, so it is not affected; a plain
    upload or copy by another program is refused (403). AWS refuses every
    CopyObject to the prefix under such a policy, conditional or not.
  - s3:DeleteObject without If-Match, of records, the brand key, leases and
    settle logs: an operator's rm of a record is refused. Blobs, the probe's
    scratch keys and the blob clock stay deletable, because gc, probe and
    race delete them without a condition; race's cleanup of its scratch
    record is refused (delete it by hand with If-Match, or leave it).
  - s3:DeleteObjectVersion of the same keys, unconditionally: removing the
    current version of a record in a versioned bucket rolls it back.

The conditions use the condition keys AWS documents for conditional writes
and deletes (s3:if-match, s3:if-none-match, with Null). The statements deny
and grant nothing: merge them into the bucket's policy, beside its Allow
statements. Lifecycle rules are not subject to bucket policies: doctor
reports those. Other S3 servers may not know these condition keys: MinIO
refuses the whole document (it accepts only the condition keys it knows).

examples:
  writefence policy s3 -bucket mirrors -prefix writefence/ > policy.json
  aws s3api put-bucket-policy --bucket mirrors --policy file://policy.json`,
	define: definePolicyS3,
}

// iamPolicy is an IAM policy document, in the grammar AWS documents: a
// version and a list of statements.
type iamPolicy struct {
	Version   string         `json:"Version"`
	Statement []iamStatement `json:"Statement"`
}

// iamStatement is one statement of a policy the command writes. Its
// conditions map an operator (Null, Bool) to condition keys and values.
type iamStatement struct {
	Sid       string                       `json:"Sid"`
	Effect    string                       `json:"Effect"`
	Principal string                       `json:"Principal"`
	Action    string                       `json:"Action"`
	Resource  []string                     `json:"Resource"`
	Condition map[string]map[string]string `json:"Condition,omitempty"`
}

// The condition keys of the policy: AWS's, for conditional requests.
const (
	keyIfMatch     = "s3:if-match"
	keyIfNoneMatch = "s3:if-none-match"
	keyCreation    = "s3:ObjectCreationOperation"
)

// recordDeletePatterns are the keys under a prefix whose unconditional
// deletion the policy refuses: records, the brand, leases and settle logs
// (see internal/keys); never blobs, the probe's keys or the blob clock,
// which the library deletes without a condition.
func recordDeletePatterns(prefix string) []string {
	return []string{
		keys.Shards(prefix) + "*",
		keys.Brand(prefix),
		strings.TrimSuffix(mustKey(keys.Lease(prefix, "x")), "x") + "*",
		strings.TrimSuffix(mustKey(keys.SettleLog(prefix, "x", "x")), "x/x") + "*",
	}
}

// mustKey returns a key built from fixed valid names.
func mustKey(k string, err error) string {
	if err != nil {
		panic("unreachable: fixed names are valid: " + err.Error())
	}
	return k
}

// s3Policy returns the policy for bucket and prefix in partition (aws,
// aws-cn, aws-us-gov).
func s3Policy(partition, bucket, prefix string) iamPolicy {
	arn := func(key string) string { return "arn:" + partition + ":s3:::" + bucket + "/" + key }
	var records []string
	for _, p := range recordDeletePatterns(prefix) {
		records = append(records, arn(p))
	}
	return iamPolicy{
		Version: "2012-10-17",
		Statement: []iamStatement{{
			Sid:       "WritefenceDenyUnconditionalWrites",
			Effect:    "Deny",
			Principal: "*",
			Action:    "s3:PutObject",
			Resource:  []string{arn(prefix + "*")},
			Condition: map[string]map[string]string{
				"Null": {keyIfMatch: "true", keyIfNoneMatch: "true"},
				"Bool": {keyCreation: "true"},
			},
		}, {
			Sid:       "WritefenceDenyUnconditionalRecordDeletes",
			Effect:    "Deny",
			Principal: "*",
			Action:    "s3:DeleteObject",
			Resource:  records,
			Condition: map[string]map[string]string{"Null": {keyIfMatch: "true"}},
		}, {
			Sid:       "WritefenceDenyRecordVersionDeletes",
			Effect:    "Deny",
			Principal: "*",
			Action:    "s3:DeleteObjectVersion",
			Resource:  records,
		}},
	}
}

func definePolicyS3(fs *flag.FlagSet, inv *invocation) action {
	bucket := fs.String("bucket", "", "the `bucket` the policy is for (required)")
	var prefix prefixValue
	fs.Var(&prefix, "prefix", "the key `prefix` of the records, as the store flag -prefix (default "+keys.DefaultPrefix+")")
	partition := fs.String("partition", "aws", "the AWS `partition` of the bucket's ARN: aws, aws-cn or aws-us-gov")
	asJSON := fs.Bool("json", false, "print the policy on one line")
	return func(_ context.Context, inv *invocation, _ []string) int {
		o := &output{inv: inv, json: *asJSON}
		p := string(prefix)
		if p == "" {
			p = keys.DefaultPrefix
		}
		switch {
		case !validS3Bucket(*bucket):
			return o.fail(usagef("writefence policy s3: -bucket %s: want a bucket name, 3 to 63 lower-case letters, digits, '.' and '-', starting and ending with a letter or digit", escape.String(*bucket)))
		case strings.ContainsAny(p, "*?$"):
			// A policy reads * and ? as wildcards and ${...} as a variable.
			return o.fail(usagef("writefence policy s3: -prefix %s: a policy cannot name a prefix holding '*', '?' or '$'", escape.String(p)))
		case *partition != "aws" && *partition != "aws-cn" && *partition != "aws-us-gov":
			return o.fail(usagef("writefence policy s3: -partition %s: want aws, aws-cn or aws-us-gov", escape.String(*partition)))
		}
		doc := s3Policy(*partition, *bucket, p)
		var (
			b   []byte
			err error
		)
		if *asJSON {
			b, err = json.Marshal(doc)
		} else {
			b, err = json.MarshalIndent(doc, "", "  ")
		}
		if err != nil {
			return o.fail(err)
		}
		fmt.Fprintf(inv.stdout, "%s\n", b)
		return exitOK
	}
}

// validS3Bucket applies the S3 rules for bucket names that a policy's
// ARN can hold.
func validS3Bucket(b string) bool {
	if len(b) < 3 || len(b) > 63 || strings.Contains(b, "..") {
		return false
	}
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
	for i := 0; i < len(b); i++ {
		if c := b[i]; !alnum(c) && c != '-' && c != '.' {
			return false
		}
	}
	return alnum(b[0]) && alnum(b[len(b)-1])
}

// s3Request is a request a bucket policy is evaluated against: its
// action, the object's ARN, and the condition keys it carries with their
// values (a key absent from the map is absent from the request).
type s3Request struct {
	action   string
	resource string
	keys     map[string]string
}

// policyDenies reports whether the bucket policy doc has a Deny statement
// that applies to r for every principal. A statement it cannot evaluate
// (a condition operator other than Null, Bool and StringEquals, or a
// NotPrincipal) counts as not applying, so that doctor never calls a
// store safe on a statement it did not understand.
func policyDenies(doc []byte, r s3Request) (bool, error) {
	var p struct {
		Statement json.RawMessage
	}
	if err := json.Unmarshal(doc, &p); err != nil {
		return false, fmt.Errorf("writefence: bucket policy: %w", err)
	}
	var stmts []rawStatement
	if err := json.Unmarshal(p.Statement, &stmts); err != nil {
		var one rawStatement
		if err := json.Unmarshal(p.Statement, &one); err != nil {
			return false, fmt.Errorf("writefence: bucket policy: Statement: %w", err)
		}
		stmts = []rawStatement{one}
	}
	for _, s := range stmts {
		if s.denies(r) {
			return true, nil
		}
	}
	return false, nil
}

// rawStatement is a statement as a bucket policy may write it: each list
// may also be a single string.
type rawStatement struct {
	Effect       string
	Principal    json.RawMessage
	NotPrincipal json.RawMessage
	Action       stringList
	NotAction    stringList
	Resource     stringList
	NotResource  stringList
	Condition    map[string]map[string]stringList
}

// stringList is a policy element that holds one string or a list of them.
type stringList []string

func (l *stringList) UnmarshalJSON(b []byte) error {
	var one string
	if err := json.Unmarshal(b, &one); err == nil {
		*l = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*l = many
	return nil
}

func (s rawStatement) denies(r s3Request) bool {
	if s.Effect != "Deny" || s.NotPrincipal != nil || !everyone(s.Principal) {
		return false
	}
	if !matchesList(s.Action, s.NotAction, r.action, true) || !matchesList(s.Resource, s.NotResource, r.resource, false) {
		return false
	}
	for op, conds := range s.Condition {
		for key, values := range conds {
			if !conditionHolds(op, key, values, r.keys) {
				return false
			}
		}
	}
	return true
}

// everyone reports whether a Principal element names every principal:
// "*" or {"AWS": "*"}.
func everyone(raw json.RawMessage) bool {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s == "*"
	}
	var m map[string]stringList
	if json.Unmarshal(raw, &m) != nil {
		return false
	}
	for _, v := range m["AWS"] {
		if v == "*" {
			return true
		}
	}
	return false
}

// matchesList reports whether name is matched by list or, when the
// statement uses notList instead, by none of notList. Actions match
// without regard to case, resources with.
func matchesList(list, notList []string, name string, fold bool) bool {
	if len(list) == 0 && len(notList) == 0 {
		return false
	}
	anyOf := func(ps []string) bool {
		for _, p := range ps {
			if globMatch(p, name, fold) {
				return true
			}
		}
		return false
	}
	if len(list) > 0 {
		return anyOf(list)
	}
	return !anyOf(notList)
}

// globMatch matches name against a policy pattern, where * is any run of
// characters and ? one character.
func globMatch(pattern, name string, fold bool) bool {
	if fold {
		pattern, name = strings.ToLower(pattern), strings.ToLower(name)
	}
	// Not path.Match: it stops * at '/' and reads '[' as a class.
	return glob([]rune(pattern), []rune(name))
}

func glob(p, s []rune) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for i := 0; i <= len(s); i++ {
				if glob(p[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
		default:
			if len(s) == 0 || s[0] != p[0] {
				return false
			}
		}
		p, s = p[1:], s[1:]
	}
	return len(s) == 0
}

// conditionHolds evaluates one condition of a statement on a request
// carrying keys. Values of one key are alternatives.
func conditionHolds(op, key string, values []string, keys map[string]string) bool {
	v, present := keys[key]
	for _, want := range values {
		switch op {
		case "Null":
			if (want == "true") == !present {
				return true
			}
		case "Bool":
			if present && strings.EqualFold(v, want) {
				return true
			}
		case "StringEquals":
			if present && v == want {
				return true
			}
		default:
			return false
		}
	}
	return false
}

// recordSample is a key a record under prefix could have, to evaluate a
// policy with: keys.Shard's form.
func recordSample(prefix string) string {
	return mustKey(keys.Shard(prefix, "plugin", "shard"))
}
