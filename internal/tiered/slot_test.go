package tiered

import "testing"

// TestKeySlot: slots as Redis computes them (the values of the Redis
// Cluster specification), and every slot's marker tag hashes to it.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{"123456789": 0x31c3, "foo": 12182, "{foo}bar": 12182, "a{}b": keySlotRaw("a{}b"), "{}{foo}": keySlotRaw("{}{foo}")} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
	for s := range slots {
		if got := keySlot("{" + slotTag(s) + "}"); got != s {
			t.Fatalf("tag %q of slot %d hashes to %d", slotTag(s), s, got)
		}
	}
	for _, k := range []string{idemPrefix + "a", idemPrefix + "{user1}x", idemPrefix + "b{}"} {
		if keySlot(markKey(k)) != keySlot(k) {
			t.Errorf("marker of %q in slot %d, key in %d", k, keySlot(markKey(k)), keySlot(k))
		}
	}
}

// keySlotRaw is the slot of the whole key (no hash tag applies).
func keySlotRaw(key string) int { return int(crc16(key) % slots) }
