package keys

import (
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// A partitioned stream named name (settle.PartitionedStream) is N streams, each in a
// hash slot of its own so that a Redis Cluster spreads them over its masters:
//
//	name                     the meta key: a hash {partitions: N, hash: "fnv1a32"}; it is
//	                         not a stream, so a plain XADD to name fails (WRONGTYPE)
//	{name:i}                 partition i's stream (0 <= i < N)
//	{name:i}:<key>           partition i's delay set (DurableZset{Key: key}), dead
//	                         letters (DeadLetter(key)) and reply stream (ReplyTo(key))
//	{name:i}:lease:<group>   the group's lease on partition i: owner, token, until
//	{name}:members:<group>   the group's live members, scored by heartbeat expiry (ms)
//
// A message with key k goes to partition PartitionFor(k, N): FNV-1a 32-bit of k's bytes,
// mod N.

// PartitionHashName names the hash PartitionFor uses, as the meta key records it.
const PartitionHashName = "fnv1a32"

// Partition returns the stream of partition i of the partitioned stream name.
func Partition(name string, i int) string {
	return "{" + name + ":" + strconv.Itoa(i) + "}"
}

// PartitionIndex returns the index i of a partition's stream key, Partition(name, i),
// and whether key has that shape ("{<name>:<digits>}", name holding no brace). A plain
// stream whose own key has that shape reads as one too.
func PartitionIndex(key string) (int, bool) {
	if len(key) < 5 || key[0] != '{' || key[len(key)-1] != '}' {
		return 0, false
	}
	inner := key[1 : len(key)-1]
	colon := strings.LastIndexByte(inner, ':')
	if colon < 1 || strings.ContainsAny(inner, "{}") {
		return 0, false
	}
	digits := inner[colon+1:]
	if digits == "" || strings.TrimLeft(digits, "0123456789") != "" {
		return 0, false
	}
	i, err := strconv.Atoi(digits)
	return i, err == nil
}

// InPartition returns key placed in partition i's hash slot: a delay set, a dead-letter
// or reply stream of that partition.
func InPartition(name string, i int, key string) string {
	return Partition(name, i) + ":" + key
}

// PartitionLease returns group's lease key on partition i.
func PartitionLease(name string, i int, group string) string {
	return InPartition(name, i, "lease:"+group)
}

// PartitionMembers returns the key of group's live members.
func PartitionMembers(name, group string) string {
	return "{" + name + "}:members:" + group
}

// PartitionHash is the FNV-1a 32-bit hash of key's bytes (offset basis 2166136261, prime
// 16777619): any language computes it in a few lines.
func PartitionHash(key string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return h.Sum32()
}

// PartitionFor returns the partition of a message with key among n partitions:
// PartitionHash(key) mod n.
func PartitionFor(key string, n int) int {
	return int(PartitionHash(key) % uint32(n))
}

// CheckPartitionName refuses a partitioned stream's name the partition keys cannot be
// made from: an empty one, or one holding a brace (each partition's {hash tag} is made
// from the name).
func CheckPartitionName(name string) error {
	if name == "" {
		return errors.New("partitioned stream: name is empty")
	}
	if strings.ContainsAny(name, "{}") {
		return fmt.Errorf("partitioned stream %q: the name must not hold braces: each partition's {hash tag} is made from it ({%s:0}, …)", name, strings.NewReplacer("{", "", "}", "").Replace(name))
	}
	return nil
}
