package client

import (
	"context"
	"net/http"
)

// ClusterStatus is a cluster node's view of its cluster (GET /cluster).
type ClusterStatus struct {
	Self              string          `json:"self"`
	RingVersion       uint64          `json:"ring_version"`
	VNodes            int             `json:"vnodes"`
	ReplicationFactor int             `json:"replication_factor"`
	Members           []ClusterMember `json:"members"`
	Forgotten         []string        `json:"forgotten,omitempty"` // retired node ids
}

// ClusterMember is one member in ClusterStatus.
type ClusterMember struct {
	ID        string  `json:"id"`
	State     string  `json:"state"` // alive, dead or left
	Gossip    string  `json:"gossip,omitempty"`
	HTTP      string  `json:"http"`
	RESP      string  `json:"resp,omitempty"`
	GRPC      string  `json:"grpc,omitempty"`
	Ownership float64 `json:"ownership"` // share of the ring
}

// ClusterStatus returns the cluster as the node at the client's address
// sees it.
func (c *Client) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	var st ClusterStatus
	if _, err := c.do(ctx, &request{method: http.MethodGet, path: "/cluster"}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// ForgetMember retires a cluster member that is gone for good (POST
// /cluster/forget, admin permission): it no longer counts toward the
// majority and its node id is never admitted again. A member the node
// sees alive is refused unless force is set. It returns the status after
// the change.
func (c *Client) ForgetMember(ctx context.Context, node string, force bool) (*ClusterStatus, error) {
	body := struct {
		Node  string `json:"node"`
		Force bool   `json:"force"`
	}{node, force}
	var st ClusterStatus
	if _, err := c.do(ctx, &request{method: http.MethodPost, path: "/cluster/forget", body: body}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}
