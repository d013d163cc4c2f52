package region

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/counterd/counterd/internal/contract"
	"github.com/counterd/counterd/internal/counter"
	"github.com/counterd/counterd/internal/engine"
)

// Scopes of a read: local and region read this region's value (in a
// region of one embedded node they are the same); global adds the last
// state received from every peer region.
const (
	ScopeLocal  = "local"
	ScopeRegion = "region"
	ScopeGlobal = "global"
)

// ParseScope parses a scope; "" is local.
func ParseScope(s string) (string, error) {
	switch s {
	case "", ScopeLocal:
		return ScopeLocal, nil
	case ScopeRegion, ScopeGlobal:
		return s, nil
	}
	return "", fmt.Errorf("%w: scope must be local, region or global, not %q", contract.ErrInvalidArgument, s)
}

// RegionValue is one region's part of a global read.
type RegionValue struct {
	Region string `json:"region"`
	Local  bool   `json:"local,omitempty"` // this region
	Kind   string `json:"kind"`
	Exists bool   `json:"exists"`
	Value  any    `json:"value"` // int64; float64 for a float counter
	// AsOf: every change the region made before it is included (this
	// region: now; a peer: the as-of of its last complete push, null
	// before the first one). now - as_of is the staleness.
	AsOf *time.Time `json:"as_of"`
}

// GlobalView is the answer to a global read of a counter.
type GlobalView struct {
	ID     string `json:"id"`
	Scope  string `json:"scope"`
	Kind   string `json:"kind"`
	Exists bool   `json:"exists"`
	// Value combines the regions by the counter's cross-region rule:
	// counter, pn, sharded, window and float values add (each region's
	// own slots, so nothing is counted twice); an hll is the register max
	// of the regions' sketches; a hash adds field by field (Fields).
	Value    any              `json:"value"`
	Fields   map[string]int64 `json:"fields,omitempty"`
	StdError *float64         `json:"std_error,omitempty"`
	Regions  []RegionValue    `json:"regions"`
}

// regionStates lists this region's engine and each peer copy, this one
// first, then the peers by name.
func (r *Replicator) regionStates() (names []string, engs []*engine.Engine) {
	names, engs = []string{r.cfg.Name}, []*engine.Engine{r.local}
	for _, n := range r.peerNames() {
		names, engs = append(names, n), append(engs, r.remote[n])
	}
	return names, engs
}

// get reads id in the i-th region state: this region's (i == 0; in a
// cluster region, the cluster's value, from the id's owner) or a copy.
func (r *Replicator) get(ctx context.Context, i int, eng *engine.Engine, id string) (contract.View, error) {
	if i == 0 && r.cfg.Cluster != nil {
		return r.cfg.Cluster.Region.Get(ctx, id)
	}
	if i == 0 && r.cfg.Durable != nil {
		return r.cfg.Durable.Region.Get(ctx, id)
	}
	return eng.Get(id)
}

// export reads id's state in the i-th region state, as get does.
func (r *Replicator) export(ctx context.Context, i int, eng *engine.Engine, id string) (engine.State, bool, error) {
	if i == 0 && r.cfg.Cluster != nil && r.cfg.Cluster.Export != nil {
		return r.cfg.Cluster.Export(ctx, id)
	}
	if i == 0 && r.cfg.Durable != nil {
		return r.cfg.Durable.Export(ctx, id)
	}
	return eng.Export(id)
}

// Global reads id in every region and combines the values. An hll's
// union takes this region's sketch from the id's owner in a cluster
// region (Cluster.Export), else from this node's engine.
func (r *Replicator) Global(ctx context.Context, id string) (GlobalView, error) {
	if err := contract.ValidateID(id); err != nil {
		return GlobalView{}, err
	}
	gv := GlobalView{ID: id, Scope: ScopeGlobal, Kind: contract.KindNone.String(), Value: int64(0)}
	names, engs := r.regionStates()
	now := time.Now().UTC()
	var sum int64
	var fsum float64
	isFloat := false
	var hll *counter.HLL
	for i, eng := range engs {
		v, err := r.get(ctx, i, eng, id)
		if err != nil {
			return GlobalView{}, err
		}
		rv := RegionValue{Region: names[i], Local: i == 0, Kind: v.Kind.String(), Exists: v.Exists, Value: v.Value}
		if i == 0 {
			rv.AsOf = &now
		} else if asOf := r.asOf(names[i]); !asOf.IsZero() {
			rv.AsOf = &asOf
		}
		if !v.Exists {
			rv.Kind, rv.Value = contract.KindNone.String(), int64(0)
			gv.Regions = append(gv.Regions, rv)
			continue
		}
		if !gv.Exists {
			gv.Exists, gv.Kind = true, v.Kind.String()
		}
		switch v.Kind {
		case contract.KindFloat:
			f, _ := strconv.ParseFloat(v.Float, 64)
			rv.Value = f
			fsum += f
			isFloat = true
		case contract.KindHash:
			if gv.Fields == nil {
				gv.Fields = map[string]int64{}
			}
			for _, f := range v.Fields {
				gv.Fields[f.Name] += f.Value
			}
		case contract.KindHLL:
			st, ok, err := r.export(ctx, i, eng, id)
			if err != nil {
				return GlobalView{}, err
			}
			if ok && st.Kind == contract.KindHLL {
				h, _ := counter.NewHLL(14)
				if err := h.UnmarshalBinary(st.Data); err != nil {
					return GlobalView{}, fmt.Errorf("region: %s's hll %q: %w", names[i], id, err)
				}
				if hll == nil {
					hll = h
				} else if err := hll.Merge(h); err != nil {
					return GlobalView{}, err
				}
			}
		default:
			sum += v.Value
		}
		gv.Regions = append(gv.Regions, rv)
	}
	switch {
	case hll != nil && gv.Kind == contract.KindHLL.String():
		gv.Value = int64(hll.Count())
		se := hll.StdError()
		gv.StdError = &se
	case isFloat:
		gv.Value = fsum + float64(sum)
	case gv.Kind == contract.KindHash.String():
		gv.Value = int64(0)
	default:
		gv.Value = sum
	}
	return gv, nil
}

// AggregateView is the answer to a global aggregate: Count counts a
// counter once per region that holds it.
type AggregateView struct {
	Prefix  string        `json:"prefix"`
	Scope   string        `json:"scope"`
	Value   int64         `json:"value"`
	Count   int           `json:"count"`
	Regions []RegionValue `json:"regions"`
}

// GlobalAggregate sums the counters whose id starts with prefix in every
// region (contract.Aggregate's rule in each).
func (r *Replicator) GlobalAggregate(ctx context.Context, prefix string) (AggregateView, error) {
	av := AggregateView{Prefix: prefix, Scope: ScopeGlobal}
	names, engs := r.regionStates()
	now := time.Now().UTC()
	for i, eng := range engs {
		var a contract.Aggregate
		var err error
		switch {
		case i == 0 && r.cfg.Cluster != nil:
			a, err = r.cfg.Cluster.Region.Aggregate(ctx, prefix) // the whole cluster's
		case i == 0 && r.cfg.Durable != nil:
			a, err = r.durableAggregate(ctx, prefix) // the whole region's
		default:
			a, err = eng.Aggregate(prefix)
		}
		if err != nil {
			return AggregateView{}, err
		}
		av.Value += a.Value
		av.Count += a.Count
		rv := RegionValue{Region: names[i], Local: i == 0, Exists: a.Count > 0, Value: a.Value, Kind: "aggregate"}
		if i == 0 {
			rv.AsOf = &now
		} else if asOf := r.asOf(names[i]); !asOf.IsZero() {
			rv.AsOf = &asOf
		}
		av.Regions = append(av.Regions, rv)
	}
	return av, nil
}

func (r *Replicator) asOf(name string) time.Time {
	p := r.peers[name]
	if p == nil {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	asOf := p.asOfLocked(time.Now())
	if asOf == 0 {
		return time.Time{}
	}
	return time.Unix(0, asOf).UTC()
}

// RegionNames lists this region and its peers.
func (r *Replicator) RegionNames() []string {
	return slices.Concat([]string{r.cfg.Name}, r.peerNames())
}
