package node

import (
	"encoding/json"
	"fmt"
	"net/http"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/counterd/counterd/internal/cluster/membership"
	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/httpjson"
)

// Forgetting a member (counterctl cluster forget, POST /cluster/forget)
// retires its node id for good, so that a cluster that lost nodes
// permanently can serve owner writes again and be rebuilt from its
// survivors:
//
//   - it leaves the member list, so it no longer counts toward the majority
//     (a dead member does; see checkMajority), and it is off the ring (a
//     dead one already is: its ids were taken over by their replicas);
//   - the retirement spreads through gossip (membership/forget.go) to every
//     member and every member that joins later, and a member never reports
//     that id again, whatever stale gossip says;
//   - a node that comes back under a forgotten id is refused: no member puts
//     it on its ring, its peer calls are refused, and it learns on its first
//     gossip exchange that it was forgotten and then serves nothing (every
//     operation and /readyz answer unavailable). Its data is therefore never
//     merged back: the acknowledged values live on the survivors, and its
//     stale versions could otherwise replace newer ones. To reuse the
//     machine, wipe its data directory and start it under a new --node-id
//     (a pn slot is named by the node id, so an old id with empty data would
//     restart its slot below what the survivors hold).

var (
	// ErrForgetSelf: a node cannot forget itself; ask another member.
	ErrForgetSelf = fmt.Errorf("%w: a node cannot forget itself; send the request to another member", contract.ErrInvalidArgument)
	// ErrForgetUnknown: the id is not a member this node knows.
	ErrForgetUnknown = fmt.Errorf("%w: no such cluster member", contract.ErrInvalidArgument)
	// ErrForgetAlive: the member is alive; stop it first, or force.
	ErrForgetAlive = fmt.Errorf("%w: the member is alive; stop it first (forget is for nodes that are gone for good) or force it", contract.ErrInvalidArgument)

	errForgotten = fmt.Errorf("%w: this node was forgotten by the cluster; restart it with an empty data directory under a new --node-id", contract.ErrUnavailable)
)

// Forget retires member id cluster-wide (see above). A member this node
// sees alive is refused with ErrForgetAlive unless force is set: a forced
// live member stops serving once it hears of it. Forgetting an id again is
// a no-op. Safe for concurrent use.
func (n *Node) Forget(id string, force bool) error {
	m := n.members.Load()
	if m == nil {
		return errNotJoined
	}
	if id == n.self {
		return ErrForgetSelf
	}
	if m.IsForgotten(id) {
		return nil
	}
	var found *membership.Member
	for _, mem := range m.Members() {
		if mem.ID == id {
			found = &mem
			break
		}
	}
	switch {
	case found == nil:
		return fmt.Errorf("%w: %q", ErrForgetUnknown, id)
	case found.State == membership.StateAlive && !force:
		return fmt.Errorf("%w: %q", ErrForgetAlive, id)
	}
	if err := m.Forget(id); err != nil {
		return fmt.Errorf("cluster: forget %q: %w", id, err)
	}
	n.refresh()
	n.log.Warn("cluster member forgotten", "member", id, "was", found.State.String(), "force", force)
	return nil
}

// retired fails once the cluster forgot this node.
func (n *Node) retired() error {
	if m := n.members.Load(); m != nil && m.SelfForgotten() {
		return errForgotten
	}
	return nil
}

// refusePeer fails a peer call from a forgotten node, or to this node once
// it was forgotten: a retired node's stale state must not flow back.
func (n *Node) refusePeer(from string) error {
	m := n.members.Load()
	if m == nil {
		return nil
	}
	if m.IsForgotten(from) {
		return status.Errorf(codes.PermissionDenied, "cluster: node %q was forgotten by the cluster", from)
	}
	if m.SelfForgotten() {
		return status.Error(codes.Unavailable, errForgotten.Error())
	}
	return nil
}

// sender is the node a peer request comes from.
func (h *header) sender() string { return h.From }

// forgetRequest is the body of POST /cluster/forget.
type forgetRequest struct {
	Node  string `json:"node"`
	Force bool   `json:"force"`
}

// maxForgetBody bounds the body of POST /cluster/forget.
const maxForgetBody = 4 << 10

// serveForget is POST /cluster/forget: {"node": ID, "force": false}. It
// answers the cluster status after the change.
func (n *Node) serveForget(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		httpjson.WriteError(w, fmt.Errorf("%w: %s %s", httpjson.ErrMethodNotAllowed, r.Method, r.URL.Path))
		return
	}
	var req forgetRequest
	b, err := httpjson.ReadBody(w, r, maxForgetBody)
	if err == nil {
		err = httpjson.DecodeStrict(b, &req)
	}
	if err != nil {
		httpjson.WriteError(w, fmt.Errorf("body must be {\"node\": ID, \"force\": false}: %w", err))
		return
	}
	if req.Node == "" {
		httpjson.WriteError(w, fmt.Errorf("%w: \"node\" is required", contract.ErrInvalidArgument))
		return
	}
	if err := n.Forget(req.Node, req.Force); err != nil {
		httpjson.WriteError(w, err)
		return
	}
	st := n.Status()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(st)
}
