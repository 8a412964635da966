//go:build !writefence_nominio && !writefence_nosdk

package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/lifecycle"

	"github.com/writefence/writefence/internal/escape"
)

// s3Auditor reads the settings of bucket through client: lifecycle rules,
// versioning, the bucket policy and, with writes, whether the server
// refuses an unconditional write under the prefix.
func s3Auditor(client *minio.Client, bucket string) auditor {
	return func(ctx context.Context, a *audit) {
		s3Lifecycle(ctx, a, client, bucket)
		s3Versioning(ctx, a, client, bucket)
		s3BucketPolicy(ctx, a, client, bucket)
		if a.writes {
			s3UnconditionalWrite(ctx, a, client, bucket)
		}
	}
}

// s3Unreadable adds check as unknown because of err: permission is the
// IAM action that reads it.
func s3Unreadable(a *audit, check string, err error, permission string) {
	switch minio.ToErrorResponse(err).Code {
	case "NotImplemented":
		a.unknown(check, err, "the server does not report this setting: check its own configuration")
	default:
		a.unknown(check, err, "let the credentials read it ("+permission+" on the bucket)")
	}
}

func s3Lifecycle(ctx context.Context, a *audit, client *minio.Client, bucket string) {
	const check = "s3.lifecycle"
	cfg, err := client.GetBucketLifecycle(ctx, bucket)
	if minio.ToErrorResponse(err).Code == "NoSuchLifecycleConfiguration" {
		a.ok(check, "the bucket has no lifecycle rules")
		return
	}
	if err != nil {
		s3Unreadable(a, check, err, "s3:GetLifecycleConfiguration")
		return
	}
	for _, f := range s3LifecycleFindings(cfg, a.prefix) {
		a.add(f)
	}
}

// s3LifecycleFindings judges the rules of cfg on the keys under prefix: a
// rule that expires current objects there is a risk, one that transitions
// them a warning. Rules on noncurrent versions or delete markers only, and
// rules filtered by object tags (the library tags nothing), never reach a
// record.
func s3LifecycleFindings(cfg *lifecycle.Configuration, prefix string) []finding {
	var fs []finding
	reaching := 0
	for _, r := range cfg.Rules {
		scope, ok := s3RuleScope(r, prefix)
		if !ok {
			continue
		}
		id := fmt.Sprintf("%q", r.ID)
		fix := fmt.Sprintf("delete rule %s from the bucket's lifecycle configuration, or give it a filter prefix that no key under %q starts with", id, prefix)
		if when := s3Expires(r); when != "" {
			reaching++
			fs = append(fs, finding{Check: "s3.lifecycle", Level: levelRisk,
				Found:       fmt.Sprintf("rule %s expires %s %s", id, scope, when),
				Consequence: "the server deletes records and blobs: a shard whose record is gone looks new, and a deposed writer's push lands as if it were the first",
				Fix:         fix})
		}
		if t := r.Transition; t.StorageClass != "" || t.Days > 0 || !t.Date.IsZero() {
			reaching++
			fs = append(fs, finding{Check: "s3.lifecycle", Level: levelWarn,
				Found:       fmt.Sprintf("rule %s moves %s to storage class %q %s", id, scope, t.StorageClass, s3When(int(t.Days), t.Date.Time)),
				Consequence: "a record in an archive class cannot be read until it is restored, so pushes to its shard fail; one on a remote tier is only as durable as the tier",
				Fix:         fix})
		}
	}
	if reaching == 0 {
		fs = append(fs, finding{Check: "s3.lifecycle", Level: levelOK,
			Found: fmt.Sprintf("%s, none expires or transitions current objects under %q", plural(len(cfg.Rules), "lifecycle rule"), prefix)})
	}
	return fs
}

// s3RuleScope returns what keys of prefix an enabled rule r reaches, and
// false when it reaches none.
func s3RuleScope(r lifecycle.Rule, prefix string) (string, bool) {
	if !strings.EqualFold(r.Status, "Enabled") {
		return "", false
	}
	f := r.RuleFilter
	if f.Tag.Key != "" || len(f.And.Tags) > 0 {
		return "", false
	}
	rp := r.Prefix // the rule's prefix before filters existed
	switch {
	case f.And.Prefix != "":
		rp = f.And.Prefix
	case f.Prefix != "":
		rp = f.Prefix
	}
	if !overlaps(rp, prefix) {
		return "", false
	}
	scope := fmt.Sprintf("every object under %q", rp)
	if rp == "" {
		scope = "every object in the bucket"
	}
	if lt, gt := max(f.ObjectSizeLessThan, f.And.ObjectSizeLessThan), max(f.ObjectSizeGreaterThan, f.And.ObjectSizeGreaterThan); lt > 0 || gt > 0 {
		scope += fmt.Sprintf(" (of size above %d and below %d bytes, 0: no bound)", gt, lt)
	}
	return scope, true
}

// s3Expires says when r expires current objects, or "" when it does not.
func s3Expires(r lifecycle.Rule) string {
	e := r.Expiration
	switch {
	case bool(e.DeleteAll) && (e.Days > 0 || !e.Date.IsZero()):
		return s3When(int(e.Days), e.Date.Time) + ", every version"
	case e.Days > 0 || !e.Date.IsZero():
		return s3When(int(e.Days), e.Date.Time)
	case r.AllVersionsExpiration.Days > 0:
		return s3When(r.AllVersionsExpiration.Days, time.Time{}) + ", every version"
	}
	return ""
}

func s3When(days int, date time.Time) string {
	if !date.IsZero() {
		return "on " + date.Format(time.DateOnly)
	}
	return fmt.Sprintf("%s after they are written", plural(days, "day"))
}

func s3Versioning(ctx context.Context, a *audit, client *minio.Client, bucket string) {
	const check = "s3.versioning"
	v, err := client.GetBucketVersioning(ctx, bucket)
	if err != nil {
		s3Unreadable(a, check, err, "s3:GetBucketVersioning")
		return
	}
	off := finding{Check: check, Level: levelWarn,
		Consequence: "a record deleted or overwritten by mistake cannot be recovered from the bucket",
		Fix:         "turn versioning on (aws s3api put-bucket-versioning --versioning-configuration Status=Enabled, or mc version enable), with a lifecycle rule that expires noncurrent versions only"}
	switch {
	case !v.Enabled():
		off.Found = "versioning is off"
		if v.Suspended() {
			off.Found = "versioning is suspended"
		}
		a.add(off)
		return
	}
	for _, ex := range v.ExcludedPrefixes {
		if overlaps(ex.Prefix, a.prefix) {
			off.Found = fmt.Sprintf("versioning is on but excludes keys under %q", ex.Prefix)
			a.add(off)
			return
		}
	}
	a.ok(check, "versioning is on: a deleted record can be recovered (restore only its latest version: an earlier one rolls the shard back)")
}

func s3BucketPolicy(ctx context.Context, a *audit, client *minio.Client, bucket string) {
	const check = "s3.policy"
	doc, err := client.GetBucketPolicy(ctx, bucket)
	if err != nil {
		s3Unreadable(a, check, err, "s3:GetBucketPolicy")
		return
	}
	fix := fmt.Sprintf("merge the statements of writefence policy s3 -bucket %s -prefix %s into the bucket policy (AWS S3; MinIO refuses its condition keys: there, let only the writers' credentials write under the prefix)", bucket, a.prefix)
	if doc == "" {
		a.add(finding{Check: check, Level: levelWarn, Found: "the bucket has no policy",
			Consequence: "the server accepts unconditional writes and deletes of records from any client allowed to write: a program that bypasses the library, or an operator's rm, replaces or deletes a record unchecked",
			Fix:         fix})
		return
	}
	arn := "arn:aws:s3:::" + bucket + "/" + recordSample(a.prefix)
	put, err := policyDenies([]byte(doc), s3Request{action: "s3:PutObject", resource: arn, keys: map[string]string{keyCreation: "true"}})
	if err != nil {
		a.unknown(check, err, "check the bucket policy by hand")
		return
	}
	del, _ := policyDenies([]byte(doc), s3Request{action: "s3:DeleteObject", resource: arn, keys: map[string]string{}})
	var missing []string
	if !put {
		missing = append(missing, "writes without If-Match or If-None-Match")
	}
	if !del {
		missing = append(missing, "deletes without If-Match")
	}
	if len(missing) == 0 {
		a.ok(check, "the bucket policy denies unconditional writes and deletes of records to every principal")
		return
	}
	a.add(finding{Check: check, Level: levelWarn,
		Found:       "the bucket policy does not deny " + strings.Join(missing, " or ") + " of records to every principal",
		Consequence: "a program that bypasses the library, or an operator's upload or rm, can replace or delete a record unchecked",
		Fix:         fix})
}

// s3UnconditionalWrite asks the server itself: a write with no condition
// to a scratch key under the prefix, deleted again if it lands.
func s3UnconditionalWrite(ctx context.Context, a *audit, client *minio.Client, bucket string) {
	const check = "s3.unconditional-write"
	key := a.scratch("unconditional")
	body := []byte("writefence doctor: a write without a condition\n")
	_, err := client.PutObject(ctx, bucket, key, bytes.NewReader(body), int64(len(body)), minio.PutObjectOptions{ContentType: "text/plain"})
	switch code := minio.ToErrorResponse(err).Code; {
	case err == nil:
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = client.RemoveObject(dctx, bucket, key, minio.RemoveObjectOptions{})
		a.add(finding{Check: check, Level: levelWarn,
			Found:       fmt.Sprintf("the server accepted a write without If-Match or If-None-Match to %s (deleted again)", escape.String(key)),
			Consequence: "nothing but the writers' discipline keeps another program from replacing a record without a condition",
			Fix:         fmt.Sprintf("apply writefence policy s3 -bucket %s -prefix %s (AWS S3 enforces it; MinIO refuses its condition keys: there, let only the writers' credentials write under the prefix)", bucket, a.prefix)})
	case code == "AccessDenied":
		a.ok(check, "the server refused a write without If-Match or If-None-Match under the prefix (AccessDenied)")
	case ctx.Err() != nil:
	default:
		a.unknown(check, err, "make sure the credentials may write under the prefix, or run with -writes=false")
	}
}
