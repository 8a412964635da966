//go:build writefence_nodynamodb || writefence_nosdk

package main

// Built with writefence_nodynamodb, the command has no DynamoDB store (store_dynamodb.go).
func init() { omitted["dynamodb"] = "writefence_nodynamodb" }
