//go:build !writefence_noetcd && !writefence_nosdk

package main

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdAuditor counts the voting members of the cluster client reaches.
func etcdAuditor(client *clientv3.Client) auditor {
	return func(ctx context.Context, a *audit) {
		const check = "etcd.members"
		resp, err := client.MemberList(ctx)
		if err != nil {
			a.unknown(check, err, "let the user list the cluster's members (etcdctl member list)")
			return
		}
		voting := 0
		for _, m := range resp.Members {
			if !m.IsLearner {
				voting++
			}
		}
		if voting > 1 {
			a.ok(check, fmt.Sprintf("%d voting members: a write is acknowledged once a majority has it on disk", voting))
			return
		}
		a.add(finding{Check: check, Level: levelWarn, Found: "the cluster has one voting member",
			Consequence: "no failover can lose a push, but losing that member's disk loses every record, and restoring it from a snapshot rolls every record back",
			Fix:         "run three (or five) members, so a record outlives the loss of one"})
	}
}
