package ratelimit

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/counterd/counterd/internal/glob"
)

// PolicyCost, as the cost of a policy check, means "each policy's Cost".
const PolicyCost = -1

// Policy attaches a limit to the keys it matches. A key is checked
// against every policy that matches it, in order, until a matching policy
// with Final set; all of them must allow the hit (they are checked
// atomically, see Limiter.CheckMulti).
type Policy struct {
	// Name is unique among the policies: 1..64 bytes of [A-Za-z0-9_.-].
	// It names the limit in headers (RateLimit-Policy) and its state:
	// changing a policy's numbers starts fresh state for its keys.
	Name string
	// Match is a glob on the whole key: * (any run), ? (one byte),
	// [abc], [^a-z], \ escapes. Empty: any key.
	Match string
	// Namespace, if set, requires the key's namespace (the part before
	// the first ':', which in counterd is also the tenant) to be equal.
	// At least one of Match and Namespace is required.
	Namespace string

	Algorithm Algorithm // default DefaultAlgorithm (in LoadPolicies and JSON)
	Limit     int64
	Period    time.Duration
	Burst     int64 // token_bucket and leaky_bucket only; 0 means Limit

	// Cost is what one hit costs under this policy when the check gives
	// no cost (PolicyCost). Default 1.
	Cost int64
	// Final stops the matching: later policies do not apply to a key this
	// one matches. Put specific policies (one customer) before general
	// ones (everyone) and mark them Final to override.
	Final bool
	// Scope is where the cluster decides the policy's checks: ScopeOwner
	// (default) on the key's owner, exactly; ScopeGlobalApprox on every
	// node from its share of the limit, within the overshoot bound of
	// docs/ratelimit.md ("Global limits"). fixed_window only.
	Scope Scope
}

// RateLimit returns the policy's Limit (named after the policy).
func (p Policy) RateLimit() Limit {
	return Limit{Name: p.Name, Algorithm: p.Algorithm, Limit: p.Limit, Period: p.Period, Burst: p.Burst, Scope: p.Scope}
}

// Validate reports whether the policy is usable; the error wraps
// ErrInvalidPolicy.
func (p Policy) Validate() error {
	if err := validatePolicyName(p.Name); err != nil {
		return err
	}
	if p.Match == "" && p.Namespace == "" {
		return errorf(ErrInvalidPolicy, "policy %q: match or namespace is required (match \"*\" for every key)", p.Name)
	}
	if len(p.Match) > MaxKeyLen {
		return errorf(ErrInvalidPolicy, "policy %q: match longer than %d bytes", p.Name, MaxKeyLen)
	}
	if strings.Contains(p.Namespace, ":") {
		return errorf(ErrInvalidPolicy, "policy %q: namespace %q contains ':'", p.Name, p.Namespace)
	}
	lim := p.RateLimit()
	sp, err := lim.spec()
	if err != nil {
		return errorf(ErrInvalidPolicy, "policy %q: %v", p.Name, strings.TrimPrefix(err.Error(), ErrInvalidLimit.Error()+": "))
	}
	if p.Cost < 0 || p.Cost > sp.capacity() {
		return errorf(ErrInvalidPolicy, "policy %q: cost %d out of range 0..%d", p.Name, p.Cost, sp.capacity())
	}
	return nil
}

// ValidatePolicyName checks a policy or limit name: 1..64 bytes of
// [A-Za-z0-9_.-]. Errors wrap ErrInvalidPolicy.
func ValidatePolicyName(name string) error { return validatePolicyName(name) }

func validatePolicyName(name string) error {
	if len(name) == 0 || len(name) > 64 {
		return errorf(ErrInvalidPolicy, "name must be 1..64 bytes, got %d", len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return errorf(ErrInvalidPolicy, "name %q: byte %d is not one of [A-Za-z0-9_.-]", name, i)
		}
	}
	return nil
}

// Matches reports whether the policy applies to key.
func (p *Policy) Matches(key string) bool {
	if p.Namespace != "" {
		ns, _, ok := strings.Cut(key, ":")
		if !ok || ns != p.Namespace {
			return false
		}
	}
	if p.Match == "" || p.Match == "*" {
		return true
	}
	return glob.Match(p.Match, key)
}

// policySet is an immutable list of valid policies.
type policySet struct {
	list   []Policy
	byName map[string]int
}

func compilePolicies(ps []Policy) (*policySet, error) {
	set := &policySet{list: make([]Policy, 0, len(ps)), byName: make(map[string]int, len(ps))}
	for _, p := range ps {
		if p.Cost == 0 {
			p.Cost = 1
		}
		if err := p.Validate(); err != nil {
			return nil, err
		}
		if _, dup := set.byName[p.Name]; dup {
			return nil, errorf(ErrInvalidPolicy, "policy %q defined twice", p.Name)
		}
		set.byName[p.Name] = len(set.list)
		set.list = append(set.list, p)
	}
	return set, nil
}

// Policies returns a copy of the policies, in matching order.
func (l *Limiter) Policies() []Policy {
	return append([]Policy(nil), l.pols.Load().list...)
}

// Policy returns the policy with the name.
func (l *Limiter) Policy(name string) (Policy, bool) {
	set := l.pols.Load()
	i, ok := set.byName[name]
	if !ok {
		return Policy{}, false
	}
	return set.list[i], true
}

// SetPolicies replaces all policies. On error nothing changes.
func (l *Limiter) SetPolicies(ps []Policy) error {
	set, err := compilePolicies(ps)
	if err != nil {
		return err
	}
	l.polMu.Lock()
	l.pols.Store(set)
	l.polMu.Unlock()
	return nil
}

// SetPolicy adds p, or replaces the policy of the same name in place.
func (l *Limiter) SetPolicy(p Policy) error {
	l.polMu.Lock()
	defer l.polMu.Unlock()
	old := l.pols.Load()
	ps := append([]Policy(nil), old.list...)
	if i, ok := old.byName[p.Name]; ok {
		ps[i] = p
	} else {
		ps = append(ps, p)
	}
	set, err := compilePolicies(ps)
	if err != nil {
		return err
	}
	l.pols.Store(set)
	return nil
}

// DeletePolicy removes the named policy and reports whether it existed.
func (l *Limiter) DeletePolicy(name string) bool {
	l.polMu.Lock()
	defer l.polMu.Unlock()
	old := l.pols.Load()
	i, ok := old.byName[name]
	if !ok {
		return false
	}
	ps := append(append([]Policy(nil), old.list[:i]...), old.list[i+1:]...)
	set, _ := compilePolicies(ps) // a subset of valid policies is valid
	l.pols.Store(set)
	return true
}

// AppendPolicyHits appends to dst the hits of key under policies: the
// named ones (which need not match the key), or, when names is empty,
// every policy that matches the key up to the first matching Final one.
// cost is the cost of each hit, or PolicyCost for each policy's Cost. The
// error wraps ErrUnknownPolicy for an unknown name and ErrNoPolicy when no
// policy matches.
func (l *Limiter) AppendPolicyHits(dst []Hit, key string, names []string, cost int64) ([]Hit, error) {
	set := l.pols.Load()
	hit := func(p *Policy) Hit {
		c := cost
		if c == PolicyCost {
			c = p.Cost
		}
		return Hit{Key: key, Limit: p.RateLimit(), Cost: c}
	}
	if len(names) > 0 {
		for _, n := range names {
			i, ok := set.byName[n]
			if !ok {
				return dst, errorf(ErrUnknownPolicy, "%q", n)
			}
			dst = append(dst, hit(&set.list[i]))
		}
		return dst, nil
	}
	n := len(dst)
	for i := range set.list {
		p := &set.list[i]
		if p.Matches(key) {
			dst = append(dst, hit(p))
			if p.Final {
				break
			}
		}
	}
	if len(dst) == n {
		return dst, errorf(ErrNoPolicy, "key %q", truncate(key, 64))
	}
	return dst, nil
}

// CheckPolicies checks key against policies (see AppendPolicyHits)
// atomically. out, if not nil, receives the status of each policy in the
// order AppendPolicyHits gives.
func (l *Limiter) CheckPolicies(key string, names []string, cost int64, out []Status) (Status, error) {
	var buf [8]Hit
	hits, err := l.AppendPolicyHits(buf[:0], key, names, cost)
	if err != nil {
		return Status{}, err
	}
	return l.CheckMulti(hits, out)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// PolicyDoc is the YAML and JSON form of a Policy; Policy validates it.
type PolicyDoc struct {
	Name      string `json:"name" yaml:"name"`
	Match     string `json:"match,omitempty" yaml:"match"`
	Namespace string `json:"namespace,omitempty" yaml:"namespace"`
	Algorithm string `json:"algorithm" yaml:"algorithm"`
	Limit     int64  `json:"limit" yaml:"limit"`
	Period    string `json:"period" yaml:"period"`
	Burst     int64  `json:"burst,omitempty" yaml:"burst"`
	Cost      int64  `json:"cost,omitempty" yaml:"cost"`
	Final     bool   `json:"final,omitempty" yaml:"final"`
	Scope     string `json:"scope,omitempty" yaml:"scope"` // "owner" (default) or "global-approx"
}

func (d *PolicyDoc) Policy() (Policy, error) {
	p := Policy{Name: d.Name, Match: d.Match, Namespace: d.Namespace, Limit: d.Limit, Burst: d.Burst, Cost: d.Cost, Final: d.Final}
	p.Algorithm = DefaultAlgorithm
	if d.Algorithm != "" {
		a, err := ParseAlgorithm(d.Algorithm)
		if err != nil {
			return p, errorf(ErrInvalidPolicy, "policy %q: unknown algorithm %q", d.Name, d.Algorithm)
		}
		p.Algorithm = a
	}
	if d.Scope != "" {
		sc, err := ParseScope(d.Scope)
		if err != nil {
			return p, errorf(ErrInvalidPolicy, "policy %q: %v", d.Name, err)
		}
		p.Scope = sc
	}
	per, err := ParsePeriod(d.Period)
	if err != nil {
		return p, errorf(ErrInvalidPolicy, "policy %q: %v", d.Name, err)
	}
	p.Period = per
	if p.Cost == 0 {
		p.Cost = 1
	}
	return p, p.Validate()
}

func docOf(p *Policy) PolicyDoc {
	d := PolicyDoc{Name: p.Name, Match: p.Match, Namespace: p.Namespace, Limit: p.Limit,
		Period: FormatPeriod(p.Period), Burst: p.Burst, Cost: p.Cost, Final: p.Final}
	if p.Algorithm != 0 {
		d.Algorithm = p.Algorithm.String()
	}
	if p.Scope != ScopeOwner {
		d.Scope = p.Scope.String()
	}
	return d
}

// ParsePeriod parses a positive Go duration ("1s", "1m", "24h", "1500ms").
func ParsePeriod(s string) (time.Duration, error) {
	if s == "" {
		return 0, errors.New("period is required")
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, errors.New("period " + strconv.Quote(s) + " is not a positive duration such as 1s, 1m, 24h")
	}
	return d, nil
}

// FormatPeriod formats d in the largest whole unit: "24h", "1m", "1s",
// "1500ms"; else as time.Duration does.
func FormatPeriod(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

// MarshalJSON writes the policy in its documented JSON form (period as a
// duration string).
func (p Policy) MarshalJSON() ([]byte, error) { return json.Marshal(docOf(&p)) }

// UnmarshalJSON reads the JSON form strictly (no unknown fields) and
// validates the policy.
func (p *Policy) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var d PolicyDoc
	if err := dec.Decode(&d); err != nil {
		return errorf(ErrInvalidPolicy, "%s", strings.TrimPrefix(err.Error(), "json: "))
	}
	v, err := d.Policy()
	if err != nil {
		return err
	}
	*p = v
	return nil
}

// policyFile is the YAML file: a list under "policies".
type policyFile struct {
	Policies []PolicyDoc `yaml:"policies"`
}

// LoadPolicies reads policies from YAML (docs/ratelimit.md):
//
//	policies:
//	  - name: api-per-second
//	    match: "api:*"
//	    algorithm: token_bucket
//	    limit: 10
//	    period: 1s
//	    burst: 20
//
// Unknown fields, duplicate names and invalid policies are errors wrapping
// ErrInvalidPolicy. An empty document has no policies.
func LoadPolicies(r io.Reader) ([]Policy, error) {
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	var f policyFile
	if err := dec.Decode(&f); err != nil && err != io.EOF {
		return nil, errorf(ErrInvalidPolicy, "yaml: %s", strings.TrimPrefix(err.Error(), "yaml: "))
	}
	ps := make([]Policy, 0, len(f.Policies))
	for i := range f.Policies {
		p, err := f.Policies[i].Policy()
		if err != nil {
			return nil, err
		}
		ps = append(ps, p)
	}
	if _, err := compilePolicies(ps); err != nil {
		return nil, err
	}
	return ps, nil
}
