package ratelimit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/counterd/counterd/internal/records"
)

// PolicySpace is the records space that holds the policies.
const PolicySpace = "ratelimit/policy"

// RecordPolicies is a PolicyStore kept in a backend's named records
// (records.Store, space PolicySpace), one record per policy, its value the
// policy's JSON form (with the cost always written), in matching order. The tiered mode's backend keeps
// them in PostgreSQL, shared by every node; the store knows nothing of
// policies.
type RecordPolicies struct{ st records.Store }

var _ PolicyStore = RecordPolicies{}

// NewRecordPolicies returns the PolicyStore kept in st.
func NewRecordPolicies(st records.Store) RecordPolicies { return RecordPolicies{st} }

// LoadPolicies returns the policies in matching order. A record that is
// not a valid policy (edited by hand) fails with ErrInvalidPolicy.
func (r RecordPolicies) LoadPolicies(ctx context.Context) ([]Policy, error) {
	recs, err := r.st.Records(ctx, PolicySpace)
	if err != nil {
		return nil, err
	}
	ps := make([]Policy, len(recs))
	for i, rec := range recs {
		if ps[i], err = decodeStoredPolicy(rec.Value); err != nil {
			return nil, fmt.Errorf("stored policy %q: %w", rec.Name, err)
		}
		if ps[i].Name != rec.Name {
			return nil, errorf(ErrInvalidPolicy, "stored policy %q is named %q", rec.Name, ps[i].Name)
		}
	}
	if err := ValidatePolicies(ps); err != nil {
		return nil, err
	}
	return ps, nil
}

// storedPolicy is a policy's record: its JSON form with the cost always
// written (the JSON form omits a cost of 0, which would read back as 1).
type storedPolicy struct {
	PolicyDoc
	Cost int64 `json:"cost"`
}

func decodeStoredPolicy(b []byte) (Policy, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var sp storedPolicy
	if err := dec.Decode(&sp); err != nil {
		return Policy{}, errorf(ErrInvalidPolicy, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	p, err := sp.PolicyDoc.Policy()
	if err != nil {
		return p, err
	}
	p.Cost = sp.Cost
	return p, p.Validate()
}

func policyRecords(ps []Policy) ([]records.Record, error) {
	recs := make([]records.Record, len(ps))
	for i := range ps {
		b, err := json.Marshal(storedPolicy{docOf(&ps[i]), ps[i].Cost})
		if err != nil {
			return nil, errorf(ErrInvalidPolicy, "policy %q: %v", ps[i].Name, err)
		}
		recs[i] = records.Record{Name: ps[i].Name, Value: b}
	}
	return recs, nil
}

// PutPolicy adds p at the end, or replaces the policy of that name in
// its place.
func (r RecordPolicies) PutPolicy(ctx context.Context, p Policy) error {
	if err := ValidatePolicies([]Policy{p}); err != nil {
		return err
	}
	recs, err := policyRecords([]Policy{p})
	if err != nil {
		return err
	}
	return r.st.PutRecords(ctx, PolicySpace, recs)
}

// DeletePolicy removes the named policy.
func (r RecordPolicies) DeletePolicy(ctx context.Context, name string) (bool, error) {
	return r.st.DeleteRecord(ctx, PolicySpace, name)
}

// ReplacePolicies replaces every policy at once; concurrent readers see
// the old list or the new one.
func (r RecordPolicies) ReplacePolicies(ctx context.Context, ps []Policy) error {
	if err := ValidatePolicies(ps); err != nil {
		return err
	}
	recs, err := policyRecords(ps)
	if err != nil {
		return err
	}
	return r.st.ReplaceRecords(ctx, PolicySpace, recs)
}
