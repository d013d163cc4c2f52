package tiered

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
)

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

// TestMayHaveRun: a command refused before it ran (no connection, an
// error reply) did not run; one whose reply was lost may have.
func TestMayHaveRun(t *testing.T) {
	dial := &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}
	read := &net.OpError{Op: "read", Err: syscall.ECONNRESET}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("x: %w", dial), false},
		{errors.New("CLUSTERDOWN The cluster is down"), false},
		{fmt.Errorf("x: %w", read), true},
		{fmt.Errorf("x: %w", io.EOF), true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{&net.OpError{Op: "read", Err: timeoutErr{}}, true},
	} {
		if got := mayHaveRun(c.err); got != c.want {
			t.Errorf("mayHaveRun(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

type timeoutErr struct{}

func (timeoutErr) Error() string   { return "i/o timeout" }
func (timeoutErr) Timeout() bool   { return true }
func (timeoutErr) Temporary() bool { return true }
