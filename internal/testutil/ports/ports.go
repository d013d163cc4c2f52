// Package ports hands out loopback ports for servers that tests start in
// other processes (counterd nodes, redis-server, postgres).
//
// Asking the kernel for port 0 and closing the listener races with every
// other process on the machine: the kernel hands the same ephemeral port to
// the next connect or bind before the child process binds it. Ports here
// come from below the kernel's ephemeral range instead, so only another
// explicit binder can take them, and each is checked free for TCP and UDP
// (gossip uses both) and handed out at most once per process.
package ports

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

const lowest = 10000

var (
	mu   sync.Mutex
	used = map[int]bool{}
)

// Free returns n distinct ports free on 127.0.0.1 for TCP and UDP. Ports p
// with p+10000 also below the ephemeral range are preferred, which Redis
// Cluster needs for its bus port; the search starts at a random place so
// parallel test binaries rarely try the same ports.
func Free(n int) ([]int, error) {
	mu.Lock()
	defer mu.Unlock()
	hi := ephemeralLow()
	if hi-lowest < 2000 { // no room below the ephemeral range: fall back to the kernel
		return kernelPorts(n)
	}
	span := hi - lowest
	if span > 10000 {
		span = 10000 // leave p+10000 below hi too
	}
	var out []int
	start := rand.IntN(span)
	for i := 0; i < span && len(out) < n; i++ {
		p := lowest + (start+i*7919)%span // a stride coprime with most spans
		if used[p] || !free(p) {
			continue
		}
		used[p] = true
		out = append(out, p)
	}
	if len(out) < n {
		return nil, errors.New("ports: no free loopback ports below the ephemeral range")
	}
	return out, nil
}

// One returns one free port.
func One() (int, error) {
	p, err := Free(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

func free(p int) bool {
	addr := "127.0.0.1:" + strconv.Itoa(p)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	defer ln.Close()
	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		return false
	}
	pc.Close()
	return true
}

// ephemeralLow reads the low end of the kernel's ephemeral port range.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) < 1 {
		return 32768
	}
	v, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return v
}

func kernelPorts(n int) ([]int, error) {
	var out []int
	for len(out) < n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		p := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		if !used[p] {
			used[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// Claim marks the given ports handed out if every one of them is free and
// none was handed out before, for callers that need ports in a fixed
// pattern (such as base+offset); it reports whether it did.
func Claim(ps ...int) bool {
	mu.Lock()
	defer mu.Unlock()
	for _, p := range ps {
		if used[p] || !free(p) {
			return false
		}
	}
	for _, p := range ps {
		used[p] = true
	}
	return true
}
