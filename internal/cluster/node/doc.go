// Package node is a counterd peer-cluster member: the contract.Backend that
// the HTTP and RESP front ends serve in cluster mode (--join).
//
// Membership is gossip (internal/cluster/membership); the alive members form
// a consistent-hash ring (internal/cluster/ring, 100 vnodes, R replicas per
// id). An operation on an id runs on the id's owner: a node that does not
// own it forwards it there in one gRPC hop (protobuf messages of
// api/counterd/cluster/v1/peer.proto, converted in wire.go), and a node
// that receives a forwarded request it does not own answers ErrWrongOwner
// instead of forwarding again.
//
// The owner replicates the resulting state (engine.State) to the other
// replicas: at once to a write quorum for sync writes, in 100 ms batches
// otherwise. Unkeyed adds to pn and sharded counters are applied by any node
// into its own slot and pushed as delta states. Before serving its first
// op on an id after a ring change, an owner pulls the id from the other
// replicas (the takeover fence). After each ring change, states move to
// their new replicas (handoff); anti-entropy repairs what pushes missed.
// Aggregate, Len and Scan fan out to every node, each counting the ids it
// owns. docs/cluster.md describes the guarantees and their limits.
package node
