package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Scope of a read across regions (docs/operations.md, "Regions").
type Scope string

const (
	// ScopeLocal and ScopeRegion read this region's value (what Get
	// reads).
	ScopeLocal  Scope = "local"
	ScopeRegion Scope = "region"
	// ScopeGlobal adds the last state received from every peer region.
	ScopeGlobal Scope = "global"
)

// RegionValue is one region's part of a global read.
type RegionValue struct {
	Region string      `json:"region"`
	Local  bool        `json:"local"` // the region that answered
	Kind   string      `json:"kind"`
	Exists bool        `json:"exists"`
	Value  json.Number `json:"value"` // integer, or decimal for a float counter
	// AsOf: every change of the region before it is included; nil when
	// nothing was received from it yet. Staleness is time.Since(*AsOf).
	AsOf *time.Time `json:"as_of"`
}

// GlobalCounter is a counter read with ScopeGlobal: Value combines the
// regions (sum; register max for an hll; Fields add for a hash).
type GlobalCounter struct {
	ID       string           `json:"id"`
	Scope    string           `json:"scope"`
	Kind     string           `json:"kind"`
	Exists   bool             `json:"exists"`
	Value    json.Number      `json:"value"` // integer, or decimal for a float counter
	Fields   map[string]int64 `json:"fields"`
	StdError *float64         `json:"std_error"`
	Regions  []RegionValue    `json:"regions"`
}

// GetGlobal reads id in every region the server's region knows
// (GET /counters/{id}?scope=global). A server without --peer-regions
// answers ErrInvalidArgument.
func (c *Client) GetGlobal(ctx context.Context, id string) (GlobalCounter, error) {
	if err := checkID(id); err != nil {
		return GlobalCounter{}, err
	}
	var g GlobalCounter
	_, err := c.do(ctx, &request{method: http.MethodGet, path: counterPath(id), query: url.Values{"scope": {string(ScopeGlobal)}}}, &g)
	return g, err
}

// GetScope reads id with scope: ScopeLocal and ScopeRegion are Get;
// ScopeGlobal is GetGlobal's Value with Kind and Exists.
func (c *Client) GetScope(ctx context.Context, id string, scope Scope) (Counter, error) {
	switch scope {
	case "", ScopeLocal, ScopeRegion:
		return c.Get(ctx, id)
	case ScopeGlobal:
		g, err := c.GetGlobal(ctx, id)
		if err != nil {
			return Counter{}, err
		}
		out := Counter{ID: id, Kind: Kind(g.Kind), Exists: g.Exists}
		if out.Value, err = g.Value.Int64(); err != nil {
			out.Value, out.Float = 0, g.Value.String()
		}
		return out, nil
	}
	return Counter{}, fmt.Errorf("%w: scope %q is not local, region or global", ErrInvalidArgument, scope)
}
