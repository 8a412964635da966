package main

import (
	"context"
	"fmt"
)

// interruptAdvice says, for each command that writes, what an interrupted
// run may have left; a command not named here only reads.
var interruptAdvice = map[string]string{
	"push":          "the push may have landed: run the same command again, which succeeds if it did, or writefence latest to see what the store holds",
	"commit":        "the commit may have landed: run the same command again, which succeeds if it did, or writefence latest to see what the manifest holds",
	"seal":          "the seal may have landed: run the same command again, which succeeds if it did, or writefence latest to see the recorded epoch",
	"settle":        "the settle may have landed: run writefence latest to see whether the record is still corrupt",
	"blob put":      "at most a blob no manifest references was written, which gc deletes: run the command again",
	"brand":         "a claim or install may have landed: run writefence brand verify to see the brand",
	"gc":            "some blobs may have been deleted, never one the manifest references: run gc again to finish",
	"race":          "the race judged nothing: run it again",
	"probe":         "the probe judged nothing; run it again",
	"init":          "the bucket, table, container or directory may have been created: run init again, which says whether it exists",
	"lease release": "the release may have landed: run writefence lease show to see the lease",
}

// interrupted is err, which a signal's cancellation caused, with what the
// interrupted command may have left behind.
func interrupted(err error, inv *invocation) error {
	advice, writes := interruptAdvice[inv.name]
	if !writes {
		advice = "nothing was written"
	}
	return &advisedError{interruptError{fmt.Errorf("writefence: %s interrupted (SIGINT or SIGTERM): %w", inv.name, err)}, advice}
}

// interruptError is an error a signal caused: it matches context.Canceled
// (exit 130, outcome "interrupted") even when the error it wraps lost it.
type interruptError struct{ error }

func (e interruptError) Unwrap() error { return e.error }

func (interruptError) Is(target error) bool { return target == context.Canceled }
