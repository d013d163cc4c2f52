// Package chunksync cuts a node's state into content-addressed chunks so
// that two copies of it (a region and its peer, a node and a backup
// directory) can be compared by hash and only the chunks that differ moved.
//
// # Mechanism
//
// The engine's states (engine.ExportAll) are sorted by id and cut into
// chunks. A chunk ends after the id whose xxhash has its low bits zero
// (on average Options.ChunkKeys ids per chunk) or when it reaches
// Options.MaxChunkKeys ids. Boundaries depend on ids only, so a changed
// value changes exactly one chunk, and an added or removed id changes one
// chunk (two when it is itself a boundary). Chunks are grouped the same
// way into ranges (a range ends after a chunk whose last id's hash has its
// high bits zero; on average Options.RangeChunks chunks per range).
//
// Everything is a blob addressed by the SHA-256 of its bytes: a chunk
// (encoded states), a range (the list of its chunks' refs) and the
// manifest (the list of the ranges' refs). Comparing two states is a
// two-level Merkle walk: fetch the manifest, skip every range whose hash
// the receiver already holds, fetch the others' chunk lists and then only
// the chunks the receiver lacks. Every fetched blob is checked against
// its hash before it is decoded.
//
// # Merge rule per kind
//
// A received chunk is applied with engine.Merge, whose rules are:
//
//   - pn, sharded, hll (CRDTs): joined — per-replica slot max (pn), newest
//     (Seq, Sum) slot per replica (sharded), register-wise max (hll).
//     Receiving the same chunk twice changes nothing.
//   - counter, hash, window: last writer by version — the state with the
//     higher Version replaces the local one whole; an equal or lower one
//     is ignored.
//   - a tombstone or an expired state deletes a local counter whose version
//     is not higher. Ids absent from the sender are not deleted on the
//     receiver: the engine keeps no tombstones, so absence is not news.
//
// Restoring into an empty node therefore reproduces every value exactly
// (sharded counters keep the sender's slots under the receiver's replica
// name, as a handoff does).
package chunksync
