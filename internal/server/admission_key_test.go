package server

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/counterd/counterd/internal/auth"
	"github.com/counterd/counterd/internal/shed"
)

// frameHead frames a GET with the given extra header lines.
func frameHead(t *testing.T, lines ...string) framed {
	t.Helper()
	req := "GET /counters/x HTTP/1.1\r\nHost: x\r\n" + strings.Join(lines, "") + "\r\n"
	f, ok := frameRequest([]byte(req))
	if !ok {
		t.Fatalf("not framed: %q", req)
	}
	return f
}

// TestForwardedFor: the client is the rightmost address that is not a
// trusted proxy, across lines; X-Forwarded-For wins over Forwarded; an
// unparsable entry on the way (obfuscated, "unknown") means no client.
func TestForwardedFor(t *testing.T) {
	trusted, err := parseTrustedProxies("10.0.0.0/8, 2001:db8::/32, 192.0.2.7")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		lines []string
		want  string // "" : not found
	}{
		{[]string{"X-Forwarded-For: 198.51.100.1\r\n"}, "198.51.100.1"},
		{[]string{"X-Forwarded-For: 203.0.113.9, 198.51.100.1, 10.1.2.3\r\n"}, "198.51.100.1"},
		{[]string{"X-Forwarded-For: 203.0.113.9\r\n", "x-forwarded-for: 198.51.100.1,10.0.0.1\r\n"}, "198.51.100.1"},
		{[]string{"X-Forwarded-For: 10.0.0.2, 192.0.2.7\r\n"}, "10.0.0.2"}, // all trusted: the leftmost
		{[]string{"X-Forwarded-For: 198.51.100.1:4711\r\n"}, "198.51.100.1"},
		{[]string{"X-Forwarded-For: [2001:db9::1]:80, 2001:db8::5\r\n"}, "2001:db9::1"},
		{[]string{"X-Forwarded-For: 198.51.100.1, unknown\r\n"}, ""},
		{[]string{"Forwarded: for=198.51.100.1;proto=http, for=\"[2001:db8::2]:1\"\r\n"}, "198.51.100.1"},
		{[]string{"Forwarded: for=_hidden, for=10.0.0.1\r\n"}, ""},
		{[]string{"Forwarded: proto=http\r\n"}, ""},
		{[]string{"Forwarded: for=203.0.113.1\r\n", "X-Forwarded-For: 198.51.100.1\r\n"}, "198.51.100.1"},
		{nil, ""},
	} {
		f := frameHead(t, tc.lines...)
		ip, ok := forwardedFor(&f, trusted)
		got := ""
		if ok {
			got = ip.String()
		}
		if got != tc.want {
			t.Errorf("%q: client %q, want %q", tc.lines, got, tc.want)
		}
	}
}

// TestForwardedForModel (rapid): for any chain of addresses, split over
// any number of X-Forwarded-For lines (at most maxForwardLines kept) with
// any spacing, the client found is the rightmost address outside the
// trusted prefixes, or the leftmost kept one when every one is trusted.
func TestForwardedForModel(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 12).Draw(t, "n")
		var addrs []netip.Addr
		for i := range n {
			first := byte(rapid.SampledFrom([]int{10, 198}).Draw(t, fmt.Sprint("net", i)))
			addrs = append(addrs, netip.AddrFrom4([4]byte{first, 0, 0, byte(rapid.IntRange(1, 254).Draw(t, fmt.Sprint("host", i)))}))
		}
		// split into lines
		var lines []string
		var sizes []int
		for i := 0; i < n; {
			k := rapid.IntRange(1, n-i).Draw(t, "per-line")
			var parts []string
			for _, a := range addrs[i : i+k] {
				parts = append(parts, a.String())
			}
			lines = append(lines, "X-Forwarded-For:"+strings.Repeat(" ", rapid.IntRange(0, 2).Draw(t, "sp"))+strings.Join(parts, rapid.SampledFrom([]string{",", ", ", " , "}).Draw(t, "sep"))+"\r\n")
			sizes = append(sizes, k)
			i += k
		}
		// the model: only the last maxForwardLines lines are kept
		kept := addrs
		if len(lines) > maxForwardLines {
			dropped := 0
			for _, k := range sizes[:len(lines)-maxForwardLines] {
				dropped += k
			}
			kept = addrs[dropped:]
		}
		want := kept[0]
		for i := len(kept) - 1; i >= 0; i-- {
			if !trusted[0].Contains(kept[i]) {
				want = kept[i]
				break
			}
		}
		req := "GET / HTTP/1.1\r\nHost: x\r\n" + strings.Join(lines, "") + "\r\n"
		f, ok := frameRequest([]byte(req))
		if !ok {
			t.Fatalf("not framed: %q", req)
		}
		got, ok := forwardedFor(&f, trusted)
		if !ok || got != want {
			t.Fatalf("%q: client %v (%v), want %v", lines, got, ok, want)
		}
	})
}

// FuzzForwardedFor: any header values: no panic, and a client found is
// a valid address (an IPv4 one written in them).
func FuzzForwardedFor(f *testing.F) {
	f.Add("198.51.100.1, 10.0.0.1", "for=192.0.2.1")
	f.Add("", `for="[2001:db8::1]:80";proto=https, for=unknown`)
	f.Add("[::1]", "for=")
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}
	f.Fuzz(func(t *testing.T, xff, fwd string) {
		if strings.ContainsAny(xff+fwd, "\r\n") {
			return
		}
		var fr framed
		if xff != "" {
			keep(&fr.xff, &fr.nxff, []byte(xff))
		}
		if fwd != "" {
			keep(&fr.fwd, &fr.nfw, []byte(fwd))
		}
		ip, ok := forwardedFor(&fr, trusted)
		if ok && !ip.IsValid() {
			t.Fatal("found an invalid address")
		}
		if ok && ip.Is4() && !strings.Contains(xff+fwd, ip.String()) {
			t.Fatalf("client %s is not in %q / %q", ip, xff, fwd)
		}
	})
}

// TestRequestKey: a valid bearer token keys the request by its user
// (from any address, proxied or not); a wrong one counts as none; a
// trusted proxy's forwarded address keys it next; else the peer address.
func TestRequestKey(t *testing.T) {
	tok := "0123456789abcdef0123456789abcdef"
	table, err := auth.Parse(strings.NewReader(fmt.Sprintf("users:\n  ingest:\n    tokens: [%s]\n    grants: {\"*\": write}\n", auth.Hash([]byte(tok)))))
	if err != nil {
		t.Fatal(err)
	}
	store := auth.NewStore(table)
	trusted, _ := parseTrustedProxies("127.0.0.1")
	peer := netip.MustParseAddr("127.0.0.1")
	a := &admission{auth: store, trusted: trusted}
	for _, tc := range []struct {
		lines   []string
		proxied bool
		want    shed.Key
	}{
		{[]string{"Authorization: Bearer " + tok + "\r\n"}, false, shed.UserKey("ingest")},
		{[]string{"authorization: bearer  " + tok + " \r\n", "X-Forwarded-For: 198.51.100.1\r\n"}, true, shed.UserKey("ingest")},
		{[]string{"Authorization: Bearer wrong" + tok + "\r\n"}, false, shed.ClientKey(peer)},
		{[]string{"Authorization: Bearer wrong" + tok + "\r\n", "X-Forwarded-For: 198.51.100.1\r\n"}, true, shed.ClientKey(netip.MustParseAddr("198.51.100.1"))},
		{[]string{"X-Forwarded-For: 198.51.100.1\r\n"}, false, shed.ClientKey(peer)}, // not from a trusted proxy
		{[]string{"X-Forwarded-For: unknown\r\n"}, true, shed.ClientKey(peer)},
	} {
		c := &admitConn{a: a, key: shed.ClientKey(peer), proxied: tc.proxied}
		f := frameHead(t, tc.lines...)
		if got := c.requestKey(&f); got != tc.want {
			t.Errorf("%q (proxied %v): key %v, want %v", tc.lines, tc.proxied, got, tc.want)
		}
	}
	// Without --auth a token names nobody.
	c := &admitConn{a: &admission{}, key: shed.ClientKey(peer)}
	f := frameHead(t, "Authorization: Bearer "+tok+"\r\n")
	if got := c.requestKey(&f); got != shed.ClientKey(peer) {
		t.Errorf("without --auth: key %v, want the peer address", got)
	}
}
