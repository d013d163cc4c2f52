package tiered

import (
	"strconv"
	"strings"
	"sync"
)

// Redis Cluster's key slots (CRC16/XMODEM of the key's hash tag, or of
// the key, mod 16384), as Redis computes them; a single Redis has them
// too here, as a partition of the idempotency markers.
const slots = 16384

// keySlot is the slot of key: of its hash tag (the bytes between its
// first '{' and the next '}', when not empty), else of the whole key.
func keySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % slots)
}

func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

var (
	tagsOnce sync.Once
	tags     []string // tags[slot]: a short string hashing to slot
)

// slotTag is a hash tag of slot: the first base-36 number hashing to it
// (all 16384 are found among the first ~200k numbers, once).
func slotTag(slot int) string {
	tagsOnce.Do(func() {
		tags = make([]string, slots)
		left := slots
		for n := uint64(0); left > 0; n++ {
			t := strconv.FormatUint(n, 36)
			if s := crc16(t) % slots; tags[s] == "" {
				tags[s] = t
				left--
			}
		}
	})
	return tags[slot]
}
