package client

import (
	"context"
	"net/http"
)

// SnapshotManifest cuts the node's state into content-addressed chunks and
// returns the manifest blob (GET /admin/snapshot/manifest, admin
// permission on every namespace); the blobs it names stay fetchable with
// SnapshotBlob until two more manifests were cut. The blob format is internal/chunksync's.
func (c *Client) SnapshotManifest(ctx context.Context) ([]byte, error) {
	var b []byte
	_, err := c.do(ctx, &request{method: http.MethodGet, path: "/admin/snapshot/manifest"}, &b)
	return b, err
}

// SnapshotBlob returns a blob (range or chunk) of the last two manifests by its
// hash, 64 lower-case hex digits (GET /admin/snapshot/blobs/{hash}).
func (c *Client) SnapshotBlob(ctx context.Context, hash string) ([]byte, error) {
	var b []byte
	_, err := c.do(ctx, &request{method: http.MethodGet, path: "/admin/snapshot/blobs/" + hash}, &b)
	return b, err
}

// RestoreResult is the answer of RestoreChunk.
type RestoreResult struct {
	States  int `json:"states"`  // counters in the chunk
	Changed int `json:"changed"` // counters whose local state changed
}

// RestoreChunk merges a chunk blob into the node (POST
// /admin/snapshot/chunks, admin permission on every namespace), durable
// before the answer. Merging is idempotent, so a retry is safe.
func (c *Client) RestoreChunk(ctx context.Context, chunk []byte) (RestoreResult, error) {
	var res RestoreResult
	_, err := c.do(ctx, &request{method: http.MethodPost, path: "/admin/snapshot/chunks", body: chunk}, &res)
	return res, err
}
