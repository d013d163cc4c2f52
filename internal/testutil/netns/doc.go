// Package netns gives multi-process tests a private IPv4 network made of
// Linux network namespaces, so that a test can cut nodes off from each other
// while it still reaches every one of them.
//
// New makes one bridge in the root namespace with address 10.201.X.254/24
// (X is a /24 no interface uses yet) and, per node, a namespace joined to the
// bridge by a veth pair; node i (from 0) has address 10.201.X.(i+1). The test
// process talks to every node through the bridge. Command runs a program in
// a node's namespace (ip netns exec). Partition adds "prohibit" routes for
// the peers' /32 addresses inside the namespaces on both sides, so traffic
// between the two groups fails at once (EACCES) while traffic to and from
// the test process (the bridge address) still flows; Heal deletes them.
//
// Every name carries the test process's pid ("cn<pid base 36>_<n>..."): New
// first deletes what an earlier run left behind when that run's process is
// gone, and t.Cleanup deletes everything New made, even when the test fails.
// It needs Linux, root and iproute2's ip command. Without them New skips the
// test, or fails it when COUNTERD_REQUIRE_SERVICES=1 and running as root.
package netns
