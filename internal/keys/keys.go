// Package keys owns Redis key naming rules: the cluster hash slot of a key (with
// {hash tags}) and the same-slot check that every multi-key move relies on.
package keys

import (
	"fmt"
	"strings"
)

// SlotCount is the number of hash slots in a Redis Cluster.
const SlotCount = 16384

// Slot returns the Redis Cluster hash slot of key: CRC16 (XMODEM) of the key, or of
// the part between the first '{' and the next '}' when that part is not empty.
func Slot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % SlotCount)
}

// SameSlot returns an error naming the keys when they do not all hash to one slot.
func SameSlot(keys ...string) error {
	if len(keys) < 2 {
		return nil
	}
	first := Slot(keys[0])
	for _, k := range keys[1:] {
		if Slot(k) != first {
			parts := make([]string, len(keys))
			for i, k := range keys {
				parts[i] = fmt.Sprintf("%q (slot %d)", k, Slot(k))
			}
			return fmt.Errorf("keys %s hash to different cluster slots; give them one {hash tag}, e.g. {%s}:in and {%s}:dlq",
				strings.Join(parts, ", "), tagHint(keys[0]), tagHint(keys[0]))
		}
	}
	return nil
}

func tagHint(key string) string {
	if i := strings.IndexAny(key, ".:{"); i > 0 {
		return key[:i]
	}
	return key
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, init 0), the checksum Redis Cluster uses.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
