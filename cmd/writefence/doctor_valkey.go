//go:build !writefence_novalkey && !writefence_nosdk

package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/writefence/writefence/internal/escape"
)

// valkeyAuditor reads the settings of the server, or of every primary of
// the cluster, that client reaches: the eviction policy, persistence and
// replicas against wait (the address's wait=); on a cluster also the slots
// whose primary has no replica.
func valkeyAuditor(client redis.UniversalClient, wait int) auditor {
	return func(ctx context.Context, a *audit) {
		cc, ok := client.(*redis.ClusterClient)
		if !ok {
			c, _ := client.(*redis.Client)
			for _, f := range valkeyNodeFindings(ctx, c, wait, "") {
				a.add(f)
			}
			return
		}
		var (
			mu    sync.Mutex // guards nodes
			nodes = map[string][]finding{}
		)
		err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			fs := valkeyNodeFindings(ctx, c, wait, c.Options().Addr)
			mu.Lock()
			nodes[c.Options().Addr] = fs
			mu.Unlock()
			return nil
		})
		if err != nil {
			a.unknown("valkey.cluster", err, "check that every node of the cluster answers")
		}
		for _, addr := range slices.Sorted(maps.Keys(nodes)) {
			for _, f := range nodes[addr] {
				a.add(f)
			}
		}
		valkeySlots(ctx, a, cc)
	}
}

// valkeyNodeFindings reads one server's settings; node, when not empty,
// names it in each finding.
func valkeyNodeFindings(ctx context.Context, c *redis.Client, wait int, node string) []finding {
	var fs []finding
	add := func(f finding) {
		if node != "" {
			f.Found = node + ": " + f.Found
		}
		fs = append(fs, f)
	}
	unknown := func(check string, err error, fix string) {
		add(finding{Check: check, Level: levelUnknown, Found: "could not be read: " + message(err), Fix: fix})
	}
	const configFix = "allow the user CONFIG GET (ACL +config|get), or check the setting in the server's configuration by hand"

	conf, err := c.ConfigGet(ctx, "*").Result()
	if err != nil {
		unknown("valkey.eviction", err, configFix)
		unknown("valkey.persistence", err, configFix)
	} else {
		add(valkeyEviction(conf))
		add(valkeyPersistence(conf))
	}

	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		unknown("valkey.replication", err, "allow the user INFO (ACL +info)")
		return fs
	}
	add(valkeyReplication(infoFields(info), wait, node != ""))
	return fs
}

// valkeyEviction judges maxmemory-policy, given maxmemory.
func valkeyEviction(conf map[string]string) finding {
	policy := conf["maxmemory-policy"]
	limit, _ := strconv.ParseInt(conf["maxmemory"], 10, 64)
	f := finding{Check: "valkey.eviction", Found: "maxmemory-policy " + escape.String(policy)}
	switch {
	case policy == "noeviction":
		f.Level = levelOK
		f.Found += ": a full server refuses writes and evicts nothing"
	case strings.HasPrefix(policy, "volatile-"):
		f.Level = levelOK
		f.Found += ": it evicts only keys with a time to live, and records have none"
	default:
		f.Consequence = "the server evicts records when it runs out of memory: a shard whose record is gone looks new, and a deposed writer's push lands as if it were the first"
		f.Fix = "CONFIG SET maxmemory-policy noeviction, and set it in the server's configuration file (or keep the records on a server of their own with noeviction)"
		if limit > 0 {
			f.Level = levelRisk
			f.Found += fmt.Sprintf(" with maxmemory %d", limit)
		} else {
			f.Level = levelWarn
			f.Found += " (maxmemory 0: no limit yet, so nothing is evicted until one is set)"
		}
	}
	return f
}

// valkeyPersistence judges appendonly, appendfsync and save.
func valkeyPersistence(conf map[string]string) finding {
	aof := conf["appendonly"] == "yes"
	fsync := conf["appendfsync"]
	save := strings.TrimSpace(conf["save"])
	f := finding{Check: "valkey.persistence"}
	const fix = "CONFIG SET appendonly yes and CONFIG SET appendfsync always (or everysec), then CONFIG REWRITE so a restart keeps them"
	switch {
	case !aof && save == "":
		f.Level, f.Found = levelRisk, "persistence is off: no append-only file and no RDB saves"
		f.Consequence = "a restart empties the server: every shard looks new, and a deposed writer's push lands as if it were the first"
		f.Fix = fix
	case !aof:
		f.Level, f.Found = levelRisk, fmt.Sprintf("RDB snapshots only (save %s), no append-only file", escape.String(save))
		f.Consequence = "a crash rolls every record back to the last snapshot: acknowledged pushes are lost and a deposed writer's epoch can land again"
		f.Fix = fix
	case fsync == "no":
		f.Level, f.Found = levelWarn, "append-only file with appendfsync no"
		f.Consequence = "a crash of the host loses the acknowledged writes the operating system had not yet written out (up to about 30 seconds)"
		f.Fix = "CONFIG SET appendfsync always (or everysec), then CONFIG REWRITE"
	default:
		f.Level, f.Found = levelOK, "append-only file with appendfsync "+escape.String(fsync)
		if fsync == "everysec" {
			f.Found += " (a crash of the host can lose the last second of writes)"
		}
	}
	return f
}

// valkeyReplication judges the replicas of a primary against wait.
func valkeyReplication(info map[string]string, wait int, cluster bool) finding {
	f := finding{Check: "valkey.replication"}
	if role := info["role"]; role != "master" {
		f.Level, f.Found = levelWarn, "the server is a replica (role "+escape.String(role)+")"
		f.Consequence = "it refuses writes: every push fails"
		f.Fix = "point the store address at the primary"
		return f
	}
	replicas, _ := strconv.Atoi(info["connected_slaves"])
	addr := "the store address"
	if cluster {
		addr = "the valkey+cluster:// address"
	}
	switch {
	case replicas > 0 && wait == 0:
		f.Level, f.Found = levelRisk, fmt.Sprintf("%s connected and the address has no wait=", plural(replicas, "replica"))
		f.Consequence = "the primary acknowledges a push before any replica has it: a failover to a replica that had not received it loses it, and two pushes of one epoch can both have returned success"
		f.Fix = fmt.Sprintf("add ?wait=%d (and &wait-timeout=D) to %s of every writer, so a push counts only once replicas hold it", replicas, addr)
	case wait > replicas:
		f.Level, f.Found = levelWarn, fmt.Sprintf("wait=%d but %s connected", wait, plural(replicas, "replica"))
		f.Consequence = "no write can reach wait= replicas: every push ends as an unknown outcome (exit 8) until enough replicas are online"
		f.Fix = fmt.Sprintf("bring the replicas online, or lower wait= to %d", replicas)
	case replicas == 0:
		f.Level, f.Found = levelOK, "no replicas: no failover can lose a push"
	default:
		f.Level, f.Found = levelOK, fmt.Sprintf("%s connected, and a push waits for %d of them (wait=%d)", plural(replicas, "replica"), wait, wait)
	}
	return f
}

// valkeySlots reports the shards whose primary has no replica online.
func valkeySlots(ctx context.Context, a *audit, cc *redis.ClusterClient) {
	const check = "valkey.cluster"
	shards, err := cc.ClusterShards(ctx).Result()
	if err != nil {
		a.unknown(check, err, "allow the user CLUSTER SHARDS (ACL +cluster|shards); it needs Valkey, or Redis 7 or later")
		return
	}
	var bare []string
	slots := 0
	for _, sh := range shards {
		if len(sh.Slots) == 0 {
			continue // a primary that serves no slot holds no record
		}
		slots += len(sh.Slots)
		primary, replicas := "", 0
		for _, n := range sh.Nodes {
			switch {
			case n.Role == "master":
				primary = net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			case n.Role == "replica" && n.Health == "online":
				replicas++
			}
		}
		if replicas > 0 {
			continue
		}
		var ranges []string
		for _, r := range sh.Slots {
			ranges = append(ranges, fmt.Sprintf("%d-%d", r.Start, r.End))
		}
		bare = append(bare, strings.Join(ranges, ",")+" ("+primary+")")
	}
	if len(bare) == 0 {
		a.ok(check, fmt.Sprintf("every one of the %s has a replica online", plural(slots, "slot range")))
		return
	}
	slices.Sort(bare)
	a.add(finding{Check: check, Level: levelWarn,
		Found:       "slots whose primary has no replica online: " + strings.Join(bare, ", "),
		Consequence: "if that primary's node is lost, its records are lost with it; if it is replaced by an empty node, its shards look new",
		Fix:         "add a replica to each of those primaries (valkey-cli --cluster add-node NEW_NODE ANY_NODE --cluster-slave --cluster-master-id ID)"})
}

// infoFields parses INFO output into its name:value fields.
func infoFields(info string) map[string]string {
	m := map[string]string{}
	for line := range strings.Lines(info) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok && !strings.HasPrefix(k, "#") {
			m[k] = v
		}
	}
	return m
}
