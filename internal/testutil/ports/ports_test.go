package ports

import (
	"net"
	"strconv"
	"testing"
)

func TestFreeBelowEphemeralRangeAndDistinct(t *testing.T) {
	ps, err := Free(20)
	if err != nil {
		t.Fatal(err)
	}
	low := ephemeralLow()
	seen := map[int]bool{}
	for _, p := range ps {
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if low-lowest >= 2000 && (p < lowest || p >= low) {
			t.Errorf("port %d outside [%d, %d)", p, lowest, low)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			t.Fatalf("port %d not free: %v", p, err)
		}
		ln.Close()
	}
	if Claim(ps[0]) {
		t.Errorf("Claim(%d) of a port handed out succeeded", ps[0])
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if Claim(ln.Addr().(*net.TCPAddr).Port) {
		t.Error("Claim of a bound port succeeded")
	}
}
