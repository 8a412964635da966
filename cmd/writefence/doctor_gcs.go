//go:build !writefence_nogcs && !writefence_nosdk

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"cloud.google.com/go/storage"
	"google.golang.org/api/iterator"

	"github.com/writefence/writefence/internal/escape"
)

// gcsHoldScan bounds how many objects under the prefix doctor reads the
// holds of.
const gcsHoldScan = 1000

// gcsAuditor reads the settings of bucket through client: lifecycle
// rules, the retention policy, the default event-based hold, holds and
// retention on the objects under the prefix, versioning and soft delete.
func gcsAuditor(client *storage.Client, bucket string) auditor {
	return func(ctx context.Context, a *audit) {
		b := client.Bucket(bucket)
		attrs, err := b.Attrs(ctx)
		if err != nil {
			for _, check := range []string{"gcs.lifecycle", "gcs.retention", "gcs.versioning"} {
				a.unknown(check, err, "let the credentials read the bucket's metadata (storage.buckets.get)")
			}
		} else {
			for _, f := range gcsBucketFindings(attrs, a.prefix) {
				a.add(f)
			}
		}
		gcsObjectHolds(ctx, a, b)
	}
}

// gcsBucketFindings judges the bucket's settings on the keys under prefix.
func gcsBucketFindings(attrs *storage.BucketAttrs, prefix string) []finding {
	var fs []finding
	fix := func(what string) string {
		return fmt.Sprintf("%s (gcloud storage buckets update gs://%s ...), or keep the records in a bucket without it", what, attrs.Name)
	}
	deleting := 0
	for i, r := range attrs.Lifecycle.Rules {
		if r.Action.Type != storage.DeleteAction {
			continue
		}
		scope, ok := gcsRuleScope(r.Condition, prefix)
		if !ok {
			continue
		}
		deleting++
		fs = append(fs, finding{Check: "gcs.lifecycle", Level: levelRisk,
			Found:       fmt.Sprintf("lifecycle rule %d deletes %s", i+1, scope),
			Consequence: "Cloud Storage deletes records and blobs: a shard whose record is gone looks new, and a deposed writer's push lands as if it were the first",
			Fix:         fix(fmt.Sprintf("remove the rule, or give it a matchesPrefix that no key under %q starts with", prefix))})
	}
	if deleting == 0 {
		fs = append(fs, finding{Check: "gcs.lifecycle", Level: levelOK,
			Found: fmt.Sprintf("%s, none deletes live objects under %q", plural(len(attrs.Lifecycle.Rules), "lifecycle rule"), prefix)})
	}

	switch rp := attrs.RetentionPolicy; {
	case rp != nil && rp.RetentionPeriod > 0:
		found := fmt.Sprintf("a retention policy of %s", rp.RetentionPeriod)
		what := "remove the retention policy"
		if rp.IsLocked {
			found += ", locked"
			what = "a locked retention policy cannot be removed"
		}
		fs = append(fs, finding{Check: "gcs.retention", Level: levelWarn, Found: found,
			Consequence: "an object younger than the period cannot be replaced: every push to a record written less than that ago is refused, and the fence stops",
			Fix:         fix(what)})
	case attrs.DefaultEventBasedHold:
	default:
		fs = append(fs, finding{Check: "gcs.retention", Level: levelOK, Found: "no retention policy and no default event-based hold"})
	}
	if attrs.DefaultEventBasedHold {
		fs = append(fs, finding{Check: "gcs.retention", Level: levelWarn, Found: "every new object gets an event-based hold (default event-based hold)",
			Consequence: "a record cannot be replaced until its hold is released: the second push to a shard is refused, and the fence stops",
			Fix:         fix("turn the default event-based hold off and release the holds on the records")})
	}

	switch sd := attrs.SoftDeletePolicy; {
	case attrs.VersioningEnabled:
		fs = append(fs, finding{Check: "gcs.versioning", Level: levelOK,
			Found: "object versioning is on: a deleted record can be recovered (restore only its latest generation: an earlier one rolls the shard back)"})
	case sd != nil && sd.RetentionDuration > 0:
		fs = append(fs, finding{Check: "gcs.versioning", Level: levelOK,
			Found: fmt.Sprintf("soft delete keeps a deleted record for %s", sd.RetentionDuration)})
	default:
		fs = append(fs, finding{Check: "gcs.versioning", Level: levelWarn, Found: "neither object versioning nor soft delete is on",
			Consequence: "a record deleted by mistake cannot be recovered from the bucket",
			Fix:         fmt.Sprintf("turn soft delete or object versioning on: gcloud storage buckets update gs://%s --soft-delete-duration=7d (or --versioning)", attrs.Name)})
	}
	return fs
}

// gcsRuleScope returns which live objects of prefix a Delete rule with
// condition c reaches, and false when it reaches none.
func gcsRuleScope(c storage.LifecycleCondition, prefix string) (string, bool) {
	// Rules on noncurrent generations never delete the live record.
	if c.Liveness == storage.Archived || c.NumNewerVersions > 0 || c.DaysSinceNoncurrentTime > 0 || !c.NoncurrentTimeBefore.IsZero() {
		return "", false
	}
	scope := "every object in the bucket"
	if len(c.MatchesPrefix) > 0 {
		var hit []string
		for _, p := range c.MatchesPrefix {
			if overlaps(p, prefix) {
				hit = append(hit, fmt.Sprintf("%q", p))
			}
		}
		if len(hit) == 0 {
			return "", false
		}
		scope = "objects under " + strings.Join(hit, ", ")
	}
	if len(c.MatchesSuffix) > 0 {
		scope += fmt.Sprintf(" ending in %q", c.MatchesSuffix)
	}
	switch {
	case c.AgeInDays > 0:
		scope += fmt.Sprintf(" %s after they are written", plural(int(c.AgeInDays), "day"))
	case !c.CreatedBefore.IsZero():
		scope += " created before " + c.CreatedBefore.Format(time.DateOnly)
	}
	return scope, true
}

// gcsObjectHolds reads the holds and retention of the first objects
// under the prefix.
func gcsObjectHolds(ctx context.Context, a *audit, b *storage.BucketHandle) {
	const check = "gcs.holds"
	it := b.Objects(ctx, &storage.Query{Prefix: a.prefix})
	scanned, held := 0, 0
	first := ""
	now := time.Now()
	for scanned < gcsHoldScan {
		o, err := it.Next()
		if errors.Is(err, iterator.Done) {
			break
		}
		if err != nil {
			a.unknown(check, err, "let the credentials list the objects under the prefix (storage.objects.list)")
			return
		}
		scanned++
		if o.EventBasedHold || o.TemporaryHold || (o.Retention != nil && o.Retention.RetainUntil.After(now)) {
			if held++; held == 1 {
				first = o.Name
			}
		}
	}
	if held == 0 {
		a.ok(check, fmt.Sprintf("none of the %s under the prefix has a hold or a retention", plural(scanned, "object")))
		return
	}
	a.add(finding{Check: check, Level: levelWarn,
		Found:       fmt.Sprintf("%d of the %s under the prefix have a hold or a retention, e.g. %s", held, plural(scanned, "object"), escape.String(first)),
		Consequence: "a held record cannot be replaced: pushes to its shard are refused until the hold is released or the retention ends",
		Fix:         "release the holds (gcloud storage objects update --no-event-based-hold --no-temporary-hold) on the records"})
}
