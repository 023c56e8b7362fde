// Package keys owns Redis key naming rules: the cluster hash slot of a key (with
// {hash tags}) and the same-slot check that every multi-key move relies on.
package keys

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
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

// SameSlot returns an error when some of keys do not hash to the slot of the first:
// it names only those, each with its slot and, where one can be made, a name in the
// first key's slot (its {hash tag} put on the key's name).
func SameSlot(keys ...string) error {
	if len(keys) < 2 {
		return nil
	}
	first := Slot(keys[0])
	var outside, hints []string
	for _, k := range keys[1:] {
		if Slot(k) == first || slices.Contains(outside, fmt.Sprintf("%q (slot %d)", k, Slot(k))) {
			continue
		}
		outside = append(outside, fmt.Sprintf("%q (slot %d)", k, Slot(k)))
		if h := tagged(keys[0], k); h != "" {
			hints = append(hints, h)
		}
	}
	if len(outside) == 0 {
		return nil
	}
	err := fmt.Sprintf("%s hash to another cluster slot than %q (slot %d)", strings.Join(outside, ", "), keys[0], first)
	if len(hints) > 0 {
		err += "; give them its {hash tag}, e.g. " + strings.Join(hints, ", ")
	}
	return errors.New(err)
}

// tagged returns key renamed into anchor's slot: anchor's hash tag (the whole of anchor
// when it has none) in braces, then key without braces of its own, less the tag where
// key starts with it ("{orders}:in", "orders:dlq" -> "{orders}:dlq"); "" when that name
// would not hash to anchor's slot (a tag holding braces).
func tagged(anchor, key string) string {
	tag := anchor
	if s := strings.IndexByte(anchor, '{'); s >= 0 {
		if e := strings.IndexByte(anchor[s+1:], '}'); e > 0 {
			tag = anchor[s+1 : s+1+e]
		}
	}
	name := strings.NewReplacer("{", "", "}", "").Replace(key)
	var out string
	if rest, ok := strings.CutPrefix(name, tag); ok && rest != "" {
		out = "{" + tag + "}" + rest
	} else {
		out = "{" + tag + "}:" + name
	}
	if Slot(out) != Slot(anchor) {
		return ""
	}
	return strconv.Quote(out)
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
